#include "verify/verify.hpp"

#include "util/enum_names.hpp"
#include "verify/robust.hpp"

#include <Eigen/Dense>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

namespace infrarsi::verify {

EvalReference eval_reference(const std::vector<double>& losses) {
    EvalReference r;
    r.runs = static_cast<int>(losses.size());
    if (losses.empty()) return r;
    r.mean = measure::mean(losses);
    r.sd = losses.size() >= 2 ? measure::stddev(losses) : 0.0;
    return r;
}

double eval_tolerance(const EvalReference& ref, const contract::Invariants& inv, bool pair) {
    const double floor = inv.loss_tolerance * std::fabs(ref.mean);
    if (ref.runs < 2) return floor;
    const double spread = pair ? std::sqrt(2.0) : std::sqrt(1.0 + 1.0 / ref.runs);
    return std::max(floor, measure::t_quantile(ref.runs - 1, 0.95) * ref.sd * spread);
}

std::string check_eval_loss(const EvalReference& ref, std::optional<double> got,
                            const contract::Invariants& inv, std::optional<double> against) {
    if (!got) return "no evaluation loss in the job's output";
    if (!std::isfinite(*got)) return "the final evaluation loss is not finite";
    if (ref.runs < 1) return "no baseline evaluation loss to compare with";
    const double target = against.value_or(ref.mean);
    const double tol = eval_tolerance(ref, inv, against.has_value());
    if (std::fabs(*got - target) > tol) {
        // With no spread between the baseline runs the tolerance is the contract's floor: say that rather
        // than "calibrated", which it was not (the seeds changed nothing, or the seed never reached the job).
        const bool floor = ref.runs < 2 || ref.sd == 0.0;
        return fmt::format(
            "final evaluation loss {:.6g}, {} {:.6g} (tolerance {:.3g}, {})", *got,
            against ? "the paired baseline's" : "baseline", target, tol,
            floor ? fmt::format("the floor loss_tolerance x |mean|: the {} baseline runs "
                                "showed no spread between seeds",
                                ref.runs)
                  : fmt::format("calibrated from {} baseline runs at different seeds", ref.runs));
    }
    return {};
}

namespace {
constexpr util::EnumNames<PairOrder, 2> pair_order_names{{{{PairOrder::AB, "AB"}, {PairOrder::BA, "BA"}}}};
} // namespace

const char* to_string(PairOrder o) {
    return pair_order_names.name(o).data(); // a literal of the table: NUL-terminated
}

PairOrder pair_order(const Arm& baseline, const Arm& candidate) {
    return candidate.first && !baseline.first ? PairOrder::BA : PairOrder::AB;
}

std::vector<PairOrder> counterbalanced_orders(int pairs, std::uint64_t seed) {
    std::vector<PairOrder> o;
    for (int i = 0; i < pairs; ++i)
        o.push_back(i % 2 == 0 ? PairOrder::AB : PairOrder::BA);
    std::mt19937_64 rng(seed);
    std::shuffle(o.begin(), o.end(), rng);
    return o;
}

std::vector<std::vector<std::string>> spread_pairs(int pairs, const std::vector<std::string>& nodes,
                                                   int per_pair) {
    per_pair = std::max(1, per_pair);
    const int groups = static_cast<int>(nodes.size()) / per_pair;
    if (groups < 1) return {};
    std::vector<std::vector<std::string>> out;
    for (int i = 0; i < pairs; ++i) {
        const int g = (i / kPairsPerBlock) % groups;
        out.emplace_back(nodes.begin() + g * per_pair, nodes.begin() + (g + 1) * per_pair);
    }
    return out;
}

std::vector<double> reference_losses(const std::vector<std::vector<double>>& runs) {
    std::vector<double> ref;
    if (runs.empty()) return ref;
    std::size_t n = runs[0].size();
    for (const auto& r : runs)
        n = std::min(n, r.size());
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<double> xs;
        for (const auto& r : runs)
            xs.push_back(r[i]);
        ref.push_back(measure::median(xs));
    }
    return ref;
}

std::string check_loss(const std::vector<double>& ref, const std::vector<double>& got,
                       const contract::Invariants& inv) {
    if (static_cast<int>(got.size()) < inv.steps)
        return fmt::format("{} of {} step lines", got.size(), inv.steps);
    if (static_cast<int>(ref.size()) < inv.steps) return "no complete baseline loss curve to compare with";
    auto rel = [](double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); };
    if (inv.loss_mode == contract::LossMode::PerStep) {
        for (int i = 0; i < inv.steps; ++i) {
            if (!std::isfinite(got[i])) return fmt::format("loss at step {} is not finite", i + 1);
            if (rel(got[i], ref[i]) > inv.loss_tolerance)
                return fmt::format("loss at step {} is {:.6g}, baseline {:.6g} (tolerance {:.3g} relative)",
                                   i + 1, got[i], ref[i], inv.loss_tolerance);
        }
        return {};
    }
    double a = 0, b = 0;
    for (int i = inv.steps - inv.loss_last_k; i < inv.steps; ++i) {
        if (!std::isfinite(got[i])) return fmt::format("loss at step {} is not finite", i + 1);
        a += got[i];
        b += ref[i];
    }
    a /= inv.loss_last_k;
    b /= inv.loss_last_k;
    if (rel(a, b) > inv.loss_tolerance)
        return fmt::format(
            "mean loss of the last {} steps is {:.6g}, baseline {:.6g} (tolerance {:.3g} relative)",
            inv.loss_last_k, a, b, inv.loss_tolerance);
    return {};
}

NoisePrior doctor_prior(const std::vector<double>& step_s, double fallback_cv) {
    NoisePrior p;
    std::vector<double> logs;
    for (double x : step_s)
        if (x > 0 && std::isfinite(x)) logs.push_back(std::log(x));
    p.cv_between = logs.size() >= 2 ? measure::stddev(logs) : fallback_cv;
    if (!(p.cv_between > 0)) p.cv_between = fallback_cv;
    p.cv_robust = robust_log_sd(step_s);
    p.dof = std::max(0, static_cast<int>(logs.size()) - 1);
    const auto modes = doctor_modes(step_s);
    p.mode_gap = modes.gap;
    p.cv_within = modes.within_sd;
    p.within_dof = modes.dof;
    p.cv_core = modes.core_sd;
    return p;
}

NoisePrior doctor_prior(const store::Baseline& b) {
    std::vector<double> step_s;
    for (const auto& r : b.runs)
        if (r.is_object() && r.value("step_s", nlohmann::json()).is_number() &&
            r.value("outcome", std::string()) == "ok")
            step_s.push_back(r["step_s"].get<double>());
    if (step_s.size() < 2) return {b.cv_between, std::max(0, b.completed - 1)};
    return doctor_prior(step_s, b.cv_between);
}

namespace {

// decide()'s interval over `log_ratios` (net of the order effect, screened, order-adjusted) at `level`;
// nullopt when fewer than 2 pairs are kept.
std::optional<measure::Interval> screened_interval(const std::vector<double>& log_ratios,
                                                   const std::vector<bool>& ab, const NoisePrior& prior,
                                                   double level) {
    std::vector<double> in_ab, in_ba;
    for (std::size_t k = 0; k < log_ratios.size(); ++k)
        (ab[k] ? in_ab : in_ba).push_back(log_ratios[k]);
    const double shift =
        !in_ab.empty() && !in_ba.empty() ? (measure::median(in_ab) - measure::median(in_ba)) / 2 : 0.0;
    std::vector<double> net;
    for (std::size_t k = 0; k < log_ratios.size(); ++k)
        net.push_back(log_ratios[k] - (ab[k] ? shift : -shift));
    const auto screen = screen_pairs(net, 3.5, ab);
    std::vector<double> kept;
    std::vector<bool> kept_ab;
    for (std::size_t k = 0; k < log_ratios.size(); ++k)
        if (screen.kept[k]) kept.push_back(log_ratios[k]), kept_ab.push_back(ab[k]);
    if (kept.size() < 2) return std::nullopt;
    return order_adjusted_interval(kept, kept_ab, prior, level);
}

} // namespace

namespace {

// The pairs' residual variance (`ss` over `resid_dof`) pooled with the doctor's (2 cv^2 a pair, its dof);
// the pairs' own without a prior. (Not pooling where the pairs' own is the larger was measured: A/A under a
// heavy-tailed load noise 2.7% -> 1.5-2.0%, power at 1.10x and 2% noise 0.97 -> 0.945; not kept.)
struct Pooled {
    double var = 0;
    int dof = 0;
};
Pooled pooled_variance(double ss, int resid_dof, const NoisePrior& prior) {
    const bool prior_ok = prior.dof > 0 && prior.cv_between > 0;
    const double own = resid_dof > 0 ? ss / resid_dof : 0.0;
    if (!prior_ok) return {own, resid_dof};
    const double prior_var = 2 * prior.cv_between * prior.cv_between;
    return {(ss + prior.dof * prior_var) / (resid_dof + prior.dof), resid_dof + prior.dof};
}

} // namespace

measure::Interval speedup_interval(const std::vector<double>& log_ratios, const NoisePrior& prior,
                                   double level) {
    const int n = static_cast<int>(log_ratios.size());
    if (prior.dof <= 0 || prior.cv_between <= 0) return measure::mean_ci(log_ratios, level);
    measure::Interval iv;
    iv.estimate = measure::mean(log_ratios);
    const double pair_var = n >= 2 ? std::pow(measure::stddev(log_ratios), 2) : 0.0;
    const auto pooled = pooled_variance(std::max(0, n - 1) * pair_var, std::max(0, n - 1), prior);
    const double half = measure::t_quantile(pooled.dof, level) * std::sqrt(pooled.var / std::max(1, n));
    iv.lo = iv.estimate - half;
    iv.hi = iv.estimate + half;
    return iv;
}

std::optional<measure::Interval> mode_adjusted_interval(const std::vector<double>& d,
                                                        const std::vector<bool>& ab,
                                                        const std::vector<double>& offsets,
                                                        const NoisePrior& prior, double level,
                                                        double* delta) {
    const int n = static_cast<int>(d.size());
    if (offsets.size() != d.size() || ab.size() != d.size() || n < 3) return std::nullopt;
    // Offsets of one mode each way at most (verify::pair_modes), and not all alike.
    for (double o : offsets)
        if (o != -1 && o != 0 && o != 1) return std::nullopt;
    if (std::all_of(offsets.begin(), offsets.end(), [&](double o) { return o == offsets[0]; }))
        return std::nullopt;
    const bool both_orders =
        std::count(ab.begin(), ab.end(), true) > 0 && std::count(ab.begin(), ab.end(), false) > 0;
    const int p = both_orders ? 3 : 2;
    Eigen::MatrixXd x(n, p);
    Eigen::VectorXd y(n);
    for (int i = 0; i < n; ++i) {
        x(i, 0) = 1;
        if (both_orders) x(i, 1) = ab[i] ? 1 : -1;
        x(i, p - 1) = offsets[i];
        y(i) = d[i];
    }
    const Eigen::MatrixXd xtx = x.transpose() * x;
    const Eigen::FullPivLU<Eigen::MatrixXd> lu(xtx);
    if (lu.rank() < p) return std::nullopt;
    const Eigen::VectorXd beta = lu.solve(x.transpose() * y);
    const auto pooled = pooled_variance((y - x * beta).squaredNorm(), n - p, prior);
    if (pooled.dof <= 0) return std::nullopt;
    const double se = std::sqrt(pooled.var * lu.inverse()(0, 0));
    if (delta) *delta = both_orders ? beta(1) : 0.0;
    measure::Interval iv;
    iv.estimate = beta(0);
    const double half = measure::t_quantile(pooled.dof, level) * se;
    iv.lo = iv.estimate - half;
    iv.hi = iv.estimate + half;
    return iv;
}

measure::Interval order_adjusted_interval(const std::vector<double>& d, const std::vector<bool>& ab,
                                          const NoisePrior& prior, double level, double* delta) {
    std::vector<double> g1, g2;
    for (std::size_t i = 0; i < d.size(); ++i)
        (ab[i] ? g1 : g2).push_back(d[i]);
    if (delta) *delta = 0;
    if (g1.empty() || g2.empty()) return speedup_interval(d, prior, level);
    const double m1 = measure::mean(g1), m2 = measure::mean(g2);
    if (delta) *delta = (m1 - m2) / 2;
    double ss = 0;
    for (double x : g1)
        ss += (x - m1) * (x - m1);
    for (double x : g2)
        ss += (x - m2) * (x - m2);
    const auto pooled = pooled_variance(ss, static_cast<int>(d.size()) - 2, prior);
    const int dof = pooled.dof;
    // One pair in each order and no noise prior: no degree of freedom is left once the order effect is
    // estimated. As many pairs in each order make the plain mean free of the order effect (it cancels), which
    // only widens the pairs' spread: the plain interval of the pairs is valid there, if wider.
    if (dof <= 0 && g1.size() == g2.size()) return speedup_interval(d, prior, level);
    measure::Interval iv;
    iv.estimate = (m1 + m2) / 2;
    if (dof <= 0) { // unbalanced, two pairs and no prior: no interval
        iv.lo = -INFINITY;
        iv.hi = INFINITY;
        return iv;
    }
    const double se = std::sqrt(pooled.var * (1.0 / g1.size() + 1.0 / g2.size()) / 4);
    const double half = measure::t_quantile(dof, level) * se;
    iv.lo = iv.estimate - half;
    iv.hi = iv.estimate + half;
    return iv;
}

MfuComparison compare_mfu(double model_flops_per_step, double peak_flops, const std::string& peak_source,
                          double baseline_step_s, double speedup) {
    MfuComparison m;
    m.peak_flops = peak_flops;
    m.model_flops_per_step = model_flops_per_step;
    m.peak_source = peak_source;
    m.baseline_step_s = baseline_step_s;
    m.candidate_step_s = speedup > 0 ? baseline_step_s / speedup : 0;
    m.baseline = measure::mfu(model_flops_per_step, m.baseline_step_s, m.peak_flops);
    m.candidate = measure::mfu(model_flops_per_step, m.candidate_step_s, m.peak_flops);
    const double fastest = std::min(m.baseline_step_s > 0 ? m.baseline_step_s : INFINITY,
                                    m.candidate_step_s > 0 ? m.candidate_step_s : INFINITY);
    if (!m.baseline_known() || !m.candidate_known())
        m.unknown = fmt::format("the faster run achieved {:.4g} model FLOP/s, above the peak {:.4g} FLOP/s: "
                                "an MFU above 1 is no MFU (its model FLOPs count work the code skips, or the "
                                "peak was measured low)",
                                model_flops_per_step / fastest, peak_flops);
    return m;
}

PeakFlops mfu_denominator(double contract_peak, const std::optional<PeakFlops>& calibration,
                          const std::optional<PeakFlops>& job_reported, double achieved_flops) {
    PeakFlops p;
    if (contract_peak > 0)
        p = {contract_peak, "declared in the contract ([resources] peak_flops)"};
    else if (calibration && calibration->flops > 0)
        p = *calibration;
    else if (job_reported && job_reported->flops > 0)
        p = *job_reported;
    if (p.flops > 0 && achieved_flops > p.flops)
        p = {achieved_flops,
             fmt::format("{:.4g} FLOP/s achieved by the baseline: the peak {:.4g} FLOP/s ({}) "
                         "is lower than achieved",
                         achieved_flops, p.flops, p.source)};
    return p;
}

Decision reproduce(Decision first, const Decision& recheck) {
    if (!first.promoted) return first;
    if (recheck.promoted) {
        first.evidence.push_back(
            fmt::format("reproduced in a fresh allocation: {:.3f}x [{:.3f}, {:.3f}] over "
                        "{} A/B pairs on {} node(s)",
                        recheck.speedup, recheck.lo, recheck.hi, recheck.pairs, recheck.nodes));
        return first;
    }
    first.promoted = false;
    for (const auto& why : recheck.reasons)
        first.reasons.push_back("did not reproduce in a fresh allocation: " + why);
    if (first.reasons.empty()) first.reasons.push_back("did not reproduce in a fresh allocation");
    return first;
}

Decision decide(const std::vector<std::pair<Arm, Arm>>& pairs, const std::vector<double>& reference_loss,
                const contract::Contract& c, const Rule& rule, bool math_changing, const NoisePrior& noise,
                const EvalReference& eval) {
    const bool final_eval = c.invariants.loss_mode == contract::LossMode::FinalEval;
    Decision d;
    std::vector<double> log_ratios;
    std::vector<bool> ab;
    std::vector<std::size_t> index; // the pair each log-ratio is of
    std::vector<std::string> node_of;
    double peak = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        const auto& [a, b] = pairs[i];
        if (!a.ok || !b.ok) {
            d.reasons.push_back(
                fmt::format("pair {}: {} run did not complete", i + 1, !b.ok ? "candidate" : "baseline"));
            d.settled = true;
            continue;
        }
        if (!a.node.empty() && !b.node.empty() && a.node != b.node) {
            d.reasons.push_back(
                fmt::format("pair {}: the baseline ran on {} and the candidate on {}: not one "
                            "node, not counted (a node's speed would be credited to the "
                            "candidate)",
                            i + 1, a.node, b.node));
            d.settled = true;
            continue;
        }
        const auto broken = final_eval            ? check_eval_loss(eval, b.eval_loss, c.invariants)
                            : b.at_reference_seed ? check_loss(reference_loss, b.losses, c.invariants)
                                                  : std::string();
        if (!broken.empty()) {
            d.reasons.push_back(fmt::format("pair {}: loss invariant broken: {}", i + 1, broken));
            d.settled = true;
        }
        const auto differs =
            final_eval ? (a.eval_loss ? check_eval_loss(eval, b.eval_loss, c.invariants, a.eval_loss)
                                      : std::string())
                       : check_loss(a.losses, b.losses, c.invariants);
        if (!differs.empty()) {
            d.reasons.push_back(
                fmt::format("pair {}: loss differs from the interleaved baseline: {}", i + 1, differs));
            d.settled = true;
        }
        if (b.peak_memory_bytes) peak = std::max(peak, *b.peak_memory_bytes);
        log_ratios.push_back(robust_pair_log_ratio(a.step_samples, a.step_s, b.step_samples, b.step_s));
        ab.push_back(pair_order(a, b) == PairOrder::AB);
        index.push_back(i);
        node_of.push_back(a.node);
    }
    if (math_changing) {
        d.reasons.push_back("a patch of this candidate is tagged math_changing: never promoted");
        d.settled = true;
    }
    // A bimodal host (the doctor's runs in two modes, mode_gap apart): each arm's runs are told fast or slow
    // by their own level, apart from the other arm's (a speed-up moves one arm as a whole, not its split),
    // and a pair whose runs are in different modes is brought back by the gap. An arm whose runs show one
    // mode could be in either: it is taken to be in the one that makes the speed-up smaller (the baseline
    // slow, the candidate fast), so that what the levels cannot tell is never credited to the candidate.
    bool modes_used = false;
    std::vector<double> high_ratios, mid_ratios;
    // The pairs' log-ratios as measured and their modes' offsets (the lower bound's assignment): the interval
    // fits the gap with the speed-up where the offsets differ between the kept pairs.
    std::vector<double> measured_ratios, mode_offsets;
    // A doctor whose runs all fell in one mode says nothing of a second: the pairs' own log-ratios do, when
    // they lie further apart than its noise allows (8 standard deviations of a pair).
    // (The doctor's robust spread where it has one: runs in two modes too close to tell apart inflate the
    // plain one.)
    const double doctor_sd =
        noise.cv_robust > 0 ? std::min(noise.cv_robust, noise.cv_between) : noise.cv_between;
    // The doctor's gap is used where a pair's noise at the doctor's spread is under a sixth of it (the
    // clusters told apart); a smaller one is a chance split of one mode's runs. The pairs' own gap is looked
    // for within each order (an order effect puts the two orders apart too, and it is no mode).
    // (A doctor in two modes inflates its median absolute deviation too: the spread of its densest half
    // where it is smaller.)
    const double run_sd = noise.cv_core > 0 ? std::min(doctor_sd, noise.cv_core) : doctor_sd;
    bool doctor_gap =
        noise.mode_gap > 0 && noise.mode_gap >= 6 * std::sqrt(2.0) * std::max(noise.cv_within, run_sd);
    // A doctor's split that its own runs cannot tell from a chance one (its other mode inflates their spread)
    // is used when the pairs show the same gap, to within a quarter of it: two independent measurements.
    if (!doctor_gap && noise.mode_gap > 0) {
        const double own = pairs_mode_gap(log_ratios, noise.mode_gap / 2, ab);
        doctor_gap = own > 0 && std::fabs(own - noise.mode_gap) <= noise.mode_gap / 4;
    }
    double gap = doctor_gap ? noise.mode_gap : 0.0;
    if (!doctor_gap) gap = pairs_mode_gap(log_ratios, 8 * std::sqrt(2.0) * doctor_sd, ab);
    if (gap > 0 && !log_ratios.empty()) {
        std::vector<double> la, lb;
        for (std::size_t k = 0; k < index.size(); ++k) {
            la.push_back(std::log(pairs[index[k]].first.step_s));
            lb.push_back(std::log(pairs[index[k]].second.step_s));
        }
        const auto pm = pair_modes(log_ratios, la, lb, node_of, gap);
        measured_ratios = log_ratios;
        mode_offsets = pm.low;
        const double g = pm.measured && pm.gap > 0 ? pm.gap : gap;
        high_ratios = mid_ratios = log_ratios;
        int mixed = 0;
        // The gap is known only as well as the doctor's runs tell it: a pair brought back by it is brought
        // back by the gap 3 standard errors the candidate's way less (for the lower bound), or more (for the
        // futility bound), so that a gap a little wider than measured is not credited to the candidate when
        // several pairs are in different modes the same way.
        const double margin = pm.measured && pm.gap > 0
                                  ? 3 * pm.gap_se
                                  : 3 * std::sqrt(2.0) * (doctor_gap ? noise.cv_within : doctor_sd);
        // (One gap for every pair: the worst error of it moves the mean by the margin x the pairs' net
        // shift.)
        const double net_low = std::accumulate(pm.low.begin(), pm.low.end(), 0.0),
                     net_high = std::accumulate(pm.high.begin(), pm.high.end(), 0.0);
        const double g_low = g + (net_low > 0 ? margin : -margin),
                     g_high = g - (net_high > 0 ? margin : -margin);
        for (std::size_t k = 0; k < log_ratios.size(); ++k) {
            log_ratios[k] -= g_low * pm.low[k];
            high_ratios[k] -= g_high * pm.high[k];
            mid_ratios[k] -= g * pm.mid[k];
            mixed += pm.low[k] != 0;
        }
        modes_used = true;
        d.evidence.push_back(fmt::format(
            "bimodal host: {} in two modes {:.1f}% apart; {} of {} pairs with their runs in "
            "different modes, brought back by the gap ({} pairs' runs told apart by their level on their "
            "node; what they cannot tell is taken the way that makes the speed-up smaller)",
            doctor_gap ? "the doctor's runs" : "the pairs", 100 * (std::exp(gap) - 1), mixed,
            log_ratios.size(), pm.votes));
    }
    const auto& limit = contract::modeled_memory_limit_text(c.resources);
    if (peak >= static_cast<double>(contract::modeled_memory_limit_bytes(c.resources))) {
        d.reasons.push_back(
            fmt::format("peak memory {:.0f} MiB is not under the limit {}", peak / (1 << 20), limit));
        d.settled = true;
    }
    d.evidence.push_back(fmt::format("peak memory {:.0f} MiB, limit {}", peak / (1 << 20), limit));
    // Pairs far from the others (a run in the other mode of a bimodal host) are set aside, in both
    // directions alike (verify/robust.hpp).
    // Judged net of the order effect (robustly: half the difference of the two orders' medians), so a large
    // one does not make the pairs of one order look like outliers.
    std::vector<double> in_ab, in_ba;
    for (std::size_t k = 0; k < log_ratios.size(); ++k)
        (ab[k] ? in_ab : in_ba).push_back(log_ratios[k]);
    const double order_shift =
        !in_ab.empty() && !in_ba.empty() ? (measure::median(in_ab) - measure::median(in_ba)) / 2 : 0.0;
    std::vector<double> net;
    for (std::size_t k = 0; k < log_ratios.size(); ++k)
        net.push_back(log_ratios[k] - (ab[k] ? order_shift : -order_shift));
    const auto screen = screen_pairs(net, 3.5, ab);
    // Enough pairs to set outliers aside: the doctor's robust spread; fewer: its plain one. A doctor whose
    // runs were bimodal (plain spread over twice the robust one) keeps the plain one: when most of the
    // pairs land in one of a bimodal host's off-modes, nothing tells them from a speed-up, and only the
    // wide interval keeps the false promotions at alpha.
    NoisePrior prior = noise;
    if (modes_used && doctor_gap && noise.within_dof > 0 && noise.cv_within > 0) {
        // The modes taken out of the pairs: the noise within a mode is what is left.
        prior.cv_between = noise.cv_within;
        prior.dof = noise.within_dof;
    } else if (static_cast<int>(log_ratios.size()) >= kMinPairsToScreen && noise.cv_robust > 0 &&
               2 * noise.cv_robust >= noise.cv_between)
        prior.cv_between = noise.cv_robust;
    std::vector<double> kept, kept_measured, kept_offsets;
    std::vector<bool> kept_ab;
    std::set<std::string> nodes;
    for (std::size_t k = 0; k < log_ratios.size(); ++k) {
        if (!screen.kept[k]) {
            ++d.set_aside;
            d.evidence.push_back(fmt::format(
                "pair {} set aside as an outlier: its speed-up {:.3f}x lies more than 3.5 standard "
                "deviations "
                "({:.2f}% a pair) from the centre of the pairs' shortest half {:.3f}x (a run in another mode "
                "of the host)",
                index[k] + 1, std::exp(net[k]), 100 * screen.scale, std::exp(screen.center)));
            continue;
        }
        kept.push_back(log_ratios[k]);
        kept_ab.push_back(ab[k]);
        if (modes_used) kept_measured.push_back(measured_ratios[k]), kept_offsets.push_back(mode_offsets[k]);
        if (!node_of[k].empty()) nodes.insert(node_of[k]);
    }
    d.pairs = static_cast<int>(kept.size());
    d.nodes = static_cast<int>(nodes.size());
    const auto n_ab = std::count(kept_ab.begin(), kept_ab.end(), true);
    const bool both_orders = n_ab > 0 && n_ab < static_cast<long>(kept_ab.size());
    const double threshold = 1.0 + rule.min_speedup;
    if (kept.size() < 2) {
        d.reasons.push_back(
            fmt::format("only {} complete A/B pairs; at least 2 are needed for an interval", kept.size()));
        if (kept.size() == 1)
            d.speedup = d.lo = d.hi = d.upper = std::exp(kept[0]);
        else
            d.upper = INFINITY;
    } else {
        // A bimodal host with pairs in more than one mode pattern: the gap fitted with the speed-up (its
        // uncertainty in the interval, not a worst-case margin on every pair); else the pairs brought back.
        const auto fitted = modes_used ? mode_adjusted_interval(kept_measured, kept_ab, kept_offsets, prior,
                                                                1 - 2 * rule.alpha, &d.order_effect)
                                       : std::nullopt;
        auto ci = fitted ? *fitted
                         : order_adjusted_interval(kept, kept_ab, prior, 1 - 2 * rule.alpha, &d.order_effect);
        const auto loose = order_adjusted_interval(kept, kept_ab, prior, 1 - 2 * rule.futility_alpha);
        d.speedup = std::exp(ci.estimate);
        d.lo = std::exp(ci.lo);
        d.hi = std::exp(ci.hi);
        // The futility bound is the larger of the order-adjusted one and the plain mean's: with one pair in
        // each order the order effect takes the pairs' only degree of freedom, and the interval is then the
        // doctor's noise alone, however far apart the two pairs lie (a run in a bimodal host's other mode).
        d.upper = std::max(std::exp(loose.hi),
                           std::exp(speedup_interval(kept, prior, 1 - 2 * rule.futility_alpha).hi));
        if (modes_used) {
            const auto high = screened_interval(high_ratios, ab, prior, 1 - 2 * rule.futility_alpha);
            d.upper = std::max(d.upper, high ? std::exp(high->hi) : INFINITY);
            if (const auto mid = screened_interval(mid_ratios, ab, prior, 0.5))
                d.speedup = std::exp(mid->estimate);
        }
        d.futile = d.upper < threshold;
        d.evidence.push_back(fmt::format(
            "speed-up {:.3f}x, one-sided {:.3g}% lower bound {:.3f}x (upper {:.3f}x) over {} A/B pairs ({} "
            "baseline first, {} candidate first; each pair on one node, {} node(s)){}",
            d.speedup, 100 * (1 - rule.alpha), d.lo, d.hi, kept.size(), n_ab, kept.size() - n_ab, d.nodes,
            prior.dof > 0 ? fmt::format(" (variance pooled with the doctor's noise: CV {:.2f}%{}, {} dof)",
                                        100 * prior.cv_between,
                                        prior.cv_between != noise.cv_between ? " robust" : "", prior.dof)
                          : ""));
        if (both_orders)
            d.evidence.push_back(fmt::format("order effect: a pair's second run {:.2f}% {} than its first "
                                             "(estimated, not credited to the candidate)",
                                             100 * std::fabs(std::exp(d.order_effect) - 1),
                                             d.order_effect >= 0 ? "faster" : "slower"));
        else
            d.reasons.push_back(fmt::format("every pair ran the {} first: not counterbalanced, so an order "
                                            "effect cannot be told from the speed-up",
                                            n_ab > 0 ? "baseline" : "candidate"));
        if (!(d.lo > threshold))
            d.reasons.push_back(fmt::format(
                "lower bound of the speed-up {:.3f}x (one-sided, error {:.2g}) does not exceed 1 + "
                "min_speedup = {:.3f}",
                d.lo, rule.alpha, threshold));
    }
    d.promoted = d.reasons.empty();
    return d;
}

} // namespace infrarsi::verify
