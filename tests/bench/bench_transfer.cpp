// bench_transfer: does the experience bank make a campaign on new hardware start closer to the optimum, and
// does it stay harmless on dissimilar hardware? (run by scripts/bench-transfer)
//
// 1. Our tuner runs a full budget on hardware A; its best configurations are re-verified and recorded as
//    `knob_setting` findings (speedup, lo, memory_ratio = measured peak / limit) in a fresh bank keyed by
//    A's HardwareKey.
// 2. For a similar machine A' and a dissimilar one B, bank.priors() gives the findings weighted by
//    similarity (hypotheses on B). Each becomes a hint: the same configuration when its estimated peak on
//    the target keeps the recorded memory ratio, else the same parallel layout with the largest setting of
//    micro-batch and recompute that does (capacity settings carried as a rule relative to memory).
// 3. Over seeds: trials until a configuration within 5% of the target's best feasible one has run, warm
//    (ModelTuner with the bank hints, then the baseline) vs cold (the baseline only, as in bench_tuners),
//    with the run loop and statistics of tuners.hpp.
#include "bank/experience_bank.hpp"
#include "bank/similarity.hpp"
#include "environment.hpp"
#include "node/topology.hpp"
#include "tuners.hpp"
#include "util/error.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::bench;

namespace {

constexpr const char* kWorkload = "sim-gpt7b";
constexpr double kRatioMargin = 0.02; // an inherited memory ratio may be exceeded by this much

bank::HardwareKey hardware_key(const std::string& synthetic, double accelerator_bytes) {
    bank::HardwareKey k;
    k.topology = node::topology_from_synthetic(synthetic);
    k.accelerator_memory_bytes = accelerator_bytes;
    k.stack = {"g++ 12.2.0", "Open MPI 4.1.4", "2.18.3", std::string(kWorkload) + " v1"};
    return k;
}

struct Target {
    std::string label;
    model::SimulatorSpec spec;
    bank::HardwareKey key;
};

// A verified configuration of A: repeated `repeats` times, all ok.
struct Verified {
    int candidate = -1;
    double median_s = 0, peak_bytes = 0;
};

// The bank's hint for one prior on a target, or -1 when no configuration of that layout keeps the ratio.
struct Hint {
    int candidate = -1;
    std::string how; // "same", "adjusted ...", "no fit"
};

Hint hint_for(const bank::Prior& p, const SimulatorEnvironment& t) {
    const auto& c = p.finding.content;
    model::Configuration want;
    for (const auto& [k, v] : c.at("knobs").items())
        want.knobs[k] = v.get<std::string>();
    for (const auto& v : c.at("patches"))
        want.patches.insert(v.get<std::string>());
    const double ratio = c.at("memory_ratio").get<double>();
    const double factor = c.at("estimate_factor").get<double>(); // measured / estimated peak on the source
    const double limit = t.memory_limit_bytes();
    auto predicted_ratio = [&](int i) { return t.candidates()[i].prior_peak_bytes * factor / limit; };
    const double allowed = std::min(ratio + kRatioMargin, 0.98);
    int same = t.find(want);
    if (same >= 0 && predicted_ratio(same) <= allowed) return {same, "same"};
    // Same parallel layout and patches; the largest micro-batch/recompute setting that keeps the ratio.
    int best = -1;
    double best_ratio = -1;
    for (const char* rc : {"none", "selective", "full"})
        for (int mb : {1, 2, 4, 8, 16}) {
            auto cfg = want;
            cfg.knobs["recompute"] = rc;
            cfg.knobs["mb"] = std::to_string(mb);
            int i = t.find(cfg);
            if (i < 0) continue;
            double r = predicted_ratio(i);
            if (r <= allowed && r > best_ratio) best = i, best_ratio = r;
        }
    if (best < 0) return {-1, "no fit"};
    auto got = t.configuration(best);
    return {best, fmt::format("adjusted mb={} recompute={}", got.knobs.at("mb"), got.knobs.at("recompute"))};
}

struct Row {
    std::string target, mode;
    double similarity = 0;
    TrialsToTarget to_5pct;
};

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"InfraRSI experience-bank transfer benchmark: warm (bank hints) vs cold starts"};
    int seeds = 20, source_budget = 100, limit = 100, q = 4, top = 3, repeats = 3;
    bool quick = false;
    app.add_option("--seeds", seeds, "seeds per target and mode (at least 20 for reported numbers)");
    app.add_option("--source-budget", source_budget, "trials of the tuning run on A");
    app.add_option("--limit", limit, "trials per run on a target before it counts as not reached");
    app.add_option("--q", q, "batch size (one job array)");
    app.add_option("--top", top, "verified configurations of A recorded in the bank");
    app.add_flag("--quick", quick, "5 seeds, source budget 60, limit 60 (a smoke run, not for reporting)");
    CLI11_PARSE(app, argc, argv);
    if (quick) seeds = 5, source_budget = 60, limit = 60;

    const auto bank_path = std::filesystem::temp_directory_path() /
                           fmt::format("bench-transfer-{}-{}.sqlite", ::getpid(),
                                       std::chrono::steady_clock::now().time_since_epoch().count());
    auto cleanup = [&] {
        std::error_code ec;
        for (const char* suffix : {"", "-wal", "-shm", "-journal"})
            std::filesystem::remove(bank_path.string() + suffix, ec);
    };
    try {
        // Hardware. A: 64 H100-80GB-like GPUs, 8 per node, two-socket hosts. A': same GPUs and node shape,
        // a different host CPU (larger L3), 10% faster GPU clocks and a faster network. B: 40 GB A100-like
        // GPUs, 4 per node, one-socket hosts without SMT: less memory, slower compute, narrower nodes.
        model::SimulatorSpec a = model::TrainingSimulator::presets().at(0);
        a.name = "A (H100-80GB x64, 8/node)";
        model::SimulatorSpec a2 = a;
        a2.name = "A' (H100-80GB x64, faster clock+net)";
        a2.peak_flops *= 1.1;
        a2.network_bandwidth = 50e9;
        a2.nvlink_bandwidth = 280e9;
        model::SimulatorSpec b = a;
        b.name = "B (A100-40GB x64, 4/node)";
        b.memory_limit_bytes = 40e9;
        b.gpus_per_node = 4;
        b.peak_flops = 312e12;
        b.hbm_bandwidth = 1.55e12;
        b.nvlink_bandwidth = 200e9;
        b.network_bandwidth = 20e9;
        const auto key_a =
            hardware_key("pack:2(memory=1024GB) l3:1(size=64MB) l2:24(size=2MB) core:1 pu:2", 80e9);
        const auto key_a2 =
            hardware_key("pack:2(memory=1024GB) l3:1(size=96MB) l2:24(size=2MB) core:1 pu:2", 80e9);
        const auto key_b =
            hardware_key("pack:1(memory=512GB) l3:1(size=64MB) l2:32(size=1MB) core:1 pu:1", 40e9);

        std::cout << fmt::format("# bench_transfer: seeds={} source_budget={} limit={} q={} top={}\n", seeds,
                                 source_budget, limit, q, top);
        SimulatorEnvironment env_a(a);
        const auto t0 = std::chrono::steady_clock::now();

        // 1. Tune A, verify the best few, record them.
        ModelTuner source_tuner(env_a, q, 1000);
        auto source = run(env_a, source_tuner, {source_budget, source_budget, source_budget}, 1000);
        std::map<int, std::vector<double>> times;
        for (const auto& t : source.history)
            if (t.outcome == model::ObservationKind::ok) times[t.candidate].push_back(t.step_time_s);
        std::vector<std::pair<double, int>> ranked;
        for (const auto& [c, v] : times)
            ranked.push_back({quantile(v, 0.5), c});
        std::sort(ranked.begin(), ranked.end());
        std::mt19937_64 vrng(4242);
        double baseline_s = 0;
        {
            std::vector<double> v;
            for (int r = 0; r < repeats; ++r) {
                auto t = env_a.run(env_a.baseline(), vrng);
                if (t.outcome == model::ObservationKind::ok) v.push_back(t.step_time_s);
            }
            baseline_s = quantile(v, 0.5);
        }
        std::vector<Verified> verified;
        for (const auto& [m, c] : ranked) {
            if (static_cast<int>(verified.size()) >= top) break;
            std::vector<double> v, peaks;
            for (int r = 0; r < repeats; ++r) {
                auto t = env_a.run(c, vrng);
                if (t.outcome != model::ObservationKind::ok) break;
                v.push_back(t.step_time_s), peaks.push_back(t.peak_bytes);
            }
            if (static_cast<int>(v.size()) < repeats) continue; // not verified
            verified.push_back({c, quantile(v, 0.5), *std::max_element(peaks.begin(), peaks.end())});
        }
        std::sort(verified.begin(), verified.end(),
                  [](const Verified& x, const Verified& y) { return x.median_s < y.median_s; });
        if (verified.empty()) throw Error("no configuration of A passed verification", "bench_transfer");

        bank::ExperienceBank bank(bank_path.string(), "bench");
        const double created = 1.7e9, now = created + 86400;
        std::cout << fmt::format("\n## source {}: {} trials ({} OOM); best true {:.3f} s/step; recorded:\n",
                                 env_a.name(), source.trials, source.ooms, env_a.best_feasible_time());
        for (const auto& v : verified) {
            auto cfg = env_a.configuration(v.candidate);
            bank::Finding f;
            f.kind = "knob_setting";
            f.workload = kWorkload;
            f.verified = true;
            const double speedup = baseline_s / v.median_s;
            const double ratio = v.peak_bytes / env_a.memory_limit_bytes();
            f.content = {
                {"knobs", cfg.knobs},
                {"patches", cfg.patches},
                {"speedup", speedup},
                {"lo", speedup * std::exp(-2.0 * std::sqrt(2 * env_a.noise_variance()))},
                {"memory_ratio", ratio},
                {"estimate_factor", v.peak_bytes / env_a.candidates()[v.candidate].prior_peak_bytes}};
            f.campaign = "bench-transfer/A";
            f.origin = "bench";
            f.created = created;
            bank.add_finding(key_a, f);
            std::cout << fmt::format("  {}  speedup {:.2f}x  memory_ratio {:.2f}  (true {:.3f} s/step)\n",
                                     env_a.candidates()[v.candidate].id, speedup, ratio,
                                     env_a.true_step_time(v.candidate));
        }

        // 2-3. Targets, warm vs cold.
        std::vector<Row> rows;
        std::map<std::string, std::pair<double, double>> medians; // label -> (warm, cold)
        for (const Target& target : {Target{"A'", a2, key_a2}, Target{"B", b, key_b}}) {
            SimulatorEnvironment env(target.spec);
            const double sim = bank::similarity(key_a, target.key);
            auto priors = bank.priors(target.key, kWorkload, now);
            std::vector<int> hints;
            const double best = env.best_feasible_time();
            std::cout << fmt::format(
                "\n## target {}: similarity to A {:.2f}, {} priors{}; best {:.3f} s/step; "
                "A's best here: {}\n",
                env.name(), sim, priors.size(),
                !priors.empty() && priors[0].hypothesis ? " (hypotheses: unseen hardware)" : "", best, [&] {
                    int i = env.find(env_a.configuration(env_a.simulator().best()));
                    if (i < 0) return std::string("not a configuration");
                    if (!env.feasible(i)) return std::string("OOM");
                    return fmt::format("{:.3f} s/step ({:+.1f}%)", env.true_step_time(i),
                                       100 * (env.true_step_time(i) / best - 1));
                }());
            for (const auto& p : priors) {
                Hint h = hint_for(p, env);
                std::string outcome = "-";
                if (h.candidate >= 0) {
                    if (std::find(hints.begin(), hints.end(), h.candidate) == hints.end())
                        hints.push_back(h.candidate);
                    outcome = env.feasible(h.candidate)
                                  ? fmt::format("true {:+.1f}% vs best",
                                                100 * (env.true_step_time(h.candidate) / best - 1))
                                  : std::string("OOM");
                }
                std::cout << fmt::format(
                    "  prior weight {:.2f}{}: {} -> {}{}\n", p.weight, p.hypothesis ? " (hypothesis)" : "",
                    h.how, h.candidate >= 0 ? env.candidates()[h.candidate].id : std::string("none"),
                    h.candidate >= 0 ? ", " + outcome : std::string());
            }
            std::vector<RunResult> warm, cold;
            for (int s = 0; s < seeds; ++s) {
                const auto seed = static_cast<std::uint64_t>(s + 1);
                ModelTuner w(env, q, seed, hints); // the bank's hints, then the baseline
                warm.push_back(run(env, w, {limit, 0, limit}, seed));
                ModelTuner c(env, q, seed); // the baseline only
                cold.push_back(run(env, c, {limit, 0, limit}, seed));
            }
            rows.push_back({target.label, "warm", sim, trials_to_target(warm, limit)});
            rows.push_back({target.label, "cold", sim, trials_to_target(cold, limit)});
            medians[target.label] = {rows[rows.size() - 2].to_5pct.median, rows.back().to_5pct.median};
        }

        std::cout << fmt::format("\n{:<7} {:>10} {:>5} {:>8} {:>13} {:>9} {:>9}\n", "target", "similarity",
                                 "mode", "reached", "median trials", "IQR", "OOM frac");
        for (const auto& r : rows)
            std::cout << fmt::format("{:<7} {:>10.2f} {:>5} {:>8} {:>13} {:>9} {:>9.3f}\n", r.target,
                                     r.similarity, r.mode,
                                     fmt::format("{}/{}", r.to_5pct.reached, r.to_5pct.runs),
                                     trials_text(r.to_5pct.median, r.to_5pct.limit),
                                     fmt::format("{}-{}", trials_text(r.to_5pct.q25, r.to_5pct.limit),
                                                 trials_text(r.to_5pct.q75, r.to_5pct.limit)),
                                     r.to_5pct.oom_fraction);
        std::cout << fmt::format(
            "(trials until a configuration within 5% of the target's best feasible one has run; "
            "'>N': not within N, counted as N+1. OOM frac: over the trials of those runs. "
            "{:.0f} s)\n",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        auto ratio = [](std::pair<double, double> m) {
            return m.second > 0 ? fmt::format("{:.3f}", m.first / m.second) : std::string("nan");
        };
        std::cout << fmt::format("summary warm_vs_cold={} dissimilar_vs_cold={}\n", ratio(medians["A'"]),
                                 ratio(medians["B"]));
    } catch (const std::exception& e) {
        cleanup();
        std::cerr << "bench_transfer: " << e.what() << "\n";
        return 1;
    }
    cleanup();
    return 0;
}
