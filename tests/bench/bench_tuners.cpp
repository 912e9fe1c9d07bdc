// bench_tuners: tuners side by side on simulated and recorded tables (run by scripts/bench-tuners).
// Per table and tuner, over seeds: trials until a configuration within 5% of the best feasible one has
// run (median and IQR), fraction of OOM trials, cost, best found at a fixed budget; then the time of one
// model refit plus batch proposal at 500 and 5,000 trials. Everything printed is measured in this run.
#include "environment.hpp"
#include "memory_quality.hpp"
#include "tuners.hpp"
#include "util/error.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>
#include <time.h>

using namespace infrarsi;
using namespace infrarsi::bench;

namespace {

struct Summary {
    std::string tuner;
    TrialsToTarget to_5pct;
    double cost_h = 0, cost_to_5pct_h = 0, best_ratio = 0, invalid = 0;
    double wasted_h = 0, wasted_fraction = 0; // cost of failed trials (mean per run), and of all cost
    // Failed trials (OOM, crash, timeout) per run within the budget, and within a campaign's first 20 trials
    // with their share of those trials' node-seconds.
    double failures = 0, failures_20 = 0, failed_share_20 = 0;
};

Summary summarize(const std::string& name, const std::vector<RunResult>& runs, int limit, double best) {
    Summary s{name, trials_to_target(runs, limit)};
    std::vector<double> c5, ratio;
    for (const auto& r : runs) {
        c5.push_back(r.to_5pct > 0 ? r.cost_to_5pct_s / 3600 : INFINITY);
        s.cost_h += r.cost_s / 3600 / runs.size();
        ratio.push_back(r.best_at_fixed / best);
        s.invalid += double(r.invalid) / runs.size();
        s.wasted_h += r.wasted_s / 3600 / runs.size();
        s.failures += double(r.ooms + r.crashes + r.timeouts) / runs.size();
        double cost = 0, failed = 0;
        for (std::size_t i = 0; i < r.history.size() && i < 20; ++i) {
            cost += r.history[i].cost_s;
            if (r.history[i].outcome != model::ObservationKind::ok) {
                failed += r.history[i].cost_s;
                s.failures_20 += 1.0 / runs.size();
            }
        }
        s.failed_share_20 += (cost > 0 ? failed / cost : 0) / runs.size();
    }
    s.wasted_fraction = s.cost_h > 0 ? s.wasted_h / s.cost_h : 0;
    s.cost_to_5pct_h = quantile(c5, 0.5);
    s.best_ratio = quantile(ratio, 0.5);
    return s;
}

double thread_cpu_ms() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

struct Timing {
    double cpu_ms = 0, wall_ms = 0;
};

// Model refit plus one batch proposal, cold (a fresh proposer: no warm start), at n random trials. CPU time
// of this thread is what the algorithm costs; wall time also counts other processes on a shared machine.
Timing time_proposal(const Environment& env, int n, int q, int repeats) {
    std::mt19937_64 rng(12345 + n);
    std::vector<model::TrialObservation> trials;
    // n trials drawn (with repeats) from three quarters of the configurations, so that a recorded table
    // smaller than n still leaves untried candidates to propose; the fit is over n observations either way.
    std::vector<int> order(static_cast<std::size_t>(env.size()));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const int tried = std::max(1, env.size() - std::max(2 * q, env.size() / 4));
    std::uniform_int_distribution<int> pick(0, tried - 1);
    for (int i = 0; i < n; ++i)
        trials.push_back(env.run(order[static_cast<std::size_t>(pick(rng))], rng));
    model::ProposerSettings s;
    s.memory_limit_bytes = env.memory_limit_bytes();
    s.noise_variance = env.noise_variance();
    s.trial_steps = env.trial_steps();
    s.trial_overhead_s = env.startup_s();
    std::vector<double> cpu, wall;
    for (int r = 0; r < repeats; ++r) {
        model::BatchProposer p;
        auto t0 = std::chrono::steady_clock::now();
        double c0 = thread_cpu_ms();
        auto out = p.propose(env.candidates(), trials, q, s);
        cpu.push_back(thread_cpu_ms() - c0);
        wall.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        // Held-out candidates dominated by an OOM or on a failure edge are rightly left out, so a batch may
        // be short; empty only with the reason to stop.
        if (out.empty() && p.stop_reason().empty())
            throw Error("proposer returned no candidate and no reason", "timing");
    }
    return {quantile(cpu, 0.5), quantile(wall, 0.5)};
}

const char* outcome_text(model::ObservationKind o) {
    switch (o) {
    case model::ObservationKind::ok:
        return "ok";
    case model::ObservationKind::oom:
        return "oom";
    case model::ObservationKind::failed:
        return "failed";
    case model::ObservationKind::timeout:
        return "timeout";
    case model::ObservationKind::stopped:
        return "stopped";
    case model::ObservationKind::infeasible:
        return "crash";
    }
    return "?";
}

// One seed's trials in the order they ran, with the true step time relative to the table's best.
void print_trace(const std::string& tuner, const Environment& env, const RunResult& run) {
    const double best = env.best_feasible_time();
    int n = 0;
    for (const auto& t : run.history)
        std::cout << fmt::format("trace {} #{:<3} {:<10} true/best {:.3f}  {}\n", tuner, ++n,
                                 outcome_text(t.outcome), env.true_step_time(t.candidate) / best,
                                 env.candidates()[static_cast<std::size_t>(t.candidate)].id);
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"InfraRSI tuner benchmark: ours vs random, greedy coordinate descent and Optuna TPE"};
    std::vector<std::string> tables;
    int seeds = 20, budget = 200, fixed_budget = 50, q = 4;
    bool quick = false, no_tpe = false, json_out = false, trace = false;
    std::string python = "/usr/bin/python3", adapter;
    std::vector<std::string> peers;
    std::string export_table, export_path;
    int export_repeats = 3;
    app.add_option("--table", tables,
                   "sim-gpt7b-64, sim-gpt20b-256, sim-gpt175b-1024, or a .jsonl table; repeatable");
    app.add_option("--seeds", seeds, "seeds per tuner (at least 20 for reported numbers)");
    app.add_option("--budget", budget, "trials per run for ours, greedy and TPE");
    app.add_option("--fixed-budget", fixed_budget, "trials at which 'best found' is read");
    app.add_option("--q", q, "our batch size (one job array)");
    app.add_flag("--quick", quick, "budget 100, one simulated table unless --table is given");
    app.add_flag("--no-tpe", no_tpe, "skip Optuna (no /usr/bin/python3 with optuna)");
    app.add_flag("--json", json_out, "one JSON object per table and tuner as well");
    app.add_flag("--trace", trace, "print each tuner's trials of its first seed (what it tried, in order)");
    app.add_option("--python", python, "python with optuna (3.1 for tpe alone; >= 4.2 for tpe-cl and gp)");
    app.add_option("--peer", peers,
                   "Optuna peers, repeatable: tpe (multivariate TPE, one ask at a time, OOM failed), tpe-cl "
                   "(multivariate TPE, constant liar, q asks per batch, OOM as a violated constraint), gp "
                   "(GPSampler with constraints, q asks per batch); default tpe");
    app.add_option("--adapter", adapter, "path of optuna_adapter.py")->required();
    app.add_option("--export-table", export_table,
                   "write this simulated table in the recorded format and exit");
    app.add_option("--export-path", export_path, "where --export-table writes");
    app.add_option("--export-repeats", export_repeats, "repeats per configuration for --export-table");
    CLI11_PARSE(app, argc, argv);
    if (peers.empty()) peers = {"tpe"};

    try {
        std::map<std::string, model::SimulatorSpec> sims;
        for (const auto& s : model::TrainingSimulator::presets())
            sims[s.name] = s;
        if (!export_table.empty()) {
            if (!sims.count(export_table))
                throw Error("unknown simulated table '" + export_table + "'", "--export-table");
            SimulatorEnvironment env(sims.at(export_table));
            write_table(env, export_path, export_repeats, 1);
            std::cout << "wrote " << env.size() << " configurations to " << export_path << "\n";
            return 0;
        }
        if (quick) budget = 100;
        if (tables.empty()) {
            if (quick)
                tables = {"sim-gpt7b-64"};
            else
                for (const auto& s : model::TrainingSimulator::presets())
                    tables.push_back(s.name);
        }
        std::cout << fmt::format("# bench_tuners: seeds={} budget={} fixed_budget={} q={} threads={}\n",
                                 seeds, budget, fixed_budget, q, std::thread::hardware_concurrency());
        std::vector<std::string> summaries;
        for (const auto& table : tables) {
            std::unique_ptr<Environment> env;
            if (sims.count(table))
                env = std::make_unique<SimulatorEnvironment>(sims.at(table));
            else
                env = std::make_unique<RecordedTableEnvironment>(table);
            const double best = env->best_feasible_time();
            int feasible = 0, near = 0;
            for (int i = 0; i < env->size(); ++i)
                if (env->feasible(i)) ++feasible, near += env->true_step_time(i) <= 1.05 * best;
            std::cout << fmt::format(
                "\n## table {}: {} configurations, {} fit in memory, {} within 5% of the best "
                "({:.3f} s/step: {}); baseline {:.3f} s/step\n",
                env->name(), env->size(), feasible, near, best,
                [&] {
                    for (int i = 0; i < env->size(); ++i)
                        if (env->feasible(i) && env->true_step_time(i) == best)
                            return env->candidates()[i].id;
                    return std::string("?");
                }(),
                env->true_step_time(env->baseline()));
            auto timed = [&](const std::string& name, const Environment& on, auto make, int limit) {
                auto t0 = std::chrono::steady_clock::now();
                std::vector<RunResult> runs;
                for (int s = 0; s < seeds; ++s) {
                    auto tuner = make(static_cast<std::uint64_t>(s + 1));
                    runs.push_back(
                        run(on, *tuner, {budget, fixed_budget, limit}, static_cast<std::uint64_t>(s + 1)));
                }
                double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                std::cerr << fmt::format("  {} on {}: {:.1f} s\n", name, env->name(), secs);
                return runs;
            };
            // Ours with the memory prior the table has, and without it, halved and doubled; a table of a job
            // without a memory estimate has only "none". The peers never read a prior: they run once.
            std::vector<PriorVariant> variants = {PriorVariant::none};
            if (env->analytic_prior())
                variants = {PriorVariant::given, PriorVariant::none, PriorVariant::half, PriorVariant::twice};
            std::vector<std::unique_ptr<PriorVariantEnvironment>> variant_envs;
            for (auto v : variants)
                variant_envs.push_back(std::make_unique<PriorVariantEnvironment>(*env, v));
            auto ours_name = [&](std::size_t k) {
                return variants.size() == 1 ? std::string("ours")
                                            : "ours/prior=" + prior_variant_name(variants[k]);
            };
            std::map<std::string, std::vector<RunResult>> results;
            // Optuna runs in its own process; drive it from a second thread while ours runs (2 cores).
            std::thread tpe_thread;
            std::exception_ptr tpe_error;
            std::map<std::string, std::vector<RunResult>> peer_results;
            if (!no_tpe)
                tpe_thread = std::thread([&] {
                    try {
                        for (const auto& peer : peers) {
                            PipeChild optuna({python, adapter});
                            const int peer_q = peer == "tpe" ? 1 : q;
                            auto runs = timed(
                                "optuna-" + peer, *env,
                                [&](std::uint64_t s) {
                                    return std::make_unique<TpeTuner>(*env, optuna, s, peer, peer_q);
                                },
                                budget);
                            peer_results["optuna-" + peer] = std::move(runs); // main thread reads after join
                        }
                    } catch (...) {
                        tpe_error = std::current_exception();
                    }
                });
            std::vector<std::string> names;
            for (std::size_t k = 0; k < variants.size(); ++k) {
                const Environment& on = *variant_envs[k];
                results[ours_name(k)] = timed(
                    ours_name(k), on, [&](std::uint64_t s) { return std::make_unique<ModelTuner>(on, q, s); },
                    budget);
                names.push_back(ours_name(k));
            }
            // Random search is cheap to run on: it goes on past the budget until it reaches 5%.
            auto random_runs = timed(
                "random", *env, [&](std::uint64_t s) { return std::make_unique<RandomTuner>(*env, s); },
                env->size());
            auto greedy = timed(
                "greedy", *env, [&](std::uint64_t s) { return std::make_unique<GreedyTuner>(*env, s); },
                budget);
            if (tpe_thread.joinable()) tpe_thread.join();
            if (tpe_error) std::rethrow_exception(tpe_error);
            results["random"] = std::move(random_runs);
            results["greedy"] = std::move(greedy);
            names.push_back("random");
            names.push_back("greedy");
            for (auto& [name, runs] : peer_results) {
                results[name] = std::move(runs);
                names.push_back(name);
            }
            std::vector<Summary> rows;
            for (const std::string& name : names) {
                if (!results.count(name)) continue;
                rows.push_back(summarize(name, results[name], name == "random" ? env->size() : budget, best));
                if (json_out) {
                    nlohmann::json j = {
                        {"table", env->name()}, {"tuner", name}, {"to_5pct", nlohmann::json::array()}};
                    for (const auto& r : results[name])
                        j["to_5pct"].push_back(r.to_5pct);
                    std::cout << "json " << j.dump() << "\n";
                }
                if (trace && !results[name].empty()) print_trace(name, *env, results[name].front());
            }
            std::cout << fmt::format(
                "{:<18} {:>7} {:>16} {:>20} {:>9} {:>11} {:>9} {:>7} {:>9} {:>7} {:>14}\n", "tuner",
                "reached", "to-5% med [IQR]", "fail oom/crash/time", "cost h", "cost h to5%", "wasted h",
                "wasted", fmt::format("best@{}", fixed_budget), "invalid", "fails@20 share");
            for (const auto& r : rows)
                std::cout << fmt::format(
                    "{:<18} {:>7} {:>16} {:>20} {:>9.2f} {:>11} {:>9.3f} {:>6.1f}% {:>9.3f} {:>7.1f} "
                    "{:>14}\n",
                    r.tuner, fmt::format("{}/{}", r.to_5pct.reached, r.to_5pct.runs), trials_text(r.to_5pct),
                    fmt::format("{:.3f}/{:.3f}/{:.3f}", r.to_5pct.oom_fraction, r.to_5pct.crash_fraction,
                                r.to_5pct.timeout_fraction),
                    r.cost_h, std::isfinite(r.cost_to_5pct_h) ? fmt::format("{:.2f}", r.cost_to_5pct_h) : "-",
                    r.wasted_h, 100 * r.wasted_fraction, r.best_ratio, r.invalid,
                    fmt::format("{:.2f} {:.1f}%", r.failures_20, 100 * r.failed_share_20));
            std::cout << fmt::format(
                "(to-5%: trials until a configuration within 5% of the best feasible has run; "
                "'>N' = not within N. A run stops once it reached 5% and ran {0} trials, else at "
                "B={1}; random runs on until it reaches 5%. fail: fraction of the trials that ran out of "
                "memory, crashed or broke the contract, and hit the time limit; cost h: over the trials of "
                "the "
                "runs (random: its first B). best@{0}: true step time of the best found / best. wasted h: "
                "cost "
                "of the trials that failed, mean per run, and its share of the cost. invalid: asks outside "
                "the "
                "table, rejected at no cost. ours/prior=: ours with the table's memory estimate, none, "
                "halved "
                "or doubled. fails@20 share: failed trials among a run's first 20 (a campaign's budget), "
                "mean per run, and their share of those trials' cost.)\n",
                fixed_budget, budget);

            Timing t500 = time_proposal(*env, 500, 8, 3);
            Timing t5000 = time_proposal(*env, 5000, 8, 3);
            double load = 0;
            if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
                if (std::fscanf(f, "%lf", &load) != 1) load = 0;
                std::fclose(f);
            }
            std::cout << fmt::format("refit + one batch proposal (q=8, cold, {} candidates, median of 3): "
                                     "500 trials {:.0f} ms CPU ({:.0f} ms wall), 5000 trials {:.0f} ms CPU "
                                     "({:.0f} ms wall); load average {:.1f} on {} cores\n",
                                     env->size(), t500.cpu_ms, t500.wall_ms, t5000.cpu_ms, t5000.wall_ms,
                                     load, std::thread::hardware_concurrency());
            const double p500 = t500.cpu_ms, p5000 = t5000.cpu_ms;
            auto find = [&](const std::string& n) -> const Summary* {
                for (const auto& r : rows)
                    if (r.tuner == n) return &r;
                return nullptr;
            };
            const Summary* rnd = find("random");
            const Summary* tpe = nullptr;
            for (const auto& r : rows)
                if (!tpe && r.tuner.rfind("optuna-", 0) == 0) tpe = &r;
            // The best peer: the fewest median trials to 5%, then the least wasted.
            const Summary* best_peer = nullptr;
            for (const auto& r : rows)
                if (r.tuner.rfind("ours", 0) != 0 &&
                    (!best_peer || r.to_5pct.median < best_peer->to_5pct.median ||
                     (r.to_5pct.median == best_peer->to_5pct.median && r.wasted_h < best_peer->wasted_h)))
                    best_peer = &r;
            auto ratio = [](double a, double b) {
                return b > 0 ? fmt::format("{:.3f}", a / b) : std::string(a > 0 ? "inf" : "nan");
            };
            const Summary* with_prior = find(ours_name(0));
            for (std::size_t k = 0; k < variants.size(); ++k) {
                const Summary* ours = find(ours_name(k));
                const MemoryQuality mq = memory_quality(*variant_envs[k], 20, seeds, 4242);
                std::cout << fmt::format(
                    "memory model, prior {}: 90% interval covers {:.3f} of {} held-out peaks, Brier score of "
                    "P(OOM) {:.4f} over {} held-out runs (fitted on 20 random trials, {} times)\n",
                    prior_variant_name(variants[k]), mq.coverage, mq.peaks, mq.brier, mq.runs, seeds);
                std::string per_peer;
                for (const auto& r : rows)
                    if (r.tuner.rfind("optuna-", 0) == 0)
                        per_peer += fmt::format(" trials_ratio_vs_{}={} wasted_ratio_vs_{}={}", r.tuner,
                                                ratio(ours->to_5pct.median, r.to_5pct.median), r.tuner,
                                                ratio(ours->wasted_h, r.wasted_h));
                std::string vs_prior;
                if (variants[k] != PriorVariant::given && variants.size() > 1)
                    vs_prior = " trials_ratio_vs_prior_given=" +
                               ratio(ours->to_5pct.median, with_prior->to_5pct.median);
                summaries.push_back(fmt::format(
                    "summary table={} prior={} best_peer={} trials_ratio_vs_best_peer={} "
                    "wasted_ratio_vs_best_peer={} interval_coverage={:.3f} brier={:.4f} "
                    "propose_ms_500={:.0f} "
                    "propose_ms_5000={:.0f}{}{} trials_ratio_vs_random={} wasted_fraction={:.3f} "
                    "failures_per_run={:.2f} failures_first20={:.2f} failed_node_s_share_first20={:.3f}",
                    env->name(), prior_variant_name(variants[k]), best_peer ? best_peer->tuner : "none",
                    best_peer ? ratio(ours->to_5pct.median, best_peer->to_5pct.median) : "nan",
                    best_peer ? ratio(ours->wasted_h, best_peer->wasted_h) : "nan", mq.coverage, mq.brier,
                    p500, p5000, vs_prior, per_peer, ratio(ours->to_5pct.median, rnd->to_5pct.median),
                    ours->wasted_fraction, ours->failures, ours->failures_20, ours->failed_share_20));
            }
            if (tpe && tpe->to_5pct.median > tpe->to_5pct.limit)
                std::cout << "note: a peer's median is censored at the budget, so the ratio against it is an "
                             "upper bound\n";
        }
        std::cout << "\n";
        for (const auto& s : summaries)
            std::cout << s << "\n";
    } catch (const std::exception& e) {
        std::cerr << "bench_tuners: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
