// bench_verify: how often does verification promote a change that is no change (A/A), and how often does it
// promote a true 1.10x / 1.25x one? (run by scripts/bench-verify)
//
// Every decision is the product's: verify::doctor_prior (the doctor's noise, robustly), verify::block_orders
// and verify::spread_pairs (each block's orders and nodes), verify::decide (each look), verify::after_look
// and verify::after_recheck (the sequence: another block, the re-check in a fresh allocation, stop), with the
// rule of verify::design (min_speedup 3%, alpha 1% over verify_top = 2 candidates, at most 12 pairs). The
// loop over blocks is the campaign's (campaign/verification_stage.cpp), without the scheduler. Two modes:
//
//   simulate  N verifications per true speed-up. Each run has per-step times (--steps steady steps, 3%
//             step-to-step noise) around a run level with run-to-run noise drawn from recorded relative
//             deviations (--noise FILE: one log(step / median) a line, from real baseline runs; else Gaussian
//             --cv), with what a real cluster adds: a node effect per node (--node-sd, Sinha et al. SC22: 8%
//             on average), drift between the doctor and the verification (the level moves by --drift, the
//             noise grows by --noise-scale), an order effect (a pair's second run --order faster), and the
//             doctor's runs on --doctor-nodes nodes. --scenario: normal; bimodal (each run, the doctor's
//             too, in the slow mode with probability --slow-p, 1.0 against 0.74 s/step: log 0.30 slower);
//             heavy (a step stalls with probability 5%, 2x to 6x as long). Prints
//             `simulate scenario=S effect=E promoted=K/N pairs=R` (R: mean A/B pairs a decision took).
//   decide    one real verification, from a JSON file: {"doctor": [median step s, ...], "pairs": [{"order":
//             "AB"|"BA", "node": "n1", "baseline_s": x, "candidate_s": y}, ...], "recheck": [...]
//             (optional)}: its first stage judged as one look, the re-check as the next. Prints {"stage1":
//             bool, "final": bool, "speedup": x, "lo": x, "hi": x, "needs_recheck": bool}.
#include "contract/contract.hpp"
#include "measure/noise.hpp"
#include "measure/statistics.hpp"
#include "verify/robust.hpp"
#include "verify/sequential.hpp"
#include "verify/verify.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>

using namespace infrarsi;

namespace {

constexpr int kSteps = 8;

contract::Contract bench_contract() {
    contract::Contract c;
    c.invariants.steps = kSteps;
    c.invariants.loss_last_k = 5;
    c.invariants.loss_mode = contract::LossMode::LastKMean;
    c.resources.mem = "1000G";
    c.resources.mem_bytes = 1000LL << 30;
    return c;
}

std::vector<double> curve() {
    std::vector<double> l;
    for (int i = 0; i < kSteps; ++i)
        l.push_back(4.0 - 0.2 * i);
    return l;
}

verify::Arm arm(double step_s, const std::string& node, bool first) {
    verify::Arm a;
    a.ok = true;
    a.step_s = step_s;
    a.losses = curve();
    a.peak_memory_bytes = 1e8;
    a.node = node;
    a.first = first;
    return a;
}

struct Noise {
    std::vector<double> recorded; // log deviations; empty: Gaussian with sd cv
    double cv = 0.02;
    double draw(std::mt19937_64& rng, double scale) const {
        if (recorded.empty()) return std::normal_distribution<double>(0, cv * scale)(rng);
        std::uniform_int_distribution<std::size_t> pick(0, recorded.size() - 1);
        return recorded[pick(rng)] * scale;
    }
};

enum class Scenario { Normal, Bimodal, Heavy };

struct Sim {
    Noise noise;
    Scenario scenario = Scenario::Normal;
    int doctor = 5, nodes = 4, steps = 20;
    int doctor_nodes = 1; // the doctor's runs (one array, one task at a time) land on this many nodes
    double node_sd = 0.08, drift = 0.05, noise_scale = 1.5, order = 0.03, step_cv = 0.03, slow_p = 0.3;
    verify::Design design;
};

// One run at log level `level`: its per-step times, the scenario's way.
verify::Arm run(const Sim& s, double level, double noise_scale, const std::string& node, bool first,
                std::mt19937_64& rng) {
    double l = level + s.noise.draw(rng, noise_scale);
    if (s.scenario == Scenario::Bimodal && std::bernoulli_distribution(s.slow_p)(rng))
        l += std::log(1.0 / 0.74);
    verify::Arm a = arm(0, node, first);
    std::normal_distribution<double> step(0, s.step_cv);
    for (int i = 0; i < s.steps; ++i) {
        double x = std::exp(l + step(rng));
        if (s.scenario == Scenario::Heavy && std::bernoulli_distribution(0.05)(rng))
            x *= std::uniform_real_distribution<double>(2, 6)(rng);
        a.step_samples.push_back(x);
    }
    a.step_s = measure::median(a.step_samples);
    return a;
}

struct Outcome {
    bool promoted = false;
    int pairs = 0;
};

// One simulated verification: the doctor, then the sequence of blocks, the campaign's way.
Outcome simulate_one(const Sim& s, double effect, std::mt19937_64& rng) {
    std::map<std::string, double> speed;
    std::vector<std::string> all;
    for (int n = 0; n < s.nodes; ++n) {
        all.push_back(fmt::format("n{}", n + 1));
        speed[all.back()] = std::normal_distribution<double>(0, s.node_sd)(rng);
    }
    // The doctor: its runs on the nodes in turn.
    std::vector<double> doctor;
    for (int k = 0; k < s.doctor; ++k) {
        const auto& node = all[k % std::max(1, std::min<int>(s.doctor_nodes, static_cast<int>(all.size())))];
        doctor.push_back(run(s, speed[node], 1.0, node, false, rng).step_s);
    }
    const auto prior = verify::doctor_prior(doctor);
    // The verification, later: the level has drifted and the noise grown.
    const double level = std::normal_distribution<double>(0, s.drift)(rng);
    std::shuffle(all.begin(), all.end(), rng);
    const auto c = bench_contract();
    std::vector<std::pair<verify::Arm, verify::Arm>> pairs;
    auto block = [&](const std::vector<std::string>& nodes, int before, double lvl) {
        const auto orders = verify::block_orders(rng());
        auto placed = verify::spread_pairs(before + verify::Design::kBlock, nodes);
        placed.erase(placed.begin(), placed.begin() + before);
        std::vector<std::pair<verify::Arm, verify::Arm>> out;
        for (int i = 0; i < verify::Design::kBlock; ++i) {
            const std::string node = placed[i][0];
            const bool ab_order = orders[i] == verify::PairOrder::AB;
            auto a = run(s, lvl + speed.at(node), s.noise_scale, node, ab_order, rng);
            auto b = run(s, lvl + speed.at(node) - std::log(effect), s.noise_scale, node, !ab_order, rng);
            auto& second = ab_order ? b : a; // the second run of the pair is faster
            for (auto& x : second.step_samples)
                x *= 1.0 - s.order;
            second.step_s *= 1.0 - s.order;
            out.emplace_back(a, b);
        }
        return out;
    };
    for (;;) {
        auto more = block(all, static_cast<int>(pairs.size()), level);
        pairs.insert(pairs.end(), more.begin(), more.end());
        const int n = static_cast<int>(pairs.size());
        const auto d = verify::decide(pairs, curve(), c, s.design.rule(n), false, prior);
        const auto next = verify::after_look(s.design, d, n, true);
        if (next == verify::Next::More) continue;
        if (next == verify::Next::Stop) return {false, n};
        break;
    }
    // The re-check: a block in a fresh allocation, on the nodes the first stage did not use where there are.
    std::set<std::string> used;
    for (const auto& p : pairs)
        used.insert(p.first.node);
    std::vector<std::string> rest;
    for (const auto& n : all)
        if (!used.count(n)) rest.push_back(n);
    if (rest.empty()) rest = all;
    const double level2 = level + std::normal_distribution<double>(0, s.drift / 2)(rng);
    std::vector<std::pair<verify::Arm, verify::Arm>> fresh;
    for (;;) {
        const auto more = block(rest, static_cast<int>(fresh.size()), level2);
        fresh.insert(fresh.end(), more.begin(), more.end());
        pairs.insert(pairs.end(), more.begin(), more.end());
        const int n = static_cast<int>(pairs.size());
        const auto d = verify::decide(pairs, curve(), c, s.design.rule(n), false, prior);
        const auto own = verify::decide(fresh, curve(), c, s.design.rule(n), false, prior);
        const auto next = verify::after_recheck(s.design, d, own.speedup, n, true);
        if (next == verify::Next::More) continue;
        return {next == verify::Next::Promoted, n};
    }
}

std::vector<std::pair<verify::Arm, verify::Arm>> read_pairs(const nlohmann::json& ps) {
    std::vector<std::pair<verify::Arm, verify::Arm>> ab;
    for (const auto& p : ps) {
        const bool ab_order = p.at("order").get<std::string>() == "AB";
        const auto node = p.value("node", std::string());
        ab.emplace_back(arm(p.at("baseline_s").get<double>(), node, ab_order),
                        arm(p.at("candidate_s").get<double>(), node, !ab_order));
    }
    return ab;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_verify: A/A false promotions and power of verification (verify::decide)"};
    app.require_subcommand(1);
    Sim s;
    int n = 200;
    std::uint64_t seed = 1;
    std::string noise_file, scenario = "normal";
    std::vector<double> effects = {1.0};
    auto* sim = app.add_subcommand("simulate", "simulated verifications drawn from recorded noise");
    sim->add_option("--n", n, "verifications per effect");
    sim->add_option("--effect", effects, "true speed-ups (1.0: A/A)");
    sim->add_option("--scenario", scenario, "normal, bimodal or heavy");
    sim->add_option("--noise", noise_file, "recorded log deviations of baseline runs, one a line");
    sim->add_option("--cv", s.noise.cv, "Gaussian run-to-run noise (CV) without --noise");
    sim->add_option("--steps", s.steps, "steady steps a run");
    sim->add_option("--slow-p", s.slow_p, "bimodal: the probability a run is in the slow mode");
    sim->add_option("--doctor", s.doctor, "doctor runs");
    sim->add_option("--max-pairs", s.design.max_pairs, "[verify] max_pairs");
    sim->add_option("--min-speedup", s.design.min_speedup, "[verify] min_speedup");
    sim->add_option("--alpha", s.design.alpha, "[verify] alpha (the campaign's)");
    sim->add_option("--candidates", s.design.candidates, "[repeats] verify_top");
    sim->add_option("--nodes", s.nodes, "nodes in the partition");
    sim->add_option("--node-sd", s.node_sd, "node effect (sd of log speed)");
    sim->add_option(
        "--doctor-nodes", s.doctor_nodes,
        "nodes the doctor's runs spread over (1: its array's tasks, one at a time, on the first idle "
        "node, as on the local cluster; more: its noise includes the nodes' differences)");
    sim->add_option("--drift", s.drift, "level drift between doctor and verification (sd of log)");
    sim->add_option("--noise-scale", s.noise_scale, "noise at verification / noise at the doctor");
    sim->add_option("--order", s.order, "a pair's second run is this much faster");
    sim->add_option("--seed", seed, "random seed");
    std::string file;
    auto* dec = app.add_subcommand("decide", "one real verification from a JSON file");
    dec->add_option("file", file)->required();
    CLI11_PARSE(app, argc, argv);

    if (*sim) {
        if (scenario == "bimodal")
            s.scenario = Scenario::Bimodal;
        else if (scenario == "heavy")
            s.scenario = Scenario::Heavy;
        else if (scenario != "normal") {
            std::cerr << "bench_verify: --scenario is normal, bimodal or heavy, not '" << scenario << "'\n";
            return 2;
        }
        if (!noise_file.empty()) {
            std::ifstream in(noise_file);
            for (double x; in >> x;)
                s.noise.recorded.push_back(x);
            if (s.noise.recorded.size() < 2) {
                std::cerr << "bench_verify: fewer than 2 recorded deviations in " << noise_file << "\n";
                return 2;
            }
        }
        std::mt19937_64 rng(seed);
        for (double e : effects) {
            int promoted = 0;
            long pairs = 0;
            for (int i = 0; i < n; ++i) {
                const auto r = simulate_one(s, e, rng);
                promoted += r.promoted;
                pairs += r.pairs;
            }
            std::cout << fmt::format("simulate scenario={} effect={:.2f} promoted={}/{} pairs={:.2f}",
                                     scenario, e, promoted, n, static_cast<double>(pairs) / std::max(1, n))
                      << std::endl;
        }
        return 0;
    }
    std::ifstream in(file);
    const auto j = nlohmann::json::parse(in);
    const auto medians = j.at("doctor").get<std::vector<double>>();
    const auto pairs = read_pairs(j.at("pairs"));
    const auto prior = verify::doctor_prior(medians);
    const auto c = bench_contract();
    const int np = static_cast<int>(pairs.size());
    const auto first = verify::decide(pairs, curve(), c, s.design.rule(np), false, prior);
    nlohmann::json out = {{"stage1", first.promoted},
                          {"speedup", first.speedup},
                          {"lo", first.lo},
                          {"hi", first.hi},
                          {"mde", 0.0},
                          {"needs_recheck", first.promoted && !j.contains("recheck")}};
    bool final_promoted = false;
    if (first.promoted && j.contains("recheck")) {
        const auto fresh = read_pairs(j["recheck"]);
        auto all = pairs;
        all.insert(all.end(), fresh.begin(), fresh.end());
        const int m = static_cast<int>(all.size());
        const auto d = verify::decide(all, curve(), c, s.design.rule(m), false, prior);
        const auto own = verify::decide(fresh, curve(), c, s.design.rule(m), false, prior);
        final_promoted = verify::after_recheck(s.design, d, own.speedup, m, false) == verify::Next::Promoted;
    }
    out["final"] = final_promoted;
    std::cout << out.dump() << std::endl;
    return 0;
}
