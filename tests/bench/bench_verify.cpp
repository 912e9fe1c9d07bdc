// bench_verify: how often does verification promote a change that is no change (A/A), and how often does it
// promote a true 1.10x / 1.25x one? (run by scripts/bench-verify)
//
// Every decision is the product's: measure::calibrate (the doctor's noise and minimum detectable effect),
// verify::counterbalanced_orders and verify::spread_pairs (the pairs' order and nodes), verify::decide (the
// interval) and verify::reproduce (the re-check in a fresh allocation on other nodes). Two modes:
//
//   simulate  N verifications whose run-to-run noise is drawn from recorded relative deviations (--noise
//   FILE:
//             one log(step / median) a line, from real baseline runs; else Gaussian --cv), with what a
//             real cluster adds: a node effect per node (--node-sd, Sinha et al. SC22: 8% on average), drift
//             between the doctor and the verification (the level moves by --drift, the noise grows by
//             --noise-scale), an order effect (a pair's second run --order faster), and the doctor's runs on
//             --doctor-nodes nodes (its noise prior and MDE then include the nodes' differences). Prints
//             `simulate effect=E promoted=K/N`.
//   decide    one real verification, from a JSON file: {"doctor": [median step s, ...], "pairs": [{"order":
//             "AB"|"BA", "node": "n1", "baseline_s": x, "candidate_s": y}, ...], "recheck": [...]
//             (optional)}. Prints {"stage1": bool, "final": bool, "speedup": x, "lo": x, "hi": x,
//             "needs_recheck": bool}.
#include "contract/contract.hpp"
#include "measure/noise.hpp"
#include "measure/statistics.hpp"
#include "verify/verify.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <random>

using namespace infrarsi;

namespace {

constexpr int kSteps = 8;

contract::Contract bench_contract(int pairs) {
    contract::Contract c;
    c.invariants.steps = kSteps;
    c.invariants.loss_last_k = 5;
    c.invariants.loss_mode = contract::LossMode::LastKMean;
    c.resources.mem = "1000G";
    c.resources.mem_bytes = 1000LL << 30;
    c.repeats.verify = pairs;
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

struct Sim {
    Noise noise;
    int doctor = 5, pairs = 3, nodes = 4;
    int doctor_nodes = 1; // the doctor's runs (one array, one task at a time) land on this many nodes
    double node_sd = 0.08, drift = 0.05, noise_scale = 1.5, order = 0.03;
};

// One stage of pairs on `node_names`, each pair on one node; returns the decision.
verify::Decision stage(const Sim& s, double effect, const std::vector<std::string>& node_names,
                       const std::map<std::string, double>& node_speed, double level, double verify_scale,
                       const verify::NoisePrior& prior, double mde, std::mt19937_64& rng) {
    const auto orders = verify::counterbalanced_orders(s.pairs, rng());
    const auto placed = verify::spread_pairs(s.pairs, node_names);
    std::vector<std::pair<verify::Arm, verify::Arm>> ab;
    for (int i = 0; i < s.pairs; ++i) {
        const std::string node = placed[i][0];
        const double base = level * std::exp(node_speed.at(node));
        double a = base * std::exp(s.noise.draw(rng, verify_scale));
        double b = base / effect * std::exp(s.noise.draw(rng, verify_scale));
        const bool ab_order = orders[i] == verify::PairOrder::AB;
        (ab_order ? b : a) *= 1.0 - s.order; // the second run of the pair is faster
        ab.emplace_back(arm(a, node, ab_order), arm(b, node, !ab_order));
    }
    return verify::decide(ab, curve(), bench_contract(s.pairs), mde, false, prior);
}

// One simulated verification: the doctor, the first stage, and the re-check on other nodes.
bool simulate_one(const Sim& s, double effect, std::mt19937_64& rng) {
    std::map<std::string, double> speed;
    std::vector<std::string> all;
    for (int n = 0; n < s.nodes; ++n) {
        all.push_back(fmt::format("n{}", n + 1));
        speed[all.back()] = std::normal_distribution<double>(0, s.node_sd)(rng);
    }
    // The doctor: its runs on the nodes in turn, at the level of that time.
    std::vector<double> medians, within;
    for (int k = 0; k < s.doctor; ++k) {
        const auto& node = all[k % std::max(1, std::min<int>(s.doctor_nodes, static_cast<int>(all.size())))];
        medians.push_back(std::exp(speed[node] + s.noise.draw(rng, 1.0)));
        within.push_back(0.01);
    }
    const auto nm = measure::calibrate(medians, within, s.pairs);
    const verify::NoisePrior prior{nm.cv_between, std::max(0, s.doctor - 1)};
    // The verification, later: the level has drifted and the noise grown.
    const double level = std::exp(std::normal_distribution<double>(0, s.drift)(rng));
    std::shuffle(all.begin(), all.end(), rng);
    const auto first =
        stage(s, effect, all, speed, level, s.noise_scale, prior, nm.minimum_detectable_effect, rng);
    if (!first.promoted) return false;
    // The re-check: a fresh allocation on the nodes the first stage did not use, where there are any.
    std::vector<std::string> rest(all.begin() + std::min<std::size_t>(all.size(), s.pairs), all.end());
    if (rest.empty()) rest = all;
    const double level2 = level * std::exp(std::normal_distribution<double>(0, s.drift / 2)(rng));
    const auto again =
        stage(s, effect, rest, speed, level2, s.noise_scale, prior, nm.minimum_detectable_effect, rng);
    return verify::reproduce(first, again).promoted;
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
    std::string noise_file;
    std::vector<double> effects = {1.0};
    auto* sim = app.add_subcommand("simulate", "simulated verifications drawn from recorded noise");
    sim->add_option("--n", n, "verifications per effect");
    sim->add_option("--effect", effects, "true speed-ups (1.0: A/A)");
    sim->add_option("--noise", noise_file, "recorded log deviations of baseline runs, one a line");
    sim->add_option("--cv", s.noise.cv, "Gaussian noise (CV) without --noise");
    sim->add_option("--doctor", s.doctor, "doctor runs");
    sim->add_option("--pairs", s.pairs, "A/B pairs a stage");
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
            for (int i = 0; i < n; ++i)
                promoted += simulate_one(s, e, rng);
            std::cout << fmt::format("simulate effect={:.2f} promoted={}/{}", e, promoted, n) << std::endl;
        }
        return 0;
    }
    std::ifstream in(file);
    const auto j = nlohmann::json::parse(in);
    const auto medians = j.at("doctor").get<std::vector<double>>();
    const auto pairs = read_pairs(j.at("pairs"));
    const auto nm =
        measure::calibrate(medians, std::vector<double>(medians.size(), 0.0), static_cast<int>(pairs.size()));
    const verify::NoisePrior prior{nm.cv_between, std::max(0, static_cast<int>(medians.size()) - 1)};
    const auto c = bench_contract(static_cast<int>(pairs.size()));
    const auto first = verify::decide(pairs, curve(), c, nm.minimum_detectable_effect, false, prior);
    nlohmann::json out = {{"stage1", first.promoted},
                          {"speedup", first.speedup},
                          {"lo", first.lo},
                          {"hi", first.hi},
                          {"mde", nm.minimum_detectable_effect},
                          {"needs_recheck", first.promoted && !j.contains("recheck")}};
    bool final_promoted = false;
    if (first.promoted && j.contains("recheck")) {
        const auto again =
            verify::decide(read_pairs(j["recheck"]), curve(), c, nm.minimum_detectable_effect, false, prior);
        final_promoted = verify::reproduce(first, again).promoted;
    }
    out["final"] = final_promoted;
    std::cout << out.dump() << std::endl;
    return 0;
}
