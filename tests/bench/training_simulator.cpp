#include "training_simulator.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace infrarsi::model {
namespace {

const std::vector<std::string> kRecompute = {"none", "selective", "full"};

FeatureEncoding simulator_encoding() {
    using K = KnobSpec::Kind;
    using M = MemoryEffect;
    // Memory declarations are the physical claims a user would make; tp, pp and vpp change the number of
    // in-flight micro-batches as well as the shard sizes, so they are not declared monotone.
    return FeatureEncoding(
        {
            {"tp", K::power_of_two, {"1", "2", "4", "8"}, M::unordered, false},
            {"pp", K::power_of_two, {"1", "2", "4", "8", "16", "32"}, M::unordered, false},
            {"vpp", K::power_of_two, {"1", "2"}, M::increasing, false},
            {"mb", K::power_of_two, {"1", "2", "4", "8", "16"}, M::increasing, false},
            {"recompute", K::choice, kRecompute, M::decreasing, true},
            {"zero", K::choice, {"0", "1", "2", "3"}, M::decreasing, true},
            {"bucket_mb", K::power_of_two, {"16", "64", "256"}, M::increasing, false},
        },
        {
            {"flash_attention", M::decreasing, true},
            {"sequence_parallel", M::decreasing, true},
            {"overlap_grad_reduce", M::increasing, false},
            {"fused_optimizer", M::none, false},
        });
}

std::uint64_t pack(const SimulatedConfig& c) {
    auto l2 = [](int v) { return static_cast<std::uint64_t>(std::log2(v)); };
    return l2(c.tp) | l2(c.pp) << 3 | l2(c.vpp) << 6 | l2(c.mb) << 8 |
           static_cast<std::uint64_t>(c.recompute) << 12 | static_cast<std::uint64_t>(c.zero) << 14 |
           l2(c.bucket_mb) << 17 | static_cast<std::uint64_t>(c.flash_attention) << 22 |
           static_cast<std::uint64_t>(c.sequence_parallel) << 23 |
           static_cast<std::uint64_t>(c.overlap_grad_reduce) << 24 |
           static_cast<std::uint64_t>(c.fused_optimizer) << 25;
}

} // namespace

std::vector<SimulatorSpec> TrainingSimulator::presets() {
    SimulatorSpec a;
    a.name = "sim-gpt7b-64";
    a.layers = 32, a.hidden = 4096, a.heads = 32, a.seq = 4096, a.gpus = 64, a.global_batch = 512;
    SimulatorSpec b;
    b.name = "sim-gpt20b-256";
    b.layers = 48, b.hidden = 6144, b.heads = 48, b.seq = 4096, b.gpus = 256, b.global_batch = 1024;
    SimulatorSpec c;
    c.name = "sim-gpt175b-1024";
    c.layers = 96, c.hidden = 12288, c.heads = 96, c.seq = 2048, c.gpus = 1024, c.global_batch = 1536;
    return {a, b, c};
}

bool TrainingSimulator::valid(const SimulatedConfig& c) const {
    const auto& s = spec_;
    if (c.tp * c.pp > s.gpus || s.gpus % (c.tp * c.pp) != 0) return false;
    if (s.heads % c.tp != 0 || s.layers % c.pp != 0) return false;
    int dp = s.gpus / (c.tp * c.pp);
    if (dp * c.mb > s.global_batch || s.global_batch % (dp * c.mb) != 0) return false;
    int m = s.global_batch / (dp * c.mb);
    // Megatron's interleaved schedule needs several pipeline stages, whole layers per virtual stage and a
    // micro-batch count that is a multiple of the stages.
    if (c.vpp > 1 && (c.pp == 1 || (s.layers / c.pp) % c.vpp != 0 || m % c.pp != 0)) return false;
    return true;
}

double TrainingSimulator::step_time(const SimulatedConfig& c) const {
    const auto& s = spec_;
    const double h = s.hidden, seq = s.seq, a = s.heads, t = c.tp, p = c.pp, v = c.vpp, b = c.mb;
    const double dp = s.gpus / (t * p);
    const double m = s.global_batch / (dp * b);
    const double layers_per_stage = s.layers / p;

    // GEMM efficiency falls for short token counts and narrow TP shards.
    double tokens = b * seq, width = h / t;
    double eff = 0.75 * tokens / (tokens + 1024.0) * width / (width + 256.0);
    double rate = s.peak_flops * eff;
    // Per layer, forward: 24 b s h^2 + 4 b s^2 h FLOPs (Narayanan et al. 2021, eq. 3), split over TP.
    double fwd_flops = (24.0 * b * seq * h * h + 4.0 * b * seq * seq * h) / t;
    double fwd = fwd_flops / rate;
    if (!c.flash_attention) // unfused softmax/dropout over the b a s^2 score matrix is memory-bound
        fwd += 12.0 * b * a * seq * seq / t / s.hbm_bandwidth;
    // LayerNorm and dropout: memory-bound, divided over TP only with sequence parallelism.
    fwd += 40.0 * b * seq * h / (c.sequence_parallel ? t : 1.0) / s.hbm_bandwidth;
    double bwd = 2.0 * fwd;
    double recompute = 0;
    if (c.recompute == 2)
        recompute = fwd; // full: one more forward (Korthikanti et al. 2022, section 5)
    else if (c.recompute == 1 && !c.flash_attention)
        recompute = (4.0 * b * seq * seq * h / t) / rate + 12.0 * b * a * seq * seq / t / s.hbm_bandwidth;
    // TP: two all-reduces of b s h bf16 values forward and two backward per layer (two more to recompute).
    double tp_comm = 0;
    if (c.tp > 1) {
        double bytes = 2.0 * b * seq * h;
        double one = 2.0 * (t - 1) / t * bytes / s.nvlink_bandwidth + 20e-6;
        tp_comm = one * (4 + (c.recompute == 2 ? 2 : 0));
    }
    double per_mb_layer = fwd + bwd + recompute + tp_comm;
    double stage = layers_per_stage * per_mb_layer;
    // Last stage: logits and loss, 2 b s h V FLOPs forward, three times that with backward.
    double logits = 3.0 * 2.0 * b * seq * h * s.vocab / t / rate;
    double slowest = stage + logits;
    // P2P between stages: b s h bf16 activations each way, scatter/gathered over TP.
    double p2p = 0;
    if (c.pp > 1) {
        bool across_nodes = t * dp >= s.gpus_per_node;
        double bw = across_nodes ? s.network_bandwidth : s.nvlink_bandwidth;
        p2p = 2.0 * (2.0 * b * seq * h / t) / bw + 30e-6;
    }
    // 1F1B: (m + p - 1) slots; interleaved: bubble shrinks by v, P2P grows by v (Narayanan et al. 2021, 2.2).
    double pipeline = (m + (p - 1) / v) * (slowest + v * p2p);

    // Data parallel gradient reduction (ring: 2 (d-1)/d of the bytes), bf16 gradients.
    double params_stage = layers_per_stage * 12.0 * h * h + s.vocab * h;
    double grad_bytes = 2.0 * params_stage / t;
    double dp_bw = t * dp <= s.gpus_per_node ? s.nvlink_bandwidth : s.network_bandwidth;
    double exposed_dp = 0, zero3 = 0;
    if (dp > 1) {
        double volume = 2.0 * (dp - 1) / dp * grad_bytes * (c.zero == 3 ? 1.5 : 1.0);
        double buckets = std::ceil(grad_bytes / (c.bucket_mb * 1048576.0));
        double latency = buckets * 25e-6 * (1 + std::log2(dp));
        double dp_time = volume / dp_bw + latency;
        if (c.overlap_grad_reduce) {
            // Overlaps with the backward pass of the last micro-batch; the last bucket cannot overlap.
            double window = 0.9 * layers_per_stage * (bwd + recompute);
            double last_bucket = std::min(grad_bytes, c.bucket_mb * 1048576.0) * 2.0 * (dp - 1) / dp / dp_bw;
            exposed_dp = std::max(last_bucket, dp_time - window) + 0.03 * window;
        } else {
            exposed_dp = dp_time;
        }
        if (c.zero == 3) { // parameters gathered for forward and backward of every micro-batch, prefetched
            double gather = 2.0 * (2.0 * params_stage / t) * (dp - 1) / dp / dp_bw;
            zero3 =
                m * std::max(0.15 * gather, gather - 0.8 * (slowest / layers_per_stage) * layers_per_stage);
        }
    }
    // Optimizer: memory-bound over the parameters this rank updates; unfused Adam reads/writes more.
    double updated = params_stage / t / (c.zero >= 1 ? dp : 1.0);
    double optimizer = 32.0 * updated / s.hbm_bandwidth * (c.fused_optimizer ? 1.0 : 2.5) +
                       (c.fused_optimizer ? 0.0 : 12.0 * layers_per_stage * 5e-6);
    return pipeline + exposed_dp + zero3 + optimizer + 0.02;
}

double TrainingSimulator::comm_fraction(const SimulatedConfig& c) const {
    // Rough share of jitter-prone communication: inter-node data parallelism, pipeline P2P, ZeRO-3 gathers.
    double dp = spec_.gpus / double(c.tp * c.pp);
    double share =
        (c.tp * dp > spec_.gpus_per_node ? 0.5 : 0.1) + (c.pp > 1 ? 0.2 : 0.0) + (c.zero == 3 ? 0.3 : 0.0);
    return std::min(1.0, share);
}

double TrainingSimulator::peak_bytes(const SimulatedConfig& c, bool prior) const {
    const auto& s = spec_;
    const double h = s.hidden, seq = s.seq, a = s.heads, t = c.tp, p = c.pp, v = c.vpp, b = c.mb;
    const double dp = s.gpus / (t * p);
    const double m = s.global_batch / (dp * b);
    const double layers_per_stage = s.layers / p;
    // Model states of the first stage (it also holds the embedding), mixed-precision Adam: 2 + 2 + 12 bytes
    // per parameter, sharded by ZeRO stage (Rajbhandari et al. 2020, section 3).
    double psi = (layers_per_stage * 12.0 * h * h + s.vocab * h) / t;
    double states = 0;
    switch (c.zero) {
    case 0:
        states = 16 * psi;
        break;
    case 1:
        states = 4 * psi + 12 * psi / dp;
        break;
    case 2:
        states = 2 * psi + 14 * psi / dp;
        break;
    default:
        states = 16 * psi / dp;
        break;
    }
    // Activations per layer and micro-batch, bytes = s b h x coefficient (Korthikanti et al. 2022, table 2).
    // The prior uses the table; the "truth" saves about 30% more (extra saved tensors of a real stack).
    double undercount = prior ? 1.0 : 1.3;
    double sbh = seq * b * h;
    double attention = (c.recompute >= 1 || c.flash_attention) ? 0.0 : 5.0 * a * seq / (h * t);
    double linear = c.sequence_parallel ? 34.0 / t : 10.0 + 24.0 / t;
    double per_layer = 0;
    if (c.recompute == 2)
        per_layer = sbh * 2.0 / (c.sequence_parallel ? t : 1.0) * undercount;
    else
        per_layer = sbh * (linear * undercount + attention);
    // 1F1B: the first stage holds min(p, m) micro-batches; interleaving adds (1 + (p-1)/(p v)) (4.2.3).
    double in_flight = std::min(p, m) * layers_per_stage * (v > 1 ? 1.0 + (p - 1) / (p * v) : 1.0);
    double activations = per_layer * in_flight;
    if (prior) return states + activations + 1.5e9; // plus a nominal workspace

    // What the analytic estimate leaves out.
    double working = c.recompute == 2 ? sbh * (linear * undercount + attention) : 0.0; // recomputed layer
    double buffers = (c.overlap_grad_reduce ? 4.0 : 2.0) * c.bucket_mb * 1048576.0;
    double workspace = 2.5e9; // CUDA context, NCCL and cuBLAS workspaces
    double first = states + activations + working;
    // Last stage: fewer in-flight micro-batches, but fp32 logits for the loss (4 bytes, over TP).
    double logits = 4.0 * b * seq * s.vocab / t;
    double last = (p > 1 ? states + per_layer * layers_per_stage + working : first) + logits;
    double fragmentation = 1.05 + 0.015 * std::log2(b);
    return (std::max(first, last) + buffers) * fragmentation + workspace;
}

TrainingSimulator::TrainingSimulator(SimulatorSpec spec)
    : spec_(std::move(spec)), encoding_(simulator_encoding()) {
    if (spec_.gpus < 1 || spec_.layers < 1 || spec_.global_batch < 1)
        throw Error("simulator spec '" + spec_.name + "' is incomplete", "TrainingSimulator");
    for (int tp : {1, 2, 4, 8})
        for (int pp : {1, 2, 4, 8, 16, 32})
            for (int vpp : {1, 2})
                for (int mb : {1, 2, 4, 8, 16})
                    for (int rc = 0; rc < 3; ++rc)
                        for (int zero = 0; zero < 4; ++zero)
                            for (int bucket : {16, 64, 256})
                                for (int patches = 0; patches < 16; ++patches) {
                                    SimulatedConfig c{tp,
                                                      pp,
                                                      vpp,
                                                      mb,
                                                      rc,
                                                      zero,
                                                      bucket,
                                                      bool(patches & 1),
                                                      bool(patches & 2),
                                                      bool(patches & 4),
                                                      bool(patches & 8)};
                                    if (valid(c)) configs_.push_back(c);
                                }
    std::unordered_map<std::uint64_t, int> index;
    candidates_.resize(configs_.size());
    step_time_.resize(configs_.size());
    peak_.resize(configs_.size());
    comm_.resize(configs_.size());
    for (size_t i = 0; i < configs_.size(); ++i) {
        index[pack(configs_[i])] = static_cast<int>(i);
        Configuration cfg = configuration(static_cast<int>(i));
        auto& cand = candidates_[i];
        cand.id = encoding_.describe(cfg);
        cand.features = encoding_.encode(cfg);
        cand.memory_key = encoding_.memory_key(cfg);
        cand.memory_unknown = encoding_.memory_unknown(cfg);
        cand.prior_peak_bytes = peak_bytes(configs_[i], true);
        step_time_[i] = step_time(configs_[i]);
        peak_[i] = peak_bytes(configs_[i], false);
        comm_[i] = comm_fraction(configs_[i]);
    }
    // Declared memory savers, one step: more recompute, a higher ZeRO stage, fused attention, sequence
    // parallelism (only where it changes something: TP > 1).
    for (size_t i = 0; i < configs_.size(); ++i) {
        auto add = [&](SimulatedConfig s, std::string what) {
            auto it = index.find(pack(s));
            if (it != index.end()) candidates_[i].savers.push_back({it->second, std::move(what)});
        };
        const auto& c = configs_[i];
        if (c.recompute < 2) {
            auto s = c;
            s.recompute++;
            add(s, "recompute=" + kRecompute[s.recompute]);
        }
        if (c.zero < 3 && spec_.gpus / (c.tp * c.pp) > 1) {
            auto s = c;
            s.zero++;
            add(s, "zero=" + std::to_string(s.zero));
        }
        if (!c.flash_attention) {
            auto s = c;
            s.flash_attention = true;
            add(s, "+flash_attention");
        }
        if (!c.sequence_parallel && c.tp > 1) {
            auto s = c;
            s.sequence_parallel = true;
            add(s, "+sequence_parallel");
        }
    }
    for (int i = 0; i < size(); ++i)
        if (fits(i) && (best_ < 0 || step_time_[i] < step_time_[best_])) best_ = i;
    if (best_ < 0)
        throw Error("no configuration of '" + spec_.name + "' fits in memory", "TrainingSimulator");
    for (int pp : {1, 2, 4, 8, 16, 32}) {
        SimulatedConfig c{8, pp, 1, 1, 2, 1, 64, false, false, false, false};
        auto it = index.find(pack(c));
        if (valid(c) && it != index.end() && fits(it->second)) {
            baseline_ = it->second;
            break;
        }
    }
    if (baseline_ < 0) throw Error("no baseline of '" + spec_.name + "' fits in memory", "TrainingSimulator");
}

Configuration TrainingSimulator::configuration(int i) const {
    const auto& c = configs_.at(i);
    Configuration cfg;
    cfg.knobs = {{"tp", std::to_string(c.tp)},
                 {"pp", std::to_string(c.pp)},
                 {"vpp", std::to_string(c.vpp)},
                 {"mb", std::to_string(c.mb)},
                 {"recompute", kRecompute[c.recompute]},
                 {"zero", std::to_string(c.zero)},
                 {"bucket_mb", std::to_string(c.bucket_mb)}};
    if (c.flash_attention) cfg.patches.insert("flash_attention");
    if (c.sequence_parallel) cfg.patches.insert("sequence_parallel");
    if (c.overlap_grad_reduce) cfg.patches.insert("overlap_grad_reduce");
    if (c.fused_optimizer) cfg.patches.insert("fused_optimizer");
    return cfg;
}

TrialObservation TrainingSimulator::run(int i, std::mt19937_64& rng) const {
    TrialObservation t;
    t.candidate = i;
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::normal_distribution<double> z(0.0, 1.0);
    double nominal = step_time_[i];
    if (!fits(i)) {
        t.outcome = ObservationKind::oom;
        // Killed after start-up and part of the run (near-limit reclaim can make it slow before the kill).
        t.cost_s = spec_.startup_s + (0.1 + 0.5 * u(rng)) * spec_.trial_steps * nominal;
        return t;
    }
    double sd = 0.012 + 0.02 * comm_[i];
    double noisy = nominal * std::exp(sd * z(rng));
    if (u(rng) < 0.03) noisy *= 1.05 + 0.2 * u(rng); // straggler node
    t.outcome = ObservationKind::ok;
    t.step_time_s = noisy;
    t.peak_bytes = peak_[i] * (1.0 + 0.003 * z(rng));
    t.cost_s = spec_.startup_s + spec_.trial_steps * noisy;
    return t;
}

} // namespace infrarsi::model
