// Claims as priors (issue 31): an agent's claimed speed-up and memory factor are where the models start for
// that change, and the trials move them.
#include "model/batch_proposer.hpp"
#include "model/censored_memory_model.hpp"
#include "model/claim_prior.hpp"
#include "model/features.hpp"
#include "search/model_proposer.hpp"
#include "util/error.hpp"

#include <cmath>
#include <doctest/doctest.h>
#include <random>
#include <regex>

using namespace infrarsi;
using namespace infrarsi::model;

namespace {

// y = 0.3 x + effect * h, with h (a patch's indicator) both a kernel input and the basis function.
struct BasisData {
    Eigen::MatrixXd X;
    Eigen::VectorXd y;
};
BasisData basis_data(int off, int on, double effect, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(0, 1);
    std::normal_distribution<double> noise(0, 0.01);
    BasisData d;
    d.X.resize(off + on, 3);
    d.y.resize(off + on);
    for (int i = 0; i < off + on; ++i) {
        const double x = u(rng), h = i < off ? 0 : 1;
        d.X.row(i) << x, h, h;
        d.y(i) = 0.3 * x + effect * h + noise(rng);
    }
    return d;
}

GpSettings basis_settings(double mean, double sd) {
    GpSettings s;
    s.noise_variance_floor = 1e-4;
    s.basis.mean = Eigen::VectorXd::Constant(1, mean);
    s.basis.variance = Eigen::VectorXd::Constant(1, sd * sd);
    return s;
}

} // namespace

TEST_CASE("a claim is the runtime model's prediction where no trial has the change, with the claim's "
          "uncertainty") {
    const auto d = basis_data(20, 0, 0.0, 1);
    GaussianProcess gp;
    gp.fit(d.X, d.y, basis_settings(-0.5, 0.1));
    Eigen::MatrixXd q(2, 3);
    q << 0.5, 0, 0, 0.5, 1, 1;
    const auto p = gp.posterior(q);
    CHECK(p.mean(0) == doctest::Approx(0.15).epsilon(0.2));
    CHECK(p.mean(1) - p.mean(0) == doctest::Approx(-0.5).epsilon(0.1)); // the claimed effect, as said
    CHECK(p.variance(1) > p.variance(0) + 0.8 * 0.01);                  // at least the claim's variance
    CHECK(gp.mean(q).isApprox(p.mean, 1e-9));
    CHECK(gp.signal_variance() >= 0.01);
}

TEST_CASE("trials of the change override a wrong claim, a confident one too") {
    // The claim says -0.5 (a 1.65x speed-up); the change costs +0.2 (slower).
    const auto d = basis_data(20, 10, 0.2, 2);
    Eigen::MatrixXd q(2, 3);
    q << 0.5, 0, 0, 0.5, 1, 1;
    for (double sd : {0.5, 0.05}) {
        CAPTURE(sd);
        GaussianProcess gp;
        gp.fit(d.X, d.y, basis_settings(-0.5, sd));
        const auto m = gp.mean(q);
        CHECK(m(1) - m(0) == doctest::Approx(0.2).epsilon(0.25));
    }
}

TEST_CASE("the GP refuses a basis prior that does not fit its columns") {
    const auto d = basis_data(5, 5, 0.0, 3);
    GaussianProcess gp;
    auto s = basis_settings(0, 0.1);
    s.basis.variance.resize(2);
    s.basis.variance << 0.1, 0.1;
    CHECK_THROWS_AS(gp.fit(d.X, d.y, s), Error);
    s = basis_settings(std::nan(""), 0.1);
    CHECK_THROWS_AS(gp.fit(d.X, d.y, s), Error);
    s = basis_settings(0, 0.1);
    s.basis.variance(0) = -1;
    CHECK_THROWS_AS(gp.fit(d.X, d.y, s), Error);
}

TEST_CASE("a claim's weight: its sd widens as the confidence falls, never below the agent's calibration "
          "error") {
    CHECK(claim_prior_sd(1, 0) == doctest::Approx(0.05));
    CHECK(claim_prior_sd(0, 0) == doctest::Approx(0.5));
    CHECK(claim_prior_sd(0.5, 0) > claim_prior_sd(0.9, 0));
    CHECK(claim_prior_sd(1, 0.3) == doctest::Approx(std::sqrt(M_PI / 2) * 0.3));
    CHECK(claim_prior_sd(7, 0) == doctest::Approx(0.05));           // clamped to [0, 1]
    CHECK(claim_prior_sd(std::nan(""), 0) == doctest::Approx(0.5)); // no confidence: the widest
}

TEST_CASE("an agent's claim is sanitized: a non-positive or non-finite factor is ignored, a huge one read "
          "as 10x, the discount scales the log effect") {
    EffectClaim c;
    c.speedup = 2;
    CHECK(claimed_log_step_effect(c) == doctest::Approx(-std::log(2)));
    c.discount = 0.5;
    CHECK(claimed_log_step_effect(c) == doctest::Approx(-0.5 * std::log(2)));
    c.discount = 1;
    for (double bad : {0.0, -3.0, std::nan(""), HUGE_VAL}) {
        c.speedup = bad;
        CHECK(claimed_log_step_effect(c) == 0);
    }
    c.speedup = 1e12;
    CHECK(claimed_log_step_effect(c) == doctest::Approx(-std::log(10)));
    c.memory_factor = 0.5;
    c.memory_discount = 0.5;
    CHECK(claimed_memory_factor(c) == doctest::Approx(std::sqrt(0.5)));
    c.memory_factor = 1e-30;
    c.memory_discount = 1;
    CHECK(claimed_memory_factor(c) == doctest::Approx(0.1));
}

namespace {

// mb x recompute, patches flash (0.8x time) and fused (0.97x time).
struct World {
    FeatureEncoding enc{
        {{"mb", KnobSpec::Kind::power_of_two, {"1", "2", "4", "8"}, MemoryEffect::increasing, false},
         {"recompute", KnobSpec::Kind::choice, {"none", "full"}, MemoryEffect::decreasing, true}},
        {{"flash", MemoryEffect::decreasing, true}, {"fused", MemoryEffect::none, false}}};
    std::vector<Configuration> configs;
    std::vector<Candidate> cands;
    std::vector<double> time;
    World() {
        std::vector<double> prior;
        for (int mb : {1, 2, 4, 8})
            for (int rc = 0; rc < 2; ++rc)
                for (int p = 0; p < 4; ++p) {
                    Configuration c{{{"mb", std::to_string(mb)}, {"recompute", rc ? "full" : "none"}}, {}};
                    if (p & 1) c.patches.insert("flash");
                    if (p & 2) c.patches.insert("fused");
                    configs.push_back(c);
                    prior.push_back(10e9 * mb);
                    time.push_back((1 + 1.5 / mb) * (rc ? 1.33 : 1.0) * (p & 1 ? 0.8 : 1.0) *
                                   (p & 2 ? 0.97 : 1.0));
                }
        cands = build_candidates(enc, configs, prior);
    }
    int find(int mb, bool rc, bool flash, bool fused) const {
        for (int i = 0; i < static_cast<int>(configs.size()); ++i)
            if (configs[i].knobs.at("mb") == std::to_string(mb) &&
                (configs[i].knobs.at("recompute") == "full") == rc &&
                configs[i].patches.count("flash") == flash && configs[i].patches.count("fused") == fused)
                return i;
        return -1;
    }
    // A claim on `fused`: one basis function, 1 where fused is on.
    void claim_fused(ProposerSettings& s, double speedup, double confidence) {
        EffectClaim c;
        c.speedup = speedup;
        c.confidence = confidence;
        s.runtime_prior = runtime_claim_prior({c});
        for (std::size_t i = 0; i < cands.size(); ++i)
            cands[i].prior_basis =
                Eigen::VectorXd::Constant(1, configs[i].patches.count("fused") ? 1.0 : 0.0);
    }
    TrialObservation trial(int i, std::mt19937_64& rng) const {
        std::normal_distribution<double> z(0, 0.01);
        TrialObservation t;
        t.candidate = i;
        t.step_time_s = time[i] * std::exp(z(rng));
        t.peak_bytes = 5e9;
        t.cost_s = 60;
        return t;
    }
};

} // namespace

TEST_CASE("before the runtime model is fitted, the initial design takes the change with the most claimed "
          "gain first") {
    World w;
    ProposerSettings s;
    s.memory_limit_bytes = 200e9;
    const int base = w.find(2, false, false, false);
    s.initial_design = {w.find(2, false, true, false), w.find(2, false, false, true),
                        w.find(4, false, false, false)};
    std::mt19937_64 rng(1);
    const std::vector<TrialObservation> trials = {w.trial(base, rng)};
    BatchProposer plain;
    auto p = plain.propose(w.cands, trials, 1, s);
    REQUIRE(p.size() == 1);
    CHECK(p[0].candidate == s.initial_design[0]); // no claims: the design's order

    w.claim_fused(s, 1.5, 0.5);
    BatchProposer claimed;
    p = claimed.propose(w.cands, trials, 2, s);
    REQUIRE(p.size() == 2);
    CHECK(p[0].candidate == w.find(2, false, false, true));
    CHECK(p[0].reason.find("claimed speed-up 1.50x") != std::string::npos);
    CHECK(p[1].candidate == w.find(2, false, true, false));
}

TEST_CASE("once fitted, the runtime model predicts a claimed change as claimed until its trials say "
          "otherwise") {
    World w;
    ProposerSettings s;
    s.memory_limit_bytes = 200e9;
    s.noise_variance = 1e-4;
    w.claim_fused(s, 3.0, 0.9); // claims 3x; it does 1.03x
    std::mt19937_64 rng(4);
    std::vector<TrialObservation> trials;
    for (int mb : {1, 2, 4, 8})
        for (bool rc : {false, true})
            trials.push_back(w.trial(w.find(mb, rc, mb % 2 == 0, false), rng));
    auto effect = [&](const BatchProposer& bp) {
        Eigen::MatrixXd q(2, runtime_features(w.cands[0]).size());
        q.row(0) = runtime_features(w.cands[w.find(4, false, false, false)]).transpose();
        q.row(1) = runtime_features(w.cands[w.find(4, false, false, true)]).transpose();
        const auto m = bp.runtime_model().mean(q);
        return m(1) - m(0);
    };
    BatchProposer before;
    before.propose(w.cands, trials, 1, s);
    REQUIRE(before.runtime_model_fitted());
    CHECK(effect(before) == doctest::Approx(-std::log(3.0)).epsilon(0.1));

    for (int mb : {1, 2, 8})
        for (bool rc : {false, true})
            trials.push_back(w.trial(w.find(mb, rc, false, true), rng));
    BatchProposer after;
    after.propose(w.cands, trials, 1, s);
    CHECK(std::abs(effect(after) - std::log(0.97)) < 0.1);
}

TEST_CASE("the proposer refuses prior basis values that do not match the runtime prior") {
    World w;
    ProposerSettings s;
    s.memory_limit_bytes = 200e9;
    w.claim_fused(s, 2, 0.5);
    w.cands[3].prior_basis.resize(0);
    CHECK_THROWS_AS(BatchProposer().propose(w.cands, {}, 1, s), Error);
}

TEST_CASE("a claimed memory saver's factor is the memory prior, and an OOM of it moves the model as any OOM "
          "does") {
    // Prior: 60 GB, claimed to be 0.5x with the patch (x(1) = 1); the limit is 80 GB, the truth over it.
    CensoredMemoryModel m;
    Eigen::VectorXd off(2), on(2), on_big(2);
    off << 0, 0;
    on << 0.5, 1;
    on_big << 1, 1;
    const double prior = 60e9, claimed = prior * 0.5;
    m.fit({}, 2);
    const double before = m.probability_over(on_big, claimed, 80e9);
    CHECK(before < m.probability_over(on_big, prior, 80e9)); // the claim lowers the risk
    m.fit({{on, claimed, true, 80e9}, {off, prior, false, 58e9}}, 2);
    CHECK(m.probability_over(on_big, claimed, 80e9) > before + 0.2);
}

namespace {

space::Space claim_space() {
    space::Space s;
    space::Knob mb;
    mb.name = "micro_batch";
    mb.kind = space::KnobKind::Pow2;
    mb.min = 1;
    mb.max = 8;
    mb.env = "MB";
    mb.baseline = 1LL;
    space::Knob layout;
    layout.name = "layout";
    layout.kind = space::KnobKind::Choice;
    layout.choices = {"a", "b"};
    layout.env = "LAYOUT";
    layout.baseline = std::string("a");
    s.knobs = {mb, layout};
    s.patches = {"agent_fused", "catalog_patch"};
    return s;
}

double p_oom_of(const std::string& reason) {
    std::smatch m;
    REQUIRE(std::regex_search(reason, m, std::regex("P\\(OOM\\)=([0-9.]+)")));
    return std::stod(m[1]);
}

} // namespace

TEST_CASE("model proposer: the claims it uses are a patch's of the space and a knob's value other than the "
          "baseline's, each once") {
    auto s = claim_space();
    search::PatchClaim claim;
    claim.speedup = 2;
    std::vector<search::PatchFacts> patches = {{"agent_fused", {}, claim},
                                               {"catalog_patch", {}},
                                               {"not_in_space", {}, claim},
                                               {"agent_fused", {}, claim}};
    std::vector<search::KnobPrior> knobs = {
        {"layout", "b", 1.2}, {"layout", "a", 3.0}, {"threads", "4", 2.0}, {"micro_batch", "4", 1.5}};
    const auto c = search::claimed_changes(s, patches, knobs);
    REQUIRE(c.changes.size() == 3);
    CHECK(c.changes[0].patch == "agent_fused");
    CHECK(c.changes[1].knob == "layout");
    CHECK(c.changes[1].value == "b");
    CHECK(c.changes[2].value == "4");
    space::Candidate cand = s.baseline();
    CHECK_FALSE(c.changes[0].in(cand));
    cand.patches = {"agent_fused"};
    cand.knobs["micro_batch"] = 4LL;
    CHECK(c.changes[0].in(cand));
    CHECK(c.changes[2].in(cand));
    CHECK_FALSE(c.changes[1].in(cand));
}

TEST_CASE("model proposer: an agent's claims order the first trials, lower a claimed saver's P(OOM), and "
          "are said in the notes") {
    auto s = claim_space();
    search::ProposalContext ctx;
    ctx.space = &s;
    ctx.patches = {{"agent_fused", {}}, {"catalog_patch", {}}};
    ctx.memory_limit_bytes = 80e9;
    ctx.noise_floor = 0.03;
    ctx.q = 6;
    ctx.memory_estimate = [](const space::Candidate&) -> std::optional<double> { return 70e9; };
    search::Observation base;
    base.candidate = s.baseline();
    base.step_time_s = 1.0;
    base.peak_memory_bytes = 70e9;
    base.cost_node_s = 30;
    ctx.history = {base};
    auto find = [](const std::vector<search::Proposal>& out, const std::string& patch) {
        for (const auto& p : out)
            if (p.candidate.patches == std::vector<std::string>{patch} &&
                std::get<long long>(p.candidate.knobs.at("micro_batch")) == 1)
                return p;
        FAIL("no proposal of +" << patch);
        return out.front();
    };
    search::ModelProposer plain;
    const auto without = plain.propose(ctx);
    REQUIRE(without.size() == 6);
    const double p_plain = p_oom_of(find(without, "agent_fused").reason);
    for (const auto& n : plain.notes())
        CHECK(n.find("claims as priors") == std::string::npos);

    search::PatchClaim claim;
    claim.speedup = 1.4;
    claim.memory_factor = 0.5;
    ctx.patches[0].claim = claim;
    search::ModelProposer claimed;
    const auto with = claimed.propose(ctx);
    REQUIRE(with.size() == 6);
    CHECK(with[0].candidate.patches == std::vector<std::string>{"agent_fused"});
    CHECK(p_oom_of(find(with, "agent_fused").reason) < p_plain);
    bool said = false;
    for (const auto& n : claimed.notes())
        said |= n.find("claims as priors") != std::string::npos &&
                n.find("+agent_fused 1.40x") != std::string::npos;
    CHECK(said);
}
