// The agent benchmark (issue 31 item 7, scripts/bench-agent): an agent writes patches whose effects are
// latent, and claims them wrongly; does the harness (global models, claims as priors, corrected by the live
// runs) beat the loop coding-agent harnesses run (apply the agent's best suggestion to the incumbent, keep it
// if faster)?
//
// The world: a recorded table (tests/bench/tables/) or a sample of a simulated one, times K latent patches
// the agent reveals over its calls (patches_per_call each). A latent patch multiplies step time by 1/speedup
// and peak memory by its memory factor, independently of the rest (a candidate is a base configuration and a
// set of revealed patches); a base configuration that OOMed in the table stays infeasible (its peak is
// unknown), one that fits OOMs when its peak times the factors passes the limit. Trials draw the table's
// repeats (or the simulator's noise) as bench_tuners does.
//
// The agent: for each patch, log claimed speed-up = bias * log true speed-up + N(0, 0.1^2) (bias 2: it claims
// the square of the effect; 0.5: its square root), the same for memory (noise 0.05), at a stated confidence
// 0.8; for each knob value other than the baseline's and each of the table's own patches, the same reading of
// its true effect (the geometric mean of the time ratios of the configurations that differ only by that
// change). The bias alternates 2, 0.5 over seeds unless --bias is given. The calls come after the doctor's
// baseline trial and after each batch of q, identical for every arm (`calls` calls; the knob and catalog
// claims on the first). The harness calibrates on its agent's patches (a knob's claim is about the table's
// average effect, not the effect where it was measured).
//
// Arms, at equal trials (budget) and agent calls:
//   harness  model::BatchProposer, claims as priors (model/claim_prior.hpp) with the discount and error of
//            model::calibrate_claims over the claims measured so far (pairs of trials that differ by the
//            change alone);
//   greedy   the coding-agent loop: one trial at a time, the untried suggestion with the best claimed gain
//            over the incumbent (a revealed patch switched on, a knob set), kept if it measured faster;
//   ignore   the harness without the claims (the patches still arrive);
//   trust    the harness with the claims as said (discount 1, confidence 1, no calibration);
//   oracle   not an arm one could run: it knows the true times and runs the fastest revealed candidate, one
//            at a time, so its trials to 5% are the bound the agent's reveal schedule sets for every arm.
// Printed per table and arm: trials to within 5% of the best feasible candidate (median and quartiles; a run
// that did not get there counts budget + 1), wasted node-seconds (trials that failed: OOM, crash, timeout;
// mean per run, within the budget), node-seconds to 5%, and the calibration error after 10 trials: mean over
// the revealed patches of |log speed-up the arm would believe - log true| (the harness: its discounted
// claims; greedy and trust: the claims as said), with the raw claims' error beside it.
#include "environment.hpp"
#include "model/batch_proposer.hpp"
#include "model/claim_calibration.hpp"
#include "model/claim_prior.hpp"
#include "tuners.hpp"
#include "util/error.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <set>

using namespace infrarsi;
using namespace infrarsi::bench;

namespace {

struct LatentPatch {
    std::string name;
    double speedup = 1, memory = 1;
};

// The agent's patches for one run: a big win, a memory-hungry win, a memory saver that is a small win, one
// that does nothing, one that slows the job, a small win; each jittered by 5% (log) per seed, revealed in a
// seeded order.
std::vector<LatentPatch> latent_patches(int k, std::mt19937_64& rng) {
    const std::vector<LatentPatch> kinds = {{"", 1.30, 1.00}, {"", 1.15, 1.35}, {"", 1.08, 0.80},
                                            {"", 1.00, 1.00}, {"", 0.85, 1.00}, {"", 1.05, 1.00}};
    std::normal_distribution<double> jitter(0, 0.05);
    std::vector<LatentPatch> out;
    for (int j = 0; j < k; ++j) {
        auto p = kinds[static_cast<std::size_t>(j) % kinds.size()];
        p.speedup *= std::exp(jitter(rng));
        out.push_back(p);
    }
    std::shuffle(out.begin(), out.end(), rng);
    for (int j = 0; j < k; ++j)
        out[j].name = "agent-" + std::to_string(j);
    return out;
}

// A table's configurations times the latent patches: candidate i is base configuration i >> K (an index into
// `base_`, a subset of the environment's) with mask i & (2^K - 1).
class AgentWorld {
  public:
    AgentWorld(const Environment& env, std::vector<int> base, std::vector<LatentPatch> patches)
        : env_(env), base_(std::move(base)), patches_(std::move(patches)),
          k_(static_cast<int>(patches_.size())) {
        for (std::size_t b = 0; b < base_.size(); ++b)
            pos_[base_[b]] = static_cast<int>(b);
        // True peaks of the base configurations: the median of a few draws (the table's repeats).
        std::mt19937_64 rng(99);
        for (int b : base_) {
            std::vector<double> peaks;
            for (int r = 0; r < 5; ++r) {
                const auto t = env_.run(b, rng);
                if (t.outcome == model::ObservationKind::ok && t.peak_bytes > 0)
                    peaks.push_back(t.peak_bytes);
            }
            peak_.push_back(peaks.empty() ? 0.0 : quantile(peaks, 0.5));
        }
        const auto names = env_.encoding().names();
        feature_names_ = names;
        unknown_ordered_ = env_.encoding().memory_unknown_ordered();
        for (const auto& p : patches_) {
            feature_names_.push_back("+" + p.name);
            unknown_ordered_.push_back(0); // an agent's patch declares no memory effect
        }
        const int n = static_cast<int>(base_.size()) << k_;
        cands_.resize(n);
        for (int i = 0; i < n; ++i) {
            const auto& c = env_.candidates()[base_[i >> k_]];
            auto& m = cands_[i];
            const unsigned mask = static_cast<unsigned>(i) & ((1u << k_) - 1);
            m.id = c.id;
            for (int j = 0; j < k_; ++j)
                if (mask >> j & 1) m.id += " +" + patches_[j].name;
            m.features.resize(c.features.size() + k_);
            m.memory_unknown.resize(c.memory_unknown.size() + k_);
            m.features.head(c.features.size()) = c.features;
            m.memory_unknown.head(c.memory_unknown.size()) = c.memory_unknown;
            for (int j = 0; j < k_; ++j)
                m.features(c.features.size() + j) = m.memory_unknown(c.memory_unknown.size() + j) =
                    mask >> j & 1;
            m.memory_key = c.memory_key;
            m.prior_peak_bytes = c.prior_peak_bytes;
            for (const auto& s : c.savers)
                if (auto it = pos_.find(s.candidate); it != pos_.end())
                    m.savers.push_back({(it->second << k_) | static_cast<int>(mask), s.change});
        }
        best_ = std::numeric_limits<double>::infinity();
        for (int i = 0; i < n; ++i)
            if (feasible(i)) best_ = std::min(best_, true_time(i));
    }
    int k() const { return k_; }
    int size() const { return static_cast<int>(cands_.size()); }
    const std::vector<model::Candidate>& candidates() const { return cands_; }
    const std::vector<LatentPatch>& patches() const { return patches_; }
    const Environment& env() const { return env_; }
    int base_of(int i) const { return i >> k_; }
    unsigned mask_of(int i) const { return static_cast<unsigned>(i) & ((1u << k_) - 1); }
    int index(int b, unsigned mask) const { return (b << k_) | static_cast<int>(mask); }
    int baseline() const { return index(pos_.at(env_.baseline()), 0); }
    // The base position of a configuration, -1 when it is not in the world.
    int base_position(const model::Configuration& c) const {
        const int e = env_.find(c);
        auto it = pos_.find(e);
        return it == pos_.end() ? -1 : it->second;
    }
    model::Configuration configuration(int b) const { return env_.configuration(base_[b]); }
    double effect(unsigned mask, bool memory) const {
        double f = 1;
        for (int j = 0; j < k_; ++j)
            if (mask >> j & 1) f *= memory ? patches_[j].memory : 1 / patches_[j].speedup;
        return f;
    }
    bool feasible(int i) const {
        const int b = base_of(i);
        if (!env_.feasible(base_[b])) return false;
        return peak_[b] <= 0 || peak_[b] * effect(mask_of(i), true) <= env_.memory_limit_bytes();
    }
    double true_time(int i) const {
        return env_.true_step_time(base_[base_of(i)]) * effect(mask_of(i), false);
    }
    double best_time() const { return best_; }
    model::TrialObservation run(int i, std::mt19937_64& rng) const {
        auto t = env_.run(base_[base_of(i)], rng);
        t.candidate = i;
        const unsigned mask = mask_of(i);
        if (t.outcome != model::ObservationKind::ok || mask == 0) return t;
        const double overhead = env_.startup_s();
        const double peak = t.peak_bytes > 0 ? t.peak_bytes : peak_[base_of(i)];
        if (peak > 0 && peak * effect(mask, true) > env_.memory_limit_bytes()) {
            t.outcome = model::ObservationKind::oom; // killed part way, as the model assumes an OOM is
            t.cost_s = overhead + 0.3 * std::max(0.0, t.cost_s - overhead);
            t.step_time_s = 0;
            t.peak_bytes = 0;
            return t;
        }
        const double f = effect(mask, false);
        t.cost_s = overhead + std::max(0.0, t.cost_s - overhead) * f;
        t.step_time_s *= f;
        if (t.peak_bytes > 0) t.peak_bytes *= effect(mask, true);
        return t;
    }
    const std::vector<std::string>& feature_names() const { return feature_names_; }
    const std::vector<char>& unknown_ordered() const { return unknown_ordered_; }

  private:
    const Environment& env_;
    std::vector<int> base_;
    std::map<int, int> pos_;
    std::vector<LatentPatch> patches_;
    int k_;
    std::vector<double> peak_;
    std::vector<model::Candidate> cands_;
    std::vector<std::string> feature_names_;
    std::vector<char> unknown_ordered_;
    double best_ = 0;
};

// A claimed change: latent patch `patch` switched on, the table's own patch `base_patch` switched on, or
// knob `knob` at `value`.
struct Claim {
    int patch = -1;
    std::string base_patch;
    std::string knob, value;
    double truth = 1;          // true speed-up (a knob's: the geometric mean over the pairs of the world)
    double claimed = 1;        // the agent's speed-up
    double memory_truth = 1;   // true memory factor (1 for knobs: the analytic estimate covers them)
    double memory_claimed = 1; // the agent's
};

// Does candidate i have the claimed change? (A knob claim is about the knob's value, whatever the patches.)
bool has(const AgentWorld& w, const Claim& c, int i) {
    if (c.patch >= 0) return w.mask_of(i) >> c.patch & 1;
    if (!c.base_patch.empty()) return w.configuration(w.base_of(i)).patches.count(c.base_patch) > 0;
    return w.configuration(w.base_of(i)).knobs.at(c.knob) == c.value;
}
// The same candidate without the change, -1 when it is not in the world.
int without(const AgentWorld& w, const Claim& c, int i, const std::string& baseline_value) {
    if (c.patch >= 0) return w.index(w.base_of(i), w.mask_of(i) & ~(1u << c.patch));
    auto config = w.configuration(w.base_of(i));
    if (!c.base_patch.empty())
        config.patches.erase(c.base_patch);
    else
        config.knobs[c.knob] = baseline_value;
    const int b = w.base_position(config);
    return b < 0 ? -1 : w.index(b, w.mask_of(i));
}

struct Agent {
    std::vector<Claim> patches; // in the order the calls reveal them
    std::vector<Claim> knobs;   // revealed on the first call
};

Agent simulated_agent(const AgentWorld& w, double bias, std::mt19937_64& rng) {
    std::normal_distribution<double> noise(0, 0.1), memory_noise(0, 0.05);
    Agent a;
    for (int j = 0; j < w.k(); ++j) {
        Claim c;
        c.patch = j;
        c.truth = w.patches()[j].speedup;
        c.memory_truth = w.patches()[j].memory;
        c.claimed = std::exp(bias * std::log(c.truth) + noise(rng));
        c.memory_claimed = std::exp(bias * std::log(c.memory_truth) + memory_noise(rng));
        a.patches.push_back(c);
    }
    const auto base = w.configuration(w.base_of(w.baseline()));
    // A change of the table's own (a knob's value, a catalog patch): its true effect is the geometric mean of
    // the time ratios over the pairs of feasible configurations that differ by it alone.
    auto claim_known = [&](Claim c, const std::string& baseline_value) {
        double sum = 0;
        int pairs = 0;
        for (int b = 0; b < w.size() >> w.k(); ++b) {
            const int i = w.index(b, 0);
            if (!has(w, c, i) || !w.feasible(i)) continue;
            const int o = without(w, c, i, baseline_value);
            if (o < 0 || !w.feasible(o)) continue;
            sum += std::log(w.true_time(o) / w.true_time(i));
            ++pairs;
        }
        if (pairs == 0) return;
        c.truth = std::exp(sum / pairs);
        c.claimed = std::exp(bias * sum / pairs + noise(rng));
        a.knobs.push_back(c);
    };
    for (const auto& k : w.env().encoding().knobs())
        for (const auto& v : k.values) {
            if (v == base.knobs.at(k.name)) continue;
            Claim c;
            c.knob = k.name;
            c.value = v;
            claim_known(c, base.knobs.at(k.name));
        }
    for (const auto& p : w.env().encoding().patches()) {
        if (base.patches.count(p.name)) continue;
        Claim c;
        c.base_patch = p.name;
        claim_known(c, "");
    }
    return a;
}

enum class Arm { harness, greedy, ignore, trust, oracle };
const char* arm_name(Arm a) {
    switch (a) {
    case Arm::harness:
        return "harness";
    case Arm::greedy:
        return "greedy";
    case Arm::ignore:
        return "ignore";
    case Arm::trust:
        return "trust";
    case Arm::oracle:
        return "oracle";
    }
    return "?";
}

// What the agent has said so far.
struct Revealed {
    std::vector<Claim> claims; // patches and knob values
    unsigned mask = 0;         // revealed patches
};

// The measured speed-up (or memory factor) of each claim from pairs of trials that differ by its change
// alone: the mean log ratio over such pairs, as (claimed, measured) pairs for model::calibrate_claims.
std::pair<std::vector<model::ClaimPair>, std::vector<model::ClaimPair>>
measured_pairs(const AgentWorld& w, const std::vector<Claim>& claims,
               const std::vector<model::TrialObservation>& h) {
    std::map<int, std::pair<double, int>> time, peak; // candidate -> sum of logs, count
    for (const auto& t : h)
        if (t.outcome == model::ObservationKind::ok) {
            auto& s = time[t.candidate];
            s.first += std::log(t.step_time_s), ++s.second;
            if (t.peak_bytes > 0) {
                auto& p = peak[t.candidate];
                p.first += std::log(t.peak_bytes), ++p.second;
            }
        }
    const auto base = w.configuration(w.base_of(w.baseline()));
    std::vector<model::ClaimPair> speed, memory;
    for (const auto& c : claims) {
        double st = 0, sm = 0;
        int nt = 0, nm = 0;
        for (const auto& [i, s] : time) {
            if (!has(w, c, i)) continue;
            const int o =
                without(w, c, i, c.patch >= 0 || !c.base_patch.empty() ? "" : base.knobs.at(c.knob));
            if (o < 0 || !time.count(o)) continue;
            st += time.at(o).first / time.at(o).second - s.first / s.second, ++nt;
            if (c.patch >= 0 && peak.count(i) && peak.count(o))
                sm += peak.at(i).first / peak.at(i).second - peak.at(o).first / peak.at(o).second, ++nm;
        }
        if (nt > 0) speed.push_back({c.claimed, std::exp(st / nt)});
        if (nm > 0) memory.push_back({c.memory_claimed, std::exp(sm / nm)});
    }
    return {speed, memory};
}

struct Config {
    int budget = 40, q = 4, calls = 3, patches_per_call = 2;
    double confidence = 0.8;
};

// The harness arms: model::BatchProposer over the candidates whose patches are revealed.
class HarnessArm {
  public:
    HarnessArm(const AgentWorld& w, Arm arm, std::uint64_t seed, const Config& cfg)
        : w_(w), arm_(arm), seed_(seed), cfg_(cfg) {}

    model::ClaimCalibration calibration(const Revealed& r, const std::vector<model::TrialObservation>& h,
                                        bool memory) const {
        if (arm_ != Arm::harness) return {};
        // The agent's patches, as a campaign calibrates (a knob's or a catalog patch's effect is the table's
        // average, not the effect where it was measured).
        std::vector<Claim> patches;
        for (const auto& c : r.claims)
            if (c.patch >= 0) patches.push_back(c);
        auto pairs = measured_pairs(w_, patches, h);
        return model::calibrate_claims(memory ? pairs.second : pairs.first);
    }

    std::vector<int> ask(const Revealed& r, const std::vector<model::TrialObservation>& history) {
        std::vector<int> global, local(w_.size(), -1);
        for (int i = 0; i < w_.size(); ++i)
            if ((w_.mask_of(i) & ~r.mask) == 0)
                local[i] = static_cast<int>(global.size()), global.push_back(i);
        const bool claims = arm_ != Arm::ignore && !r.claims.empty();
        const auto speed = calibration(r, history, false), memory = calibration(r, history, true);
        std::vector<model::EffectClaim> effects;
        for (const auto& c : r.claims) {
            model::EffectClaim e;
            e.speedup = c.claimed;
            e.memory_factor = c.memory_claimed;
            e.confidence = arm_ == Arm::trust ? 1.0 : cfg_.confidence;
            if (arm_ == Arm::harness) {
                e.discount = speed.discount;
                e.memory_discount = memory.discount;
                e.calibration_error = speed.discounted_error;
            }
            effects.push_back(e);
        }
        std::vector<model::Candidate> cands;
        cands.reserve(global.size());
        for (int i : global) {
            auto c = w_.candidates()[i];
            if (claims) {
                c.prior_basis = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(r.claims.size()));
                for (std::size_t j = 0; j < r.claims.size(); ++j)
                    if (has(w_, r.claims[j], i)) {
                        c.prior_basis(static_cast<Eigen::Index>(j)) = 1;
                        c.prior_peak_bytes *= model::claimed_memory_factor(effects[j]);
                    }
            }
            for (auto& s : c.savers)
                s.candidate = local[s.candidate];
            c.savers.erase(std::remove_if(c.savers.begin(), c.savers.end(),
                                          [](const model::MemorySaver& s) { return s.candidate < 0; }),
                           c.savers.end());
            cands.push_back(std::move(c));
        }
        std::vector<model::TrialObservation> trials = history;
        for (auto& t : trials)
            t.candidate = local[t.candidate];
        model::ProposerSettings s;
        s.memory_limit_bytes = w_.env().memory_limit_bytes();
        s.noise_variance = w_.env().noise_variance();
        s.min_detectable_effect = 0.02;
        s.trial_steps = w_.env().trial_steps();
        s.trial_overhead_s = w_.env().startup_s();
        s.seed = seed_;
        s.edges.unknown_ordered = w_.unknown_ordered();
        s.edges.feature_names = w_.feature_names();
        if (claims) s.runtime_prior = model::runtime_claim_prior(effects);
        s.initial_design = initial_design(r, local);
        std::vector<int> out;
        for (const auto& p : proposer_.propose(cands, trials, cfg_.q, s))
            out.push_back(global[p.candidate]);
        return out;
    }

  private:
    // The baseline's one-knob neighbours and each revealed patch on it (as a campaign's
    // search::baseline_neighbours), one move of each before a second of any.
    std::vector<int> initial_design(const Revealed& r, const std::vector<int>& local) const {
        const int b0 = w_.base_of(w_.baseline());
        const auto base = w_.configuration(b0);
        std::vector<std::vector<int>> groups;
        for (const auto& k : w_.env().encoding().knobs()) {
            const auto at = std::find(k.values.begin(), k.values.end(), base.knobs.at(k.name));
            if (at == k.values.end()) continue;
            const auto i = at - k.values.begin();
            groups.emplace_back();
            for (std::ptrdiff_t j = 0; j < static_cast<std::ptrdiff_t>(k.values.size()); ++j) {
                if (j == i || (k.kind == model::KnobSpec::Kind::power_of_two && std::abs(j - i) != 1))
                    continue;
                auto c = base;
                c.knobs[k.name] = k.values[static_cast<std::size_t>(j)];
                if (const int b = w_.base_position(c); b >= 0) groups.back().push_back(local[w_.index(b, 0)]);
            }
        }
        for (const auto& p : w_.env().encoding().patches()) {
            auto c = base;
            if (!c.patches.erase(p.name)) c.patches.insert(p.name);
            if (const int b = w_.base_position(c); b >= 0) groups.push_back({local[w_.index(b, 0)]});
        }
        for (int j = 0; j < w_.k(); ++j)
            if (r.mask >> j & 1) groups.push_back({local[w_.index(b0, 1u << j)]});
        std::vector<int> out;
        for (std::size_t round = 0, added = 1; added > 0; ++round) {
            added = 0;
            for (const auto& g : groups)
                if (round < g.size()) out.push_back(g[round]), ++added;
        }
        return out;
    }

    const AgentWorld& w_;
    Arm arm_;
    std::uint64_t seed_;
    const Config& cfg_;
    model::BatchProposer proposer_;
};

// The coding-agent loop: from the incumbent, the suggestion with the best claimed gain whose result it has
// not measured yet; kept if it measured faster than the incumbent.
class GreedyArm {
  public:
    explicit GreedyArm(const AgentWorld& w) : w_(w), incumbent_(w.baseline()) {}
    std::vector<int> ask(const Revealed& r) {
        const auto base = w_.configuration(w_.base_of(w_.baseline()));
        const auto here = w_.configuration(w_.base_of(incumbent_));
        // A knob claim is against the baseline's value: relative to the incumbent's value, the ratio.
        auto knob_claim = [&](const std::string& knob, const std::string& value) {
            if (value == base.knobs.at(knob)) return 1.0;
            for (const auto& c : r.claims)
                if (c.patch < 0 && c.base_patch.empty() && c.knob == knob && c.value == value)
                    return c.claimed;
            return 1.0;
        };
        double best = -1;
        int pick = -1;
        for (const auto& c : r.claims) {
            int to = -1;
            double gain = 0;
            if (c.patch >= 0) {
                if (w_.mask_of(incumbent_) >> c.patch & 1) continue;
                to = w_.index(w_.base_of(incumbent_), w_.mask_of(incumbent_) | 1u << c.patch);
                gain = c.claimed;
            } else if (!c.base_patch.empty()) {
                if (here.patches.count(c.base_patch)) continue;
                auto config = here;
                config.patches.insert(c.base_patch);
                const int b = w_.base_position(config);
                if (b < 0) continue;
                to = w_.index(b, w_.mask_of(incumbent_));
                gain = c.claimed;
            } else {
                if (here.knobs.at(c.knob) == c.value) continue;
                auto config = here;
                config.knobs[c.knob] = c.value;
                const int b = w_.base_position(config);
                if (b < 0) continue;
                to = w_.index(b, w_.mask_of(incumbent_));
                gain = c.claimed / knob_claim(c.knob, here.knobs.at(c.knob));
            }
            if (tried_.count(to)) continue;
            if (gain > best) best = gain, pick = to;
        }
        // The baseline's own values are suggestions too once the incumbent has left them.
        for (const auto& [knob, value] : base.knobs) {
            if (here.knobs.at(knob) == value) continue;
            auto config = here;
            config.knobs[knob] = value;
            const int b = w_.base_position(config);
            if (b < 0) continue;
            const int to = w_.index(b, w_.mask_of(incumbent_));
            const double gain = 1.0 / knob_claim(knob, here.knobs.at(knob));
            if (!tried_.count(to) && gain > best) best = gain, pick = to;
        }
        if (pick < 0) return {};
        return {pick};
    }
    void tell(const model::TrialObservation& t) {
        tried_.insert(t.candidate);
        if (t.candidate == w_.baseline() && t.outcome == model::ObservationKind::ok && incumbent_time_ == 0) {
            incumbent_time_ = t.step_time_s;
            return;
        }
        if (t.outcome == model::ObservationKind::ok && t.step_time_s < incumbent_time_) {
            incumbent_ = t.candidate;
            incumbent_time_ = t.step_time_s;
        }
    }

  private:
    const AgentWorld& w_;
    int incumbent_;
    double incumbent_time_ = 0;
    std::set<int> tried_; // every candidate it ran: never run again
};

// The bound no arm can beat: it knows every candidate's true step time and feasibility and runs, one trial at
// a time, the fastest feasible candidate it has not run among those whose patches the agent has revealed. The
// agent's calls come on the same schedule as for the other arms, so its trials to 5% are how soon the calls
// reveal the patches the best candidates need.
class OracleArm {
  public:
    explicit OracleArm(const AgentWorld& w) : w_(w) {}
    std::vector<int> ask(const Revealed& r) const {
        int pick = -1;
        for (int i = 0; i < w_.size(); ++i)
            if ((w_.mask_of(i) & ~r.mask) == 0 && w_.feasible(i) && !tried_.count(i) &&
                (pick < 0 || w_.true_time(i) < w_.true_time(pick)))
                pick = i;
        if (pick < 0) return {};
        return {pick};
    }
    void tell(const model::TrialObservation& t) { tried_.insert(t.candidate); }

  private:
    const AgentWorld& w_;
    std::set<int> tried_;
};

struct ArmRun {
    std::vector<std::string> trace; // each trial: candidate, outcome, true time over the best
    double discount_10 = 1;         // the harness's discount after 10 trials
    double bias = 1;                // the agent's
    int to_5pct = 0;                // 0: not within the budget
    int trials = 0;
    double wasted_s = 0, cost_to_5pct_s = 0;
    double calibration_error_10 = NAN, claim_error = NAN; // over the patches revealed by trial 10
};

ArmRun run_arm(const AgentWorld& w, const Agent& agent, Arm arm, std::uint64_t seed, const Config& cfg) {
    ArmRun out;
    std::mt19937_64 rng(seed * 7919 + 17);
    HarnessArm harness(w, arm, seed, cfg);
    GreedyArm greedy(w);
    OracleArm oracle(w);
    std::vector<model::TrialObservation> history;
    Revealed r;
    int calls = 0, next_patch = 0;
    const double threshold = 1.05 * w.best_time();
    double cost = 0;
    auto record = [&](int i) {
        const auto t = w.run(i, rng);
        history.push_back(t);
        greedy.tell(t);
        oracle.tell(t);
        cost += t.cost_s;
        if (t.outcome != model::ObservationKind::ok) out.wasted_s += t.cost_s;
        const int n = static_cast<int>(history.size());
        out.trace.push_back(fmt::format("{:>3} {:<7} {:>6.3f} {}", n,
                                        t.outcome == model::ObservationKind::ok    ? "ok"
                                        : t.outcome == model::ObservationKind::oom ? "oom"
                                                                                   : "failed",
                                        w.true_time(i) / w.best_time(), w.candidates()[i].id));
        if (out.to_5pct == 0 && t.outcome == model::ObservationKind::ok && w.true_time(i) <= threshold)
            out.to_5pct = n, out.cost_to_5pct_s = cost;
    };
    auto call_agent = [&] {
        if (calls >= cfg.calls) return;
        if (calls == 0) r.claims = agent.knobs;
        for (int p = 0; p < cfg.patches_per_call && next_patch < w.k(); ++p, ++next_patch) {
            r.claims.push_back(agent.patches[next_patch]);
            r.mask |= 1u << agent.patches[next_patch].patch;
        }
        ++calls;
    };
    auto read_calibration = [&] {
        double believed = 0, raw = 0;
        int n = 0;
        const double discount = arm == Arm::harness ? harness.calibration(r, history, false).discount : 1.0;
        for (const auto& c : r.claims)
            if (c.patch >= 0) {
                believed += std::abs(discount * std::log(c.claimed) - std::log(c.truth));
                raw += std::abs(std::log(c.claimed) - std::log(c.truth));
                ++n;
            }
        if (n > 0 && arm != Arm::ignore && arm != Arm::oracle) out.calibration_error_10 = believed / n;
        out.discount_10 = discount;
        if (n > 0) out.claim_error = raw / n;
    };
    record(w.baseline()); // the doctor's baseline
    call_agent();
    int since_call = 0;
    while (static_cast<int>(history.size()) < cfg.budget) {
        auto batch = arm == Arm::greedy   ? greedy.ask(r)
                     : arm == Arm::oracle ? oracle.ask(r)
                                          : harness.ask(r, history);
        if (batch.empty()) break;
        for (int i : batch) {
            if (static_cast<int>(history.size()) >= cfg.budget) break;
            record(i);
            if (history.size() == 10) read_calibration();
        }
        // The agent is called after each batch: every q trials for the greedy loop too.
        since_call += static_cast<int>(batch.size());
        if (since_call >= cfg.q) since_call = 0, call_agent();
    }
    if (std::isnan(out.claim_error)) read_calibration();
    out.trials = static_cast<int>(history.size());
    return out;
}

// A simulated table is large (tens of thousands of configurations): a sample of it, with the baseline, its
// one-knob neighbours and the fastest feasible configuration.
std::vector<int> base_sample(const Environment& env, int limit, std::uint64_t seed) {
    std::vector<int> all(env.size());
    std::iota(all.begin(), all.end(), 0);
    if (limit <= 0 || env.size() <= limit) return all;
    std::set<int> keep = {env.baseline()};
    int best = -1;
    for (int i = 0; i < env.size(); ++i)
        if (env.feasible(i) && (best < 0 || env.true_step_time(i) < env.true_step_time(best))) best = i;
    if (best >= 0) keep.insert(best);
    const auto base = env.configuration(env.baseline());
    for (const auto& k : env.encoding().knobs())
        for (const auto& v : k.values) {
            auto c = base;
            c.knobs[k.name] = v;
            if (const int i = env.find(c); i >= 0) keep.insert(i);
        }
    std::mt19937_64 rng(seed);
    std::shuffle(all.begin(), all.end(), rng);
    for (int i : all)
        if (static_cast<int>(keep.size()) < limit) keep.insert(i);
    return {keep.begin(), keep.end()};
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"InfraRSI agent benchmark: claims as priors against a greedy coding-agent loop"};
    std::vector<std::string> tables;
    std::vector<double> biases;
    int seeds = 8, latent = 6, sim_configs = 120;
    bool trace = false;
    Config cfg;
    app.add_option("--table", tables,
                   "sim-gpt7b-64, sim-gpt20b-256, sim-gpt175b-1024, or a .jsonl table; repeatable")
        ->required();
    app.add_option("--seeds", seeds, "runs per table and arm");
    app.add_option("--budget", cfg.budget, "trials per run (every arm), the doctor's baseline included");
    app.add_option("--q", cfg.q, "the harness's batch size; the agent is called after each batch");
    app.add_option("--calls", cfg.calls, "agent calls per run (every arm)");
    app.add_option("--patches-per-call", cfg.patches_per_call, "latent patches the agent reveals per call");
    app.add_option("--latent", latent, "latent patches (at most 8)");
    app.add_option(
        "--bias", biases,
        "the agent's claim bias (log claimed = bias * log true + noise), repeatable; default 2 and "
        "0.5 alternating over seeds");
    app.add_option("--confidence", cfg.confidence, "the agent's stated confidence");
    app.add_option("--sim-configs", sim_configs, "base configurations sampled from a simulated table");
    app.add_flag("--trace", trace, "print each arm's trials of the first seed, and every seed's discount");
    CLI11_PARSE(app, argc, argv);
    if (biases.empty()) biases = {2.0, 0.5};
    try {
        if (latent < 1 || latent > 8)
            throw Error("--latent " + std::to_string(latent), "bench_agent", "1 to 8");
        std::map<std::string, model::SimulatorSpec> sims;
        for (const auto& s : model::TrainingSimulator::presets())
            sims[s.name] = s;
        std::cout << fmt::format(
            "# bench_agent: seeds={} budget={} q={} calls={} patches_per_call={} latent={} "
            "confidence={} bias={}\n",
            seeds, cfg.budget, cfg.q, cfg.calls, cfg.patches_per_call, latent, cfg.confidence,
            fmt::join(biases, ","));
        std::vector<std::string> summaries;
        const std::vector<Arm> arms = {Arm::harness, Arm::greedy, Arm::ignore, Arm::trust, Arm::oracle};
        for (const auto& table : tables) {
            const auto started = std::chrono::steady_clock::now();
            std::unique_ptr<Environment> env;
            if (sims.count(table))
                env = std::make_unique<SimulatorEnvironment>(sims.at(table));
            else
                env = std::make_unique<RecordedTableEnvironment>(table);
            std::map<Arm, std::vector<ArmRun>> runs;
            int world_size = 0;
            for (int seed = 1; seed <= seeds; ++seed) {
                std::mt19937_64 rng(static_cast<std::uint64_t>(seed) * 104729);
                const double bias = biases[static_cast<std::size_t>(seed - 1) % biases.size()];
                const AgentWorld w(*env, base_sample(*env, sims.count(table) ? sim_configs : 0, seed),
                                   latent_patches(latent, rng));
                world_size = w.size();
                const Agent agent = simulated_agent(w, bias, rng);
                for (Arm a : arms) {
                    runs[a].push_back(run_arm(w, agent, a, static_cast<std::uint64_t>(seed), cfg));
                    runs[a].back().bias = bias;
                }
            }
            std::cout << fmt::format(
                "\n## {}: {} candidates ({} latent patches), {:.0f} s\n", env->name(), world_size, latent,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
            std::cout << fmt::format("{:<8} {:>22} {:>8} {:>14} {:>14} {:>22} {:>12}\n", "arm",
                                     "trials to 5%", "reached", "wasted node-s", "node-s to 5%",
                                     "calibration error @10", "claim error");
            std::map<Arm, double> median, wasted, calibration, claim;
            for (Arm a : arms) {
                std::vector<double> t, cost, cal, raw;
                double waste = 0;
                int reached = 0;
                for (const auto& r : runs[a]) {
                    t.push_back(r.to_5pct > 0 ? r.to_5pct : cfg.budget + 1);
                    reached += r.to_5pct > 0;
                    if (r.to_5pct > 0) cost.push_back(r.cost_to_5pct_s);
                    waste += r.wasted_s;
                    if (!std::isnan(r.calibration_error_10)) cal.push_back(r.calibration_error_10);
                    if (!std::isnan(r.claim_error)) raw.push_back(r.claim_error);
                }
                median[a] = quantile(t, 0.5);
                wasted[a] = waste / static_cast<double>(runs[a].size());
                calibration[a] =
                    cal.empty() ? NAN : std::accumulate(cal.begin(), cal.end(), 0.0) / cal.size();
                claim[a] = raw.empty() ? NAN : std::accumulate(raw.begin(), raw.end(), 0.0) / raw.size();
                std::cout << fmt::format(
                    "{:<8} {:>22} {:>8} {:>14.0f} {:>14} {:>22} {:>12.3f}\n", arm_name(a),
                    fmt::format("{} [{}-{}]", trials_text(median[a], cfg.budget),
                                trials_text(quantile(t, 0.25), cfg.budget),
                                trials_text(quantile(t, 0.75), cfg.budget)),
                    fmt::format("{}/{}", reached, runs[a].size()), wasted[a],
                    cost.empty() ? std::string("-") : fmt::format("{:.0f}", quantile(cost, 0.5)),
                    std::isnan(calibration[a]) ? std::string("-") : fmt::format("{:.3f}", calibration[a]),
                    claim[a]);
            }
            // The calibration by the agent's bias: an over-claimer's error is mostly bias, which the discount
            // removes; an under-claimer's is as much noise as bias, and the discount is capped at 1.5.
            for (double b : biases) {
                std::vector<double> cal, raw, disc;
                for (const auto& r : runs[Arm::harness])
                    if (r.bias == b && !std::isnan(r.calibration_error_10))
                        cal.push_back(r.calibration_error_10), raw.push_back(r.claim_error),
                            disc.push_back(r.discount_10);
                if (cal.empty()) continue;
                const double c = std::accumulate(cal.begin(), cal.end(), 0.0) / cal.size();
                const double w0 = std::accumulate(raw.begin(), raw.end(), 0.0) / raw.size();
                std::cout << fmt::format("harness, agent bias {}: claim error {:.3f}, after 10 trials {:.3f} "
                                         "(ratio {:.2f}), discount median {:.2f}\n",
                                         b, w0, c, c / w0, quantile(disc, 0.5));
            }
            if (trace) {
                for (Arm a : arms) {
                    std::cout << fmt::format(
                        "# trace {} seed 1 (trial, outcome, true time / best, candidate):\n", arm_name(a));
                    for (const auto& line : runs[a].front().trace)
                        std::cout << "#   " << line << "\n";
                }
                std::cout << "# harness discount after 10 trials per seed:";
                for (const auto& r : runs[Arm::harness])
                    std::cout << fmt::format(" {:.2f}", r.discount_10);
                std::cout << "\n";
            }
            auto ratio = [](double a, double b) {
                return b > 0   ? fmt::format("{:.2f}", a / b)
                       : a > 0 ? std::string("inf")
                               : std::string("1.00");
            };
            summaries.push_back(fmt::format(
                "summary table={} trials_vs_greedy={} wasted_vs_greedy={} calibration_error_10={:.3f} "
                "claim_error={:.3f} calibration_ratio={} trust_vs_harness_trials={} "
                "ignore_vs_harness_trials={} oracle_vs_greedy_trials={}",
                env->name(), ratio(median[Arm::harness], median[Arm::greedy]),
                ratio(wasted[Arm::harness], wasted[Arm::greedy]), calibration[Arm::harness],
                claim[Arm::harness], ratio(calibration[Arm::harness], claim[Arm::harness]),
                ratio(median[Arm::trust], median[Arm::harness]),
                ratio(median[Arm::ignore], median[Arm::harness]),
                ratio(median[Arm::oracle], median[Arm::greedy])));
        }
        std::cout << "\n";
        for (const auto& s : summaries)
            std::cout << s << "\n";
    } catch (const std::exception& e) {
        std::cerr << "bench_agent: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
