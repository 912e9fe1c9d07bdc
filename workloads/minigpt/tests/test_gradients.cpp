// Finite-difference checks of the hand-written backward passes, one group of parameter tensors per layer
// kind. For each tensor w and a random direction v, the central difference (J(w + eps v) - J(w - eps v)) / (2
// eps) must match <dJ/dw, v> from backward. Gradients w.r.t. every layer's inputs are covered too, because
// the parameters of earlier layers are only reached through them.
#include "model.hpp"

#include <doctest/doctest.h>
#include <random>

using namespace minigpt;

namespace {

ModelConfig tiny(bool moe, NormKind norm) {
    ModelConfig m;
    m.moe = moe;
    m.vocab = 37;
    m.d_model = 16;
    m.n_layers = 2;
    m.n_heads = 2;
    m.seq_len = 8;
    m.d_ff = 24;
    m.norm = norm;
    m.experts = 4;
    m.top_k = 2;
    m.expert_ff = 12;
    m.capacity_factor = 4.0f; // no token is dropped, so the objective is smooth in every direction
    m.aux_coef = 0.05f;
    return m;
}

struct Harness {
    ModelConfig m;
    ParamStore ps;
    Model model;
    Batch batch;
    float aux_weight;
    Harness(const ModelConfig& cfg, Recompute rc)
        : m(cfg), model(ps, cfg, rc, 1, Group{}), aux_weight(cfg.aux_coef) {
        ps.finalize(42, 0.3f);
        const SyntheticCorpus corpus(7, cfg.vocab);
        batch = make_batch(corpus, 0, 2, 1, 0, 0, 2, cfg.seq_len);
    }
    double objective() {
        const auto r = model.step(batch, 1.0f, aux_weight, nullptr, false);
        return r.loss_sum + aux_weight * r.aux;
    }
    void gradient() {
        ps.zero_grad();
        model.step(batch, 1.0f, aux_weight, nullptr, true);
    }
};

// Checks every parameter tensor whose name contains `part`; returns how many were checked.
// The error is relative to sum_i |g_i v_i|, the size the directional derivative would have without
// cancellation, so that a direction with a small derivative does not turn rounding into a failure.
int check(Harness& h, const std::string& part, double eps = 3e-3, double tol = 1e-2) {
    h.gradient();
    std::mt19937 rng(3);
    std::uniform_int_distribution<int> coin(0, 1);
    int checked = 0;
    for (std::size_t i = 0; i < h.ps.info.size(); ++i) {
        const auto& p = h.ps.info[i];
        if (p.name.find(part) == std::string::npos) continue;
        std::vector<float> v(p.size());
        for (auto& x : v)
            x = coin(rng) ? 1.0f : -1.0f;
        double analytic = 0, magnitude = 0;
        for (std::size_t k = 0; k < v.size(); ++k) {
            analytic += double(h.ps.grad[p.offset + k]) * v[k];
            magnitude += std::abs(double(h.ps.grad[p.offset + k]));
        }
        auto shift = [&](double s) {
            for (std::size_t k = 0; k < v.size(); ++k)
                h.ps.data[p.offset + k] += static_cast<float>(s * v[k]);
        };
        shift(eps);
        const double up = h.objective();
        shift(-2 * eps);
        const double down = h.objective();
        shift(eps);
        const double numeric = (up - down) / (2 * eps);
        const double err = std::abs(numeric - analytic) / std::max(magnitude, 1e-3);
        INFO(p.name << ": analytic " << analytic << " numeric " << numeric << " rel.err " << err);
        CHECK(err < tol);
        ++checked;
    }
    return checked;
}

} // namespace

TEST_CASE("attention gradients match finite differences") {
    Harness h(tiny(false, NormKind::Rms), Recompute::None);
    CHECK(check(h, ".attn.") == 8);
}

TEST_CASE("MLP gradients match finite differences") {
    Harness h(tiny(false, NormKind::Rms), Recompute::None);
    CHECK(check(h, ".mlp.") == 8);
}

TEST_CASE("RMSNorm and LayerNorm gradients match finite differences") {
    Harness rms(tiny(false, NormKind::Rms), Recompute::None);
    CHECK(check(rms, "norm") == 5);
    Harness ln(tiny(false, NormKind::Layer), Recompute::None);
    CHECK(check(ln, "norm") == 10);
}

TEST_CASE("embedding and LM-head/cross-entropy gradients match finite differences") {
    Harness h(tiny(false, NormKind::Rms), Recompute::None);
    CHECK(check(h, "emb") == 2);
    CHECK(check(h, "lm_head") == 1);
}

TEST_CASE("MoE router, experts and load-balancing loss gradients match finite differences") {
    Harness h(tiny(true, NormKind::Rms), Recompute::None);
    CHECK(check(h, ".router", 2e-3) == 2);
    CHECK(check(h, ".expert", 2e-3) == 2 * 4 * 4);
}

TEST_CASE("selective and full recompute give the same gradients as no recompute") {
    for (bool moe : {false, true}) {
        Harness base(tiny(moe, NormKind::Rms), Recompute::None);
        base.gradient();
        for (Recompute rc : {Recompute::Selective, Recompute::Full}) {
            Harness h(tiny(moe, NormKind::Rms), rc);
            h.gradient();
            double diff = 0, norm = 0;
            for (std::size_t k = 0; k < h.ps.grad.size(); ++k) {
                diff = std::max(diff, double(std::abs(h.ps.grad[k] - base.ps.grad[k])));
                norm = std::max(norm, double(std::abs(base.ps.grad[k])));
            }
            INFO("moe " << moe << " recompute " << to_string(rc));
            CHECK(diff <= 1e-5 * norm);
        }
    }
}
