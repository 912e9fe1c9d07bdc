#include "trainer.hpp"

#include "comm.hpp"
#include "data.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "metrics.hpp"
#include "model.hpp"
#include "optimizer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <ostream>
#include <unistd.h>

namespace minigpt {

namespace {
double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Ranks on the same (possibly fake) node: Slurm's node name when there is one, else the host name.
int node_color() {
    std::string name;
    if (const char* s = std::getenv("SLURMD_NODENAME")) name = s;
    if (name.empty()) {
        char host[256] = {};
        gethostname(host, sizeof(host) - 1);
        name = host;
    }
    return static_cast<int>(hash_str(name) & 0x7fffffff);
}
} // namespace

TrainResult train(Config cfg, std::ostream& out) {
    Group world = Group::world();
    const int dp = world.size(), rank = world.rank();
    cfg.validate(dp);
    if (cfg.global_batch == 0) cfg.global_batch = cfg.micro_batch * cfg.grad_accum * dp;
    Eigen::setNbThreads(cfg.threads);
    omp_set_num_threads(cfg.threads);

    // Expert parallelism: consecutive ranks form an EP group; ranks with the same EP rank reduce expert
    // grads.
    const Group ep = world.split(rank / cfg.ep_size, rank);
    const Group expert_dp = world.split(rank % cfg.ep_size, rank);
    const Group node = world.split(node_color(), rank);
    int nodes = 0;
    const int leader = node.rank() == 0 ? 1 : 0;
    MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, world.comm());

    ParamStore ps;
    Model model(ps, cfg.model, cfg.recompute, cfg.threads, ep);
    ps.finalize(cfg.seed, 0.02f);
    GradSync sync(ps, world, expert_dp, cfg.bucket_mb, cfg.overlap);
    AdamW opt(ps, world, expert_dp, cfg.zero1);
    const SyntheticCorpus corpus(cfg.seed, cfg.model.vocab);

    // Peak FLOP/s of the whole run: declared per node, or every rank probes at once (so ranks sharing cores
    // see each other) and the rates add up.
    double peak_flops = 0;
    std::string peak_source;
    if (cfg.peak_gflops > 0) {
        peak_flops = cfg.peak_gflops * 1e9 * nodes;
        peak_source = "declared";
    } else {
        world.barrier();
        double g = gemm_probe_gflops(cfg.threads, 0.3) * 1e9;
        MPI_Allreduce(MPI_IN_PLACE, &g, 1, MPI_DOUBLE, MPI_SUM, world.comm());
        peak_flops = g;
        peak_source = "gemm_probe";
    }
    Eigen::setNbThreads(cfg.threads);

    const int T = cfg.model.seq_len;
    const double tokens = static_cast<double>(cfg.global_batch) * T;
    const float loss_scale = static_cast<float>(1.0 / tokens);
    const float aux_weight = cfg.model.aux_coef / static_cast<float>(cfg.grad_accum * dp);
    const double model_flops = flops_per_token(cfg.model) * tokens;
    const MemoryEstimate est = estimate_memory(cfg, dp);

    TrainResult result;
    std::vector<double> phase_sums(5, 0.0);
    long long peak_rank = 0, peak_node = 0;
    std::size_t activations = 0; // largest activation caches held after a forward, this rank
    for (int step = 0; step < cfg.steps; ++step) {
        world.barrier(); // steps start together, so a rank's step time is the job's
        const double t0 = now(), c0 = comm_seconds();
        double fwd = 0, bwd = 0, data_s = 0, opt_s = 0;
        double sums[2] = {0, 0}; // cross-entropy sum, aux loss sum
        ps.zero_grad();
        for (int a = 0; a < cfg.grad_accum; ++a) {
            const double td = now();
            const Batch batch = make_batch(corpus, step, cfg.global_batch, dp, rank, a, cfg.micro_batch, T);
            data_s += now() - td;
            const bool last = a + 1 == cfg.grad_accum;
            if (last) sync.begin_last_backward();
            const auto r = model.step(batch, loss_scale, aux_weight, last ? &sync : nullptr);
            activations = std::max(activations, r.activation_bytes);
            fwd += r.forward_s;
            bwd += r.backward_s;
            sums[0] += r.loss_sum;
            sums[1] += r.aux;
        }
        sync.finish();
        const double to = now(), co = comm_seconds();
        const float lr =
            cfg.lr * std::min(1.0f, static_cast<float>(step + 1) / std::max(1, cfg.warmup_steps));
        opt.step(step + 1, lr);
        opt_s = now() - to - (comm_seconds() - co);
        world.allreduce_sum(sums, 2);
        const double step_time = now() - t0;
        const double comm_s = comm_seconds() - c0;

        // Memory: the largest rank, and the largest node (sum of its ranks) for cgroup-style limits.
        const long long mine = peak_rss_bytes();
        long long on_node = mine;
        MPI_Allreduce(&mine, &on_node, 1, MPI_LONG_LONG, MPI_SUM, node.comm());
        peak_rank = world.allreduce_max(mine);
        peak_node = world.allreduce_max(on_node);

        const double loss = sums[0] / tokens;
        result.losses.push_back(loss);
        result.step_times.push_back(step_time);
        phase_sums[0] += fwd, phase_sums[1] += bwd, phase_sums[2] += comm_s, phase_sums[3] += opt_s,
            phase_sums[4] += data_s;
        if (rank == 0) {
            nlohmann::json j = {{"step", step},
                                {"loss", loss},
                                {"step_time_s", step_time},
                                {"phases",
                                 {{"forward_s", fwd},
                                  {"backward_s", bwd},
                                  {"comm_s", comm_s},
                                  {"optimizer_s", opt_s},
                                  {"data_s", data_s}}},
                                {"tokens", static_cast<long long>(tokens)},
                                {"tokens_per_s", tokens / step_time},
                                {"model_flops", model_flops},
                                {"mfu", model_flops / step_time / peak_flops},
                                {"peak_rss_bytes", peak_rank},
                                {"peak_rss_node_bytes", peak_node}};
            if (cfg.model.moe) j["aux_loss"] = sums[1] / (cfg.grad_accum * dp * cfg.model.n_layers);
            out << "INFRARSI_STEP " << j.dump() << '\n' << std::flush;
        }
    }
    const long long activations_max = world.allreduce_max(static_cast<long long>(activations));
    if (rank == 0) {
        const int skip = std::min(cfg.timing_warmup, std::max(0, cfg.steps - 1));
        const std::vector<double> steady(result.step_times.begin() + skip, result.step_times.end());
        const double med = median(steady);
        nlohmann::json config = cfg.to_json();
        config["dp_size"] = dp;
        config["nodes"] = nodes;
        nlohmann::json s = {{"config", config},
                            {"steps", cfg.steps},
                            {"timing_warmup_steps", skip},
                            {"median_step_time_s", med},
                            {"tokens_per_s", tokens / med},
                            {"model_flops_per_step", model_flops},
                            {"active_params", active_params(cfg.model)},
                            {"params", ps.count() * 1.0},
                            {"mfu", model_flops / med / peak_flops},
                            {"peak_flops", peak_flops},
                            {"peak_flops_per_node", peak_flops / nodes},
                            {"peak_flops_source", peak_source},
                            {"peak_rss_bytes", peak_rank},
                            {"peak_rss_node_bytes", peak_node},
                            {"estimated_peak_bytes", est.per_node_bytes},
                            {"estimated_peak_rank_bytes", est.per_rank_bytes},
                            {"activation_bytes", activations_max},
                            {"final_loss", result.losses.empty() ? 0.0 : result.losses.back()},
                            {"grad_buckets", sync.buckets()},
                            {"phase_totals_s",
                             {{"forward_s", phase_sums[0]},
                              {"backward_s", phase_sums[1]},
                              {"comm_s", phase_sums[2]},
                              {"optimizer_s", phase_sums[3]},
                              {"data_s", phase_sums[4]}}}};
        out << "INFRARSI_SUMMARY " << s.dump() << '\n' << std::flush;
    }
    return result;
}

} // namespace minigpt
