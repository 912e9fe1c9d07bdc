#pragma once
// A finished campaign with fixed figures, written through the store's own API on the toyload fixture's
// contract (tests/fixtures/toyload.contract.toml): three doctor runs, two search batches with an OOM, a build
// failure, a contract violation and a timeout, and one promoted verification with its A/B pairs. The report
// tests (golden JSON, HTML) read it; nothing runs.
#include "campaign/campaign.hpp"

#include "test_support.hpp"

#include <filesystem>

namespace infrarsi::test {

inline std::filesystem::path fixture_campaign(const TempDir& d) {
    namespace fs = std::filesystem;
    using store::TrialKind;
    using trial::Outcome;
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", d.path / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", d.path / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", d.path / "toyload.contract.toml");
    const auto dir = d.path / "c";
    campaign::Campaign::init(d.path / "toyload.contract.toml", dir);
    campaign::Campaign c(dir);
    auto& s = c.store();
    s.mark_started(store::now_seconds() - 300); // five minutes ago
    constexpr double MiB = 1 << 20;

    auto trial = [&](std::int64_t batch, TrialKind kind, const space::Candidate& cand, Outcome o,
                     std::optional<double> step, std::optional<double> peak, double cost,
                     std::optional<std::int64_t> verification = {}) {
        store::TrialRow t;
        t.batch_id = batch;
        t.array_index = static_cast<int>(s.trials_of_batch(batch).size());
        t.kind = kind;
        t.candidate = cand.to_json();
        t.candidate_key = cand.key();
        t.state = store::TrialState::Finished;
        t.outcome = o;
        t.step_time_s = step;
        t.peak_memory_bytes = peak;
        t.cost_node_s = cost;
        t.node = "node1";
        t.job_id = std::to_string(100 + batch) + "_" + std::to_string(t.array_index);
        t.verification_id = verification;
        if (o == Outcome::ContractViolation) {
            t.violation = trial::Violation::LossInvariant;
            t.detail = "loss invariant: step 8 loss 2.1 vs 1.9";
        } else if (o == Outcome::OutOfMemory) {
            t.detail = "out of memory: killed at the 300M limit";
        } else if (o == Outcome::BuildFailure) {
            t.detail = "patch broken_build does not compile";
        } else if (o == Outcome::Timeout) {
            t.detail = "time limit reached";
        }
        t.id = s.add_trial(t);
        s.update_trial(t); // the outcome and measurements, as ingest records them
        return t.id;
    };

    s.advance_stage(store::Stage::Doctor);
    const auto doctor = s.add_batch(store::BatchKind::Doctor, "batches/1/manifest.json");
    for (double step : {0.100, 0.104, 0.098})
        trial(doctor, TrialKind::Doctor, toy(1, 16, "none"), Outcome::Ok, step, 60 * MiB, 12);
    s.set_batch_finished(doctor);
    store::Baseline b;
    b.repeats = b.completed = 3;
    b.median_step_s = 0.100;
    b.cold_step_s = 0.150;
    b.cold_overhead = 1.5;
    b.cv_between = 0.02;
    b.cv_within = 0.03;
    b.minimum_detectable_effect = 0.05;
    b.comparison_repeats = 3;
    b.peak_memory_bytes = 60 * MiB;
    b.reference_losses = {2.0, 1.9, 1.8, 1.7, 1.6, 1.5, 1.45, 1.4};
    s.put_baseline(b);

    s.advance_stage(store::Stage::Search);
    auto patched = toy(1, 16, "none");
    patched.patches = {"broken_build"};
    const auto first = s.add_batch(store::BatchKind::Search, "batches/2/manifest.json");
    trial(first, TrialKind::Search, toy(2, 8, "none"), Outcome::Ok, 0.080, 110 * MiB, 9);
    trial(first, TrialKind::Search, toy(16, 1, "none"), Outcome::OutOfMemory, {}, {}, 3);
    trial(first, TrialKind::Search, patched, Outcome::BuildFailure, {}, {}, 0);
    trial(first, TrialKind::Search, toy(4, 4, "full"), Outcome::ContractViolation, 0.090, 120 * MiB, 8);
    s.set_batch_finished(first);
    const auto second = s.add_batch(store::BatchKind::Search, "batches/3/manifest.json");
    trial(second, TrialKind::Search, toy(4, 4, "none"), Outcome::Ok, 0.070, 190 * MiB, 8);
    trial(second, TrialKind::Search, toy(8, 2, "selective"), Outcome::Ok, 0.075, 240 * MiB, 8);
    trial(second, TrialKind::Search, toy(2, 8, "full"), Outcome::Timeout, {}, 80 * MiB, 30);
    s.set_batch_finished(second);

    s.advance_stage(store::Stage::Verification);
    const auto best = toy(4, 4, "none");
    const auto vbatch = s.add_batch(store::BatchKind::Verify, "batches/4/manifest.json");
    store::VerificationRow v;
    v.candidate = best.to_json();
    v.candidate_key = best.key();
    v.batch_id = vbatch;
    v.state = store::VerificationState::Running;
    v.id = s.add_verification(v);
    nlohmann::json pairs = nlohmann::json::array();
    const double pb[] = {0.101, 0.099, 0.102}, pc[] = {0.071, 0.070, 0.072};
    for (int i = 0; i < 3; ++i) {
        trial(vbatch, TrialKind::VerifyBaseline, toy(1, 16, "none"), Outcome::Ok, pb[i], 60 * MiB, 12, v.id);
        trial(vbatch, TrialKind::VerifyCandidate, best, Outcome::Ok, pc[i], 190 * MiB, 8, v.id);
        pairs.push_back({{"pair", i + 1},
                         {"order", i % 2 ? "BA" : "AB"},
                         {"baseline_node", "node1"},
                         {"candidate_node", "node1"},
                         {"same_node", true},
                         {"baseline_step_s", pb[i]},
                         {"candidate_step_s", pc[i]}});
    }
    s.set_batch_finished(vbatch);
    v.state = store::VerificationState::Done;
    v.promoted = true;
    v.speedup = 1.42;
    v.lo = 1.38;
    v.hi = 1.46;
    v.detail = store::verification_detail_from_json({{"pairs", pairs},
                                                     {"mde", 0.05},
                                                     {"min_speedup", 0.03},
                                                     {"reasons", nlohmann::json::array()},
                                                     {"evidence", {"3 pairs, 95% interval above 1 + MDE"}}});
    s.update_verification(v);
    s.add_promotion(v.id, v.candidate_key, 1.42);
    s.advance_stage(store::Stage::Done);
    s.log("campaign done");
    return dir;
}

} // namespace infrarsi::test
