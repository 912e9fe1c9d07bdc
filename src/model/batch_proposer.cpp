#include "model/batch_proposer.hpp"
#include "model/claim_prior.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numeric>
#include <random>
#include <unordered_map>
#include <unordered_set>

namespace infrarsi::model {

Eigen::VectorXd runtime_features(const Candidate& c) {
    if (c.prior_basis.size() == 0) return c.features;
    Eigen::VectorXd x(c.features.size() + c.prior_basis.size());
    x << c.features, c.prior_basis;
    return x;
}

double expected_improvement(double target, double mean, double sd) {
    if (sd < 1e-12) return std::max(0.0, target - mean);
    double z = (target - mean) / sd;
    return (target - mean) * normal_cdf(z) + sd * normal_pdf(z);
}

std::vector<char> memory_dominated(const std::vector<Candidate>& candidates,
                                   const std::vector<TrialObservation>& trials) {
    std::vector<char> out(candidates.size(), 0);
    // Knobs of undeclared memory effect must match: they join the key as +v and -v.
    const bool unknown = std::any_of(candidates.begin(), candidates.end(),
                                     [](const Candidate& c) { return c.memory_unknown.size() > 0; });
    std::vector<Eigen::VectorXd> full;
    if (unknown)
        for (const auto& c : candidates) {
            Eigen::VectorXd k(c.memory_key.size() + 2 * c.memory_unknown.size());
            k << c.memory_key, c.memory_unknown, -c.memory_unknown;
            full.push_back(std::move(k));
        }
    auto key_of = [&](std::size_t c) -> const Eigen::VectorXd& {
        return unknown ? full[c] : candidates[c].memory_key;
    };
    // Minimal OOM keys: an OOM whose key dominates another OOM's adds nothing.
    std::vector<const Eigen::VectorXd*> keys;
    for (const auto& t : trials) {
        if (t.outcome != ObservationKind::oom) continue;
        if (t.candidate < 0 || t.candidate >= static_cast<int>(candidates.size()))
            throw Error("trial refers to candidate " + std::to_string(t.candidate), "memory_dominated");
        out[t.candidate] = 1;
        if (key_of(t.candidate).size() > 0) keys.push_back(&key_of(t.candidate));
    }
    // Plain loops with early exit: this scans every candidate against every minimal OOM key.
    auto dominates = [](const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
        if (a.size() != b.size()) return false;
        const double *x = a.data(), *y = b.data();
        for (Eigen::Index j = 0; j < a.size(); ++j)
            if (x[j] < y[j] - 1e-9) return false;
        return true;
    };
    std::vector<const Eigen::VectorXd*> minimal;
    for (size_t i = 0; i < keys.size(); ++i) {
        bool redundant = false;
        for (size_t j = 0; j < keys.size() && !redundant; ++j)
            if (j != i && dominates(*keys[i], *keys[j]) && (!dominates(*keys[j], *keys[i]) || j < i))
                redundant = true;
        if (!redundant) minimal.push_back(keys[i]);
    }
    if (minimal.empty()) return out;

    // Coordinates declared "must match" appear as pairs (v, -v). Bucketing OOM keys by those values means a
    // candidate is only compared with OOMs of its own group (same TP x PP layout, say): the scan stays fast
    // with thousands of OOMs.
    const Eigen::Index K = minimal.front()->size();
    std::vector<Eigen::Index> paired;
    for (Eigen::Index j = 0; j < K; ++j)
        for (Eigen::Index k = j + 1; k < K; ++k) {
            bool pair = true;
            for (std::size_t c = 0; c < candidates.size(); ++c)
                if (key_of(c).size() == K && key_of(c)(j) != -key_of(c)(k)) {
                    pair = false;
                    break;
                }
            if (pair) paired.push_back(j);
        }
    // A hash of the paired values: a collision only costs comparisons, dominance itself is checked exactly.
    auto group = [&](const Eigen::VectorXd& key) {
        std::uint64_t h = 1469598103934665603ULL;
        for (auto j : paired)
            h = (h ^ std::hash<double>{}(key(j))) * 1099511628211ULL;
        return h;
    };
    std::unordered_map<std::uint64_t, std::vector<const Eigen::VectorXd*>> by_group;
    for (const auto* k : minimal)
        if (k->size() == K) by_group[group(*k)].push_back(k);
    for (size_t c = 0; c < candidates.size(); ++c) {
        if (out[c] || key_of(c).size() != K) continue;
        auto it = by_group.find(group(key_of(c)));
        if (it == by_group.end()) continue;
        for (const auto* k : it->second)
            if (dominates(key_of(c), *k)) {
                out[c] = 1;
                break;
            }
    }
    return out;
}

namespace {

void validate(const std::vector<Candidate>& candidates, const std::vector<TrialObservation>& trials, int q,
              const ProposerSettings& s) {
    if (candidates.empty()) throw Error("no candidates to propose from", "BatchProposer::propose");
    if (q < 1) throw Error("batch size " + std::to_string(q), "BatchProposer::propose", "at least 1");
    if (!(s.memory_limit_bytes > 0))
        throw Error("no memory limit", "ProposerSettings::memory_limit_bytes", "bytes per GPU > 0");
    const auto d = candidates.front().features.size();
    const auto m = s.runtime_prior.size();
    if (s.runtime_prior.variance.size() != m)
        throw Error("runtime prior with " + std::to_string(m) + " means and " +
                        std::to_string(s.runtime_prior.variance.size()) + " variances",
                    "ProposerSettings::runtime_prior", "one variance per mean");
    for (const auto& c : candidates) {
        if (c.prior_basis.size() != m)
            throw Error("candidate '" + c.id + "' has " + std::to_string(c.prior_basis.size()) +
                            " prior basis values",
                        "BatchProposer::propose", std::to_string(m) + ", one per claim of the runtime prior");
        if (c.features.size() != d)
            throw Error("candidate '" + c.id + "' has " + std::to_string(c.features.size()) + " features",
                        "BatchProposer::propose", std::to_string(d));
        if (!(c.prior_peak_bytes > 0))
            throw Error("candidate '" + c.id + "' has no prior peak estimate", "BatchProposer::propose");
    }
    const int n = static_cast<int>(candidates.size());
    for (const auto& t : trials) {
        if (t.candidate < 0 || t.candidate >= n)
            throw Error("trial refers to candidate " + std::to_string(t.candidate), "BatchProposer::propose",
                        "an index below " + std::to_string(n));
        if ((t.outcome == ObservationKind::ok || t.outcome == ObservationKind::stopped) &&
            !(t.step_time_s > 0))
            throw Error("successful trial of '" + candidates[t.candidate].id + "' has no step time",
                        "BatchProposer::propose");
    }
    for (int h : s.hints)
        if (h < 0 || h >= n)
            throw Error("hint " + std::to_string(h) + " is not a candidate", "ProposerSettings::hints");
}

std::string percent(double p) {
    return fmt::format("{:.2f}", p);
}

} // namespace

std::vector<char> excluded_candidates(const std::vector<Candidate>& candidates,
                                      const std::vector<TrialObservation>& trials) {
    std::vector<char> excluded = memory_dominated(candidates, trials);
    for (const auto& t : trials)
        excluded[t.candidate] = 1;
    return excluded;
}

RuntimePoints runtime_points(const std::vector<Candidate>& candidates,
                             const std::vector<TrialObservation>& trials) {
    RuntimePoints p;
    std::vector<int> use;
    std::unordered_set<int> measured;
    for (size_t i = 0; i < trials.size(); ++i) {
        const auto& t = trials[i];
        const bool timed = t.outcome == ObservationKind::ok || t.outcome == ObservationKind::stopped ||
                           t.outcome == ObservationKind::timeout || t.outcome == ObservationKind::infeasible;
        if (!timed || !(t.step_time_s > 0) || !std::isfinite(t.step_time_s)) continue;
        use.push_back(static_cast<int>(i));
        const bool censored = t.outcome == ObservationKind::timeout && t.step_time_censored;
        if (!censored) measured.insert(t.candidate);
    }
    p.distinct_measured = static_cast<int>(measured.size());
    if (use.empty()) return p;
    const auto d = candidates.front().features.size() + candidates.front().prior_basis.size();
    p.X.resize(static_cast<Eigen::Index>(use.size()), d);
    p.y.resize(static_cast<Eigen::Index>(use.size()));
    for (size_t i = 0; i < use.size(); ++i) {
        const auto& t = trials[use[i]];
        p.X.row(i) = runtime_features(candidates[t.candidate]).transpose();
        p.y(i) = std::log(t.step_time_s);
        p.censored.push_back(t.outcome == ObservationKind::timeout && t.step_time_censored);
    }
    return p;
}

Eigen::VectorXd fit_censored_runtime(GaussianProcess& gp, const RuntimePoints& points, const GpSettings& gs,
                                     int rounds) {
    std::vector<int> measured, censored;
    for (size_t i = 0; i < points.censored.size(); ++i)
        (points.censored[i] ? censored : measured).push_back(static_cast<int>(i));
    if (measured.empty()) throw Error("no measured step time to fit", "fit_censored_runtime");
    Eigen::VectorXd y = points.y;
    if (censored.empty()) {
        gp.fit(points.X, y, gs);
        return y;
    }
    // First the measured points alone; then every point, the censored ones at their conditional mean.
    Eigen::MatrixXd Xm(measured.size(), points.X.cols());
    Eigen::VectorXd ym(measured.size());
    for (size_t i = 0; i < measured.size(); ++i) {
        Xm.row(i) = points.X.row(measured[i]);
        ym(i) = points.y(measured[i]);
    }
    gp.fit(Xm, ym, gs);
    Eigen::MatrixXd Xc(censored.size(), points.X.cols());
    for (size_t i = 0; i < censored.size(); ++i)
        Xc.row(i) = points.X.row(censored[i]);
    GpSettings next = gs;
    for (int r = 0; r < std::max(1, rounds); ++r) {
        const GpPosterior post = gp.posterior(Xc);
        for (size_t i = 0; i < censored.size(); ++i) {
            const double bound = points.y(censored[i]);
            const double sd = std::sqrt(std::max(post.variance(i), 0.0) + gp.noise_variance());
            const double a = (bound - post.mean(i)) / std::max(sd, 1e-9);
            // E[y | y > bound] for y ~ N(mean, sd^2): mean + sd * pdf(a) / (1 - cdf(a)).
            y(censored[i]) = std::max(bound, post.mean(i) + sd * inverse_mills(-a));
        }
        next.warm_start = gp.hyperparameters();
        gp.fit(points.X, y, next);
    }
    return y;
}

void fit_feasibility(FeasibilityModel& model, const std::vector<Candidate>& candidates,
                     const std::vector<TrialObservation>& trials, const FeasibilitySettings& s) {
    std::vector<const TrialObservation*> use;
    for (const auto& t : trials)
        if (t.outcome != ObservationKind::failed) use.push_back(&t);
    Eigen::MatrixXd X(static_cast<Eigen::Index>(use.size()), candidates.front().features.size());
    std::vector<bool> failed;
    for (size_t i = 0; i < use.size(); ++i) {
        X.row(i) = candidates[use[i]->candidate].features.transpose();
        failed.push_back(use[i]->outcome == ObservationKind::infeasible);
    }
    model.fit(X, failed, s);
}

std::vector<MemoryPoint> memory_points(const std::vector<Candidate>& candidates,
                                       const std::vector<TrialObservation>& trials, double limit_bytes) {
    std::vector<MemoryPoint> mem;
    for (const auto& t : trials) {
        const auto& c = candidates[t.candidate];
        // A trial stopped early as slower ran its first steps, where the peak is reached: measured too.
        if ((t.outcome == ObservationKind::ok || t.outcome == ObservationKind::stopped) && t.peak_bytes > 0)
            mem.push_back({c.features, c.prior_peak_bytes, false, t.peak_bytes});
        else if (t.outcome == ObservationKind::oom)
            mem.push_back({c.features, c.prior_peak_bytes, true, limit_bytes});
    }
    return mem;
}

void add_hints(BatchDraft& batch, const std::vector<int>& hints, const std::function<double(int)>& p_oom,
               int q) {
    for (int h : hints)
        if (batch.size() < q && batch.allowed(h))
            batch.take(
                {h, "hint from contract or experience bank; P(OOM)=" + percent(p_oom(h)), p_oom(h), 0, 0});
}

void add_space_filling(BatchDraft& batch, const std::vector<Candidate>& candidates,
                       const std::vector<TrialObservation>& trials, const std::function<double(int)>& p_oom,
                       int q, double max_oom, std::mt19937_64& rng) {
    const int n = static_cast<int>(candidates.size());
    std::vector<int> avail;
    for (int c = 0; c < n; ++c)
        if (batch.allowed(c)) avail.push_back(c);
    std::shuffle(avail.begin(), avail.end(), rng);
    if (avail.size() > 3000) avail.resize(3000);
    std::vector<int> safe;
    std::vector<double> risk(avail.size());
    for (size_t i = 0; i < avail.size(); ++i) {
        risk[i] = p_oom(avail[i]);
        if (risk[i] <= max_oom) safe.push_back(static_cast<int>(i));
    }
    if (safe.empty()) { // nothing looks safe: take the least risky quarter
        std::vector<int> order(avail.size());
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return risk[a] < risk[b]; });
        order.resize((order.size() + 3) / 4);
        safe = order;
    }
    std::vector<double> mind(safe.size(), std::numeric_limits<double>::infinity());
    auto update = [&](const Eigen::VectorXd& f) {
        for (size_t i = 0; i < safe.size(); ++i)
            mind[i] = std::min(mind[i], (candidates[avail[safe[i]]].features - f).squaredNorm());
    };
    for (const auto& t : trials)
        update(candidates[t.candidate].features);
    for (const auto& p : batch.proposals())
        update(candidates[p.candidate].features);
    while (batch.size() < q) {
        int best = -1;
        for (size_t i = 0; i < safe.size(); ++i)
            if (batch.allowed(avail[safe[i]]) && (best < 0 || mind[i] > mind[best]))
                best = static_cast<int>(i);
        if (best < 0) break;
        const int c = avail[safe[best]];
        const double p = risk[safe[best]];
        const std::string dist =
            std::isfinite(mind[best]) ? fmt::format("{:.2f}", std::sqrt(mind[best])) : "inf";
        batch.take(
            {c, "space-filling initial design: distance " + dist + " to anything tried; P(OOM)=" + percent(p),
             p, 0, 0});
        update(candidates[c].features);
    }
}

std::vector<int> candidate_pool(const std::vector<Candidate>& candidates, const std::vector<int>& best_tried,
                                const BatchDraft& batch, const ProposerSettings& s, std::mt19937_64& rng) {
    const int n = static_cast<int>(candidates.size());
    const int d = static_cast<int>(candidates.front().features.size());
    std::vector<int> pool;
    std::vector<char> in_pool(n, 0);
    auto add_pool = [&](int c) {
        if (batch.allowed(c) && !in_pool[c]) in_pool[c] = 1, pool.push_back(c);
    };
    std::vector<int> avail;
    avail.reserve(n);
    for (int c = 0; c < n; ++c)
        if (batch.allowed(c)) avail.push_back(c);
    for (int tried : best_tried) {
        const double* f = candidates[tried].features.data();
        std::vector<std::pair<double, int>> dist(avail.size());
        for (size_t i = 0; i < avail.size(); ++i) {
            const double* g = candidates[avail[i]].features.data();
            double acc = 0;
            for (int j = 0; j < d; ++j)
                acc += (g[j] - f[j]) * (g[j] - f[j]);
            dist[i] = {acc, avail[i]};
        }
        int m = std::min<int>(s.neighbours, static_cast<int>(dist.size()));
        std::nth_element(dist.begin(), dist.begin() + m, dist.end());
        for (int i = 0; i < m; ++i)
            add_pool(dist[i].second);
        for (const auto& sv : candidates[tried].savers)
            add_pool(sv.candidate);
    }
    int want = std::min<int>(s.pool_size, static_cast<int>(avail.size()));
    for (int i = 0; i < want; ++i) { // partial Fisher-Yates
        std::uniform_int_distribution<size_t> pick(i, avail.size() - 1);
        std::swap(avail[i], avail[pick(rng)]);
        add_pool(avail[i]);
    }
    return pool;
}

std::vector<int> prescreen_pool(std::vector<int> pool, const std::vector<Candidate>& candidates,
                                const GaussianProcess& runtime, double target,
                                const std::function<double(int)>& p_oom, const ProposerSettings& s) {
    if (static_cast<int>(pool.size()) <= s.exact_pool) return pool;
    const int d =
        static_cast<int>(candidates.front().features.size() + candidates.front().prior_basis.size());
    Eigen::MatrixXd Xp(pool.size(), d);
    for (size_t i = 0; i < pool.size(); ++i)
        Xp.row(i) = runtime_features(candidates[pool[i]]).transpose();
    Eigen::VectorXd mu = runtime.mean(Xp);
    const double sd0 = std::sqrt(runtime.signal_variance());
    std::vector<std::pair<double, int>> bound(pool.size());
    for (size_t i = 0; i < pool.size(); ++i) {
        double p = p_oom(pool[i]);
        double run = s.trial_overhead_s + s.trial_steps * std::exp(mu(i));
        // The cost's lower bound: no timeout (the acquisition's upper bound).
        double cost = expected_trial_cost(run, p, 0.0, s);
        bound[i] = {-expected_improvement(target, mu(i), sd0) * (1 - p) / cost, pool[i]};
    }
    std::nth_element(bound.begin(), bound.begin() + s.exact_pool, bound.end());
    std::vector<int> out;
    for (int i = 0; i < s.exact_pool; ++i)
        out.push_back(bound[i].second);
    return out;
}

double expected_trial_cost(double run_s, double p_oom, double p_timeout, const ProposerSettings& s) {
    const double full = s.time_limit_s > 0 ? std::min(run_s, s.time_limit_s) : run_s;
    // A run into the limit costs the limit; without one there is no such run.
    const double finished = s.time_limit_s > 0 ? (1 - p_timeout) * full + p_timeout * s.time_limit_s : full;
    const double oom = s.trial_overhead_s + s.oom_cost_fraction * (full - s.trial_overhead_s);
    return (1 - p_oom) * finished + p_oom * oom;
}

double timeout_probability(double mean, double var, const ProposerSettings& s) {
    if (!(s.time_limit_s > 0) || !(s.trial_steps > 0)) return 0.0;
    const double room = s.time_limit_s - s.trial_overhead_s;
    if (room <= 0) return 1.0;
    const double bound = std::log(room / s.trial_steps); // log step time at which the steps fill the limit
    return 1 - normal_cdf((bound - mean) / std::sqrt(std::max(var, 1e-12)));
}

ScoredPool::ScoredPool(const GaussianProcess& runtime, const std::vector<Candidate>& candidates,
                       std::function<double(int)> p_oom, double target, const ProposerSettings& s,
                       std::function<double(int)> p_fail)
    : runtime_(runtime), candidates_(candidates), p_oom_(std::move(p_oom)), p_fail_(std::move(p_fail)),
      target_(target), s_(s) {}

std::optional<std::size_t> ScoredPool::position(int candidate) const {
    const auto it = pos_.find(candidate);
    if (it == pos_.end()) return std::nullopt;
    return it->second;
}

double ScoredPool::predicted_step_s(std::size_t i) const {
    return std::exp(post_.mean(i));
}

void ScoredPool::add(const std::vector<int>& idx) {
    if (idx.empty()) return;
    const int d =
        static_cast<int>(candidates_.front().features.size() + candidates_.front().prior_basis.size());
    Eigen::MatrixXd Xs(idx.size(), d);
    for (size_t i = 0; i < idx.size(); ++i)
        Xs.row(i) = runtime_features(candidates_[idx[i]]).transpose();
    GpPosterior p = runtime_.posterior(Xs);
    for (size_t i = 0; i < idx.size(); ++i) {
        pos_[idx[i]] = pool_.size();
        pool_.push_back(idx[i]);
        risk_.push_back(p_oom_(idx[i]));
        fail_.push_back(p_fail_ ? p_fail_(idx[i]) : 0.0);
        timeout_.push_back(
            timeout_probability(p.mean(i), std::max(p.variance(i), 0.0) + runtime_.noise_variance(), s_));
        double run = s_.trial_overhead_s + s_.trial_steps * std::exp(p.mean(i));
        run_cost_.push_back(run);
    }
    if (post_.mean.size() == 0) {
        post_ = std::move(p);
    } else {
        const auto old = post_.mean.size();
        post_.mean.conservativeResize(old + p.mean.size());
        post_.mean.tail(p.mean.size()) = p.mean;
        post_.variance.conservativeResize(old + p.variance.size());
        post_.variance.tail(p.variance.size()) = p.variance;
        post_.whitened.conservativeResize(Eigen::NoChange, old + p.whitened.cols());
        post_.whitened.rightCols(p.whitened.cols()) = p.whitened;
    }
    refresh_ei();
}

void ScoredPool::refresh_ei() {
    ei_.resize(pool_.size());
    for (size_t i = 0; i < pool_.size(); ++i)
        ei_[i] = expected_improvement(target_, post_.mean(i), std::sqrt(std::max(post_.variance(i), 0.0)));
}

void ScoredPool::believe(std::size_t b) {
    if (xpool_.rows() != static_cast<Eigen::Index>(pool_.size())) {
        xpool_.resize(pool_.size(),
                      candidates_.front().features.size() + candidates_.front().prior_basis.size());
        for (size_t i = 0; i < pool_.size(); ++i)
            xpool_.row(i) = runtime_features(candidates_[pool_[i]]).transpose();
    }
    Eigen::VectorXd c = runtime_.prior_covariance(xpool_, xpool_.row(b)).col(0) -
                        post_.whitened.transpose() * post_.whitened.col(b);
    for (const auto& f : fantasy_)
        c -= f * f(b);
    double vb = std::max(c(b), 0.0) + runtime_.noise_variance();
    Eigen::VectorXd f = c / std::sqrt(vb);
    post_.variance -= f.cwiseProduct(f);
    post_.variance = post_.variance.cwiseMax(0.0);
    fantasy_.push_back(std::move(f));
    refresh_ei();
}

std::string ScoredPool::describe(std::size_t i) const {
    std::string extra;
    if (fail_[i] > 0) extra += ", P(fail)=" + percent(fail_[i]);
    if (s_.time_limit_s > 0) extra += ", P(timeout)=" + percent(timeout_[i]);
    return fmt::format("EI={:.4f} above MDE, P(OOM)={}{}, predicted step {:.3g} s, expected cost {:.0f} s",
                       ei_[i], percent(risk_[i]), extra, predicted_step_s(i), expected_cost(i));
}

void ScoredPool::take(BatchDraft& batch, std::size_t i, std::string reason) {
    batch.take({pool_[i], std::move(reason), risk_[i], fail_[i], timeout_[i], ei_[i], predicted_step_s(i)});
    believe(i);
}

void add_memory_saver_pair(ScoredPool& pool, BatchDraft& batch, const std::vector<Candidate>& candidates,
                           const ProposerSettings& s, int q) {
    if (batch.size() >= q || pool.size() == 0) return;
    size_t best = 0;
    double best_v = -1;
    for (size_t i = 0; i < pool.size(); ++i) {
        double v = pool.ei(i) / pool.run_cost(i);
        if (batch.allowed(pool.candidate(i)) && v > best_v) best_v = v, best = i;
    }
    const int hungry = pool.candidate(best);
    if (pool.risk(best) < s.pair_oom_threshold || candidates[hungry].savers.empty()) return;
    // Savers up to two steps away (e.g. +flash_attention, then recompute=selective).
    std::vector<std::pair<int, std::string>> chain;
    for (const auto& a : candidates[hungry].savers) {
        chain.push_back({a.candidate, a.change});
        for (const auto& b : candidates[a.candidate].savers)
            chain.push_back({b.candidate, a.change + ", " + b.change});
    }
    std::vector<int> extra;
    for (const auto& [c, _] : chain)
        if (batch.allowed(c) && !pool.position(c) && std::find(extra.begin(), extra.end(), c) == extra.end())
            extra.push_back(c);
    pool.add(extra);
    const double hungry_risk = pool.risk(best);
    if (hungry_risk <= s.max_pair_oom)
        pool.take(batch, best, "best-looking, memory-hungry: " + pool.describe(best));
    // The saver that scores best, preferring one that likely fits.
    long pick = -1;
    std::string change;
    double pick_v = -1;
    for (const auto& [c, what] : chain) {
        if (!batch.allowed(c)) continue;
        const size_t i = *pool.position(c);
        const double v = pool.acquisition(i) * (pool.risk(i) < s.pair_oom_threshold ? 2.0 : 1.0);
        if (v > pick_v) pick_v = v, pick = static_cast<long>(i), change = what;
    }
    if (pick >= 0 && batch.size() < q)
        pool.take(batch, static_cast<size_t>(pick),
                  "paired with " + candidates[hungry].id + " because P(OOM)=" + percent(hungry_risk) +
                      " (saver: " + change + "); " + pool.describe(static_cast<size_t>(pick)));
}

int add_by_acquisition(ScoredPool& pool, BatchDraft& batch, int q) {
    const auto& s = pool.settings();
    // A candidate more likely to fail than not, or with no gain left, is never worth its trial here.
    auto worth = [&](size_t i) {
        return batch.allowed(pool.candidate(i)) && pool.failure_probability(i) <= s.max_failure_probability &&
               pool.ei(i) >= s.min_expected_improvement;
    };
    int worthwhile = 0;
    for (size_t i = 0; i < pool.size(); ++i)
        worthwhile += worth(i);
    while (batch.size() < q) {
        long best = -1;
        double best_v = -1;
        for (size_t i = 0; i < pool.size(); ++i) {
            if (!worth(i)) continue; // the believer shrinks EIs: re-checked after every pick
            double v = pool.acquisition(i);
            if (v > best_v) best_v = v, best = static_cast<long>(i);
        }
        if (best < 0) break;
        pool.take(batch, static_cast<size_t>(best), pool.describe(static_cast<size_t>(best)));
    }
    return worthwhile;
}

void add_remeasurements(BatchDraft& batch, const std::vector<TrialObservation>& trials,
                        const std::function<double(int)>& mean_of, double incumbent_mean,
                        const ProposerSettings& s, int q) {
    std::unordered_map<int, int> measured, other; // successful measurements; any other outcome that ran
    std::unordered_map<int, double> step;
    for (const auto& t : trials) {
        if (t.outcome == ObservationKind::ok)
            ++measured[t.candidate], step[t.candidate] = t.step_time_s;
        else if (t.outcome != ObservationKind::failed)
            ++other[t.candidate];
    }
    std::vector<std::pair<double, int>> once;
    for (const auto& [c, k] : measured)
        if (k == 1 && !other.count(c)) once.push_back({mean_of(c), c});
    std::sort(once.begin(), once.end());
    for (const auto& entry : once) {
        const double mean = entry.first;
        const int c = entry.second; // not a structured binding: a lambda below captures it (clang < 16)
        if (batch.size() >= q || mean > incumbent_mean + std::log1p(s.min_detectable_effect)) break;
        const auto& chosen = batch.proposals();
        if (std::any_of(chosen.begin(), chosen.end(), [&](const Proposal& p) { return p.candidate == c; }))
            continue;
        batch.take(
            {c,
             fmt::format("re-measure: measured once ({:.3g} s/step), the runtime model puts it at {:.3g} "
                         "s/step, within the MDE ({}) of the best; no untried candidate has expected "
                         "gain at P(failure) <= {}",
                         step[c], std::exp(mean), percent(s.min_detectable_effect),
                         percent(s.max_failure_probability)),
             0, 0, 0, 0, std::exp(mean)});
    }
}

std::vector<Proposal> BatchProposer::propose(const std::vector<Candidate>& candidates,
                                             const std::vector<TrialObservation>& trials, int q,
                                             const ProposerSettings& s) {
    validate(candidates, trials, q, s);
    const int d = static_cast<int>(candidates.front().features.size());
    const int n = static_cast<int>(candidates.size());
    std::mt19937_64 rng(s.seed * 0x9E3779B97F4A7C15ULL + trials.size());
    notes_.clear();
    stop_reason_.clear();

    // Hidden constraints: what failed for a reason of its own is avoided where the model is sure.
    FeasibilitySettings fs = s.feasibility;
    fs.seed = s.seed + trials.size();
    fit_feasibility(feasibility_, candidates, trials, fs);
    std::vector<double> fail(n, 0.0);
    auto excluded = excluded_candidates(candidates, trials);
    if (feasibility_.active()) {
        int avoided = 0;
        std::vector<int> examples;
        for (int c = 0; c < n; ++c) {
            if (excluded[c]) continue;
            fail[c] = feasibility_.probability(candidates[c].features);
            if (fail[c] >= s.max_failure_probability) {
                excluded[c] = 1;
                if (++avoided <= 3) examples.push_back(c);
            }
        }
        if (avoided > 0) {
            std::string ex, from;
            for (int c : examples)
                ex += (ex.empty() ? "" : "; ") + candidates[c].id;
            int failures = 0;
            for (const auto& t : trials)
                if (t.outcome == ObservationKind::infeasible && ++failures <= 5)
                    from += (from.empty() ? "" : "; ") + candidates[t.candidate].id;
            notes_.push_back(fmt::format(
                "feasibility model: {} of {} untried candidates avoided, P(fail) >= {} (e.g. "
                "{}), learned from "
                "{} failed trial{} of their own (crash or contract violation: {}{}) against {} "
                "that did not fail",
                avoided, n, percent(s.max_failure_probability), ex, failures, failures == 1 ? "" : "s", from,
                failures > 5 ? "; ..." : "",
                std::count_if(trials.begin(), trials.end(), [](const TrialObservation& t) {
                    return t.outcome != ObservationKind::failed && t.outcome != ObservationKind::infeasible;
                })));
        }
    }
    // What failed every time it ran is not tried again, however unsure the model still is.
    {
        std::vector<Eigen::VectorXd> xs;
        std::vector<bool> ran;
        for (const auto& t : trials) {
            if (t.outcome == ObservationKind::failed)
                continue; // nothing to learn (the infrastructure's, or queued)
            xs.push_back(candidates[t.candidate].features);
            ran.push_back(t.outcome != ObservationKind::infeasible);
        }
        const FailureRule rule = consistent_failures(xs, ran);
        int avoided = 0;
        std::string ex;
        for (int c = 0; c < n; ++c) {
            if (excluded[c] || !rule.avoids(candidates[c].features)) continue;
            excluded[c] = 1;
            fail[c] = 1.0;
            if (++avoided <= 3) ex += (ex.empty() ? "" : "; ") + candidates[c].id;
        }
        if (avoided > 0)
            notes_.push_back(fmt::format(
                "failed every time: {} untried candidate{} avoided (e.g. {}): they share {} value{} and {} "
                "pair{} of values that failed at least twice for a reason of their own and never ran",
                avoided, avoided == 1 ? "" : "s", ex, rule.values.size(), rule.values.size() == 1 ? "" : "s",
                rule.pairs.size(), rule.pairs.size() == 1 ? "" : "s"));
    }
    // What one OOM or one timeout says about the candidates that share its cause: not tried again.
    const FailureEdges edges = failure_edges(candidates, trials, s.edges);
    for (int c = 0; c < n; ++c)
        if (edges.oom[c] > s.max_failure_probability || edges.timeout[c] > s.max_failure_probability)
            excluded[c] = 1;
    notes_.insert(notes_.end(), edges.notes.begin(), edges.notes.end());
    BatchDraft batch(std::move(excluded));
    memory_.fit(memory_points(candidates, trials, s.memory_limit_bytes), d, s.memory);
    const std::function<double(int)> p_oom = [&](int c) {
        return std::max(edges.oom[c],
                        memory_.probability_over(candidates[c].features, candidates[c].prior_peak_bytes,
                                                 s.memory_limit_bytes));
    };
    const std::function<double(int)> p_fail = [&](int c) { return fail[c]; };
    add_hints(batch, s.hints, p_oom, q);

    const RuntimePoints points = runtime_points(candidates, trials);
    runtime_fitted_ = points.distinct_measured >= s.min_model_points;
    if (!runtime_fitted_) {
        // The baseline's one-knob neighbours first (each is one change a person would try by hand), then
        // space-filling; the risk is that of an OOM or of a failure of its own.
        std::vector<int> design = s.initial_design;
        if (s.runtime_prior.size() > 0) {
            // Before the model is fitted a claim is all that is known of a change: the most claimed gain
            // first (the claimed log effect, most negative first), the unclaimed and the vaguely claimed
            // (orders_initial_design) in their order.
            Eigen::VectorXd ordering = s.runtime_prior.mean;
            for (Eigen::Index j = 0; j < ordering.size(); ++j)
                if (!orders_initial_design(s.runtime_prior.variance(j))) ordering(j) = 0;
            auto claimed = [&](int c) {
                return c >= 0 && c < n ? candidates[c].prior_basis.dot(ordering) : 0.0;
            };
            std::stable_sort(design.begin(), design.end(),
                             [&](int a, int b) { return claimed(a) < claimed(b); });
        }
        for (int c : design)
            if (batch.size() < q && c >= 0 && c < n && batch.allowed(c))
                batch.take(
                    {c,
                     "initial design: one knob away from the baseline; P(OOM)=" + percent(p_oom(c)) +
                         (fail[c] > 0 ? ", P(fail)=" + percent(fail[c]) : "") +
                         (candidates[c].prior_basis.size() > 0 &&
                                  candidates[c].prior_basis.dot(s.runtime_prior.mean) != 0
                              ? fmt::format(", claimed speed-up {:.2f}x (discounted)",
                                            std::exp(-candidates[c].prior_basis.dot(s.runtime_prior.mean)))
                              : ""),
                     p_oom(c), fail[c], 0, 0, 0});
        const std::function<double(int)> risk = [&](int c) { return 1 - (1 - p_oom(c)) * (1 - fail[c]); };
        add_space_filling(batch, candidates, trials, risk, q, s.initial_max_oom, rng);
        if (batch.size() == 0)
            stop_reason_ = "every untried candidate is excluded (tried, OOM, failure edge)";
        return batch.proposals();
    }

    // Runtime model on log step time, noise floored at the calibrated measurement variance; timeouts
    // censored.
    GpSettings gs = s.gp;
    gs.noise_variance_floor = std::max(s.noise_variance, 1e-8);
    gs.seed = s.seed + trials.size();
    gs.basis = s.runtime_prior;
    if (warm_) gs.warm_start = warm_;
    fit_censored_runtime(runtime_, points, gs);
    warm_ = runtime_.hyperparameters();
    std::vector<int> ok_trials;
    for (size_t i = 0; i < trials.size(); ++i)
        if (trials[i].outcome == ObservationKind::ok) ok_trials.push_back(static_cast<int>(i));
    if (ok_trials.empty()) // measured only in part (stopped early, violations): the best of those
        for (size_t i = 0; i < trials.size(); ++i)
            if (trials[i].step_time_s > 0 && !trials[i].step_time_censored)
                ok_trials.push_back(static_cast<int>(i));

    // Incumbent: the best posterior mean among tried candidates, robust to one lucky measurement; the target
    // is an improvement by at least the MDE.
    std::vector<int> tried_ok;
    {
        std::unordered_set<int> seen;
        for (int i : ok_trials)
            if (seen.insert(trials[i].candidate).second) tried_ok.push_back(trials[i].candidate);
    }
    const int dr = d + static_cast<int>(s.runtime_prior.size()); // the runtime model's columns
    Eigen::MatrixXd Xo(tried_ok.size(), dr);
    for (size_t i = 0; i < tried_ok.size(); ++i)
        Xo.row(i) = runtime_features(candidates[tried_ok[i]]).transpose();
    const Eigen::VectorXd mean_tried = runtime_.mean(Xo);
    const double target = mean_tried.minCoeff() - std::log1p(s.min_detectable_effect);
    std::vector<int> order(tried_ok.size());
    std::iota(order.begin(), order.end(), 0);
    const int top = std::min<int>(5, static_cast<int>(order.size()));
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [&](int a, int b) { return mean_tried(a) < mean_tried(b); });
    std::vector<int> best_tried;
    for (int k = 0; k < top; ++k)
        best_tried.push_back(tried_ok[order[k]]);

    auto pool = candidate_pool(candidates, best_tried, batch, s, rng);
    ScoredPool scored(runtime_, candidates, p_oom, target, s, p_fail);
    int worthwhile = 0;
    if (!pool.empty()) {
        scored.add(prescreen_pool(std::move(pool), candidates, runtime_, target, p_oom, s));
        add_memory_saver_pair(scored, batch, candidates, s, q);
        worthwhile = add_by_acquisition(scored, batch, q);
    }
    if (batch.size() < q) {
        // No untried candidate has gain left under the cap: measure again what could be the best, or stop.
        const int before = batch.size();
        Eigen::MatrixXd x(1, dr);
        const std::function<double(int)> mean_of = [&](int c) {
            x.row(0) = runtime_features(candidates[c]).transpose();
            return runtime_.mean(x)(0);
        };
        add_remeasurements(batch, trials, mean_of, mean_tried.minCoeff(), s, q);
        const std::string why = fmt::format(
            "{} untried candidate{} with expected gain >= {} above the MDE ({}) at P(failure) <= {}",
            worthwhile == 0 ? std::string("no") : std::to_string(worthwhile), worthwhile == 1 ? "" : "s",
            s.min_expected_improvement, percent(s.min_detectable_effect), percent(s.max_failure_probability));
        if (batch.size() > before)
            notes_.push_back(fmt::format("{}: {} candidate{} measured once re-measured", why,
                                         batch.size() - before, batch.size() - before == 1 ? "" : "s"));
        if (batch.size() == 0)
            stop_reason_ = why + ", and no candidate measured once within the MDE of the best is left to "
                                 "re-measure";
    }
    return batch.proposals();
}

} // namespace infrarsi::model
