// Training-level behaviour: determinism, learning, the batch contract, and the memory model against the
// activation caches that the model really holds.
#include "error.hpp"
#include "memory.hpp"
#include "model.hpp"
#include "trainer.hpp"

#include <doctest/doctest.h>
#include <sstream>

using namespace minigpt;

namespace {
Config small(bool moe) {
    Config c;
    c.model.moe = moe;
    c.model.vocab = 128;
    c.model.d_model = 32;
    c.model.n_layers = 2;
    c.model.n_heads = 4;
    c.model.seq_len = 64;
    c.steps = 12;
    c.micro_batch = 2;
    c.grad_accum = 2;
    c.peak_gflops = 10; // no probe in unit tests
    c.lr = 1e-2f;
    return c;
}
} // namespace

TEST_CASE("the same seed gives an identical loss curve") {
    for (bool moe : {false, true}) {
        std::ostringstream a, b;
        const auto ra = train(small(moe), a);
        const auto rb = train(small(moe), b);
        CHECK(ra.losses == rb.losses);
        Config other = small(moe);
        other.seed = 99;
        std::ostringstream c;
        CHECK(train(other, c).losses != ra.losses);
    }
}

TEST_CASE("loss decreases on the synthetic corpus, dense and MoE") {
    for (bool moe : {false, true}) {
        std::ostringstream out;
        const auto r = train(small(moe), out);
        INFO("moe " << moe << " first " << r.losses.front() << " last " << r.losses.back());
        CHECK(r.losses.back() < r.losses.front() - 0.3);
    }
}

TEST_CASE("every step prints one INFRARSI_STEP line and the run ends with INFRARSI_SUMMARY") {
    std::ostringstream out;
    train(small(false), out);
    std::istringstream in(out.str());
    std::string line;
    int steps = 0, summaries = 0;
    while (std::getline(in, line)) {
        if (line.rfind("INFRARSI_STEP ", 0) == 0) {
            const auto j = nlohmann::json::parse(line.substr(14));
            CHECK(j.at("step").get<int>() == steps);
            for (const char* k : {"forward_s", "backward_s", "comm_s", "optimizer_s", "data_s"})
                CHECK(j.at("phases").contains(k));
            for (const char* k :
                 {"loss", "step_time_s", "tokens", "tokens_per_s", "model_flops", "mfu", "peak_rss_bytes"})
                CHECK(j.contains(k));
            ++steps;
        } else if (line.rfind("INFRARSI_SUMMARY ", 0) == 0) {
            const auto j = nlohmann::json::parse(line.substr(17));
            CHECK(j.at("peak_flops_source") == "declared");
            CHECK(j.at("activation_bytes").get<long long>() > 0);
            ++summaries;
        }
    }
    CHECK(steps == 12);
    CHECK(summaries == 1);
}

TEST_CASE("a micro-batch that does not keep the global batch is refused") {
    Config c = small(false);
    c.global_batch = 8;
    CHECK_NOTHROW(c.validate(2)); // 2 x 2 x 2
    CHECK_THROWS_AS(c.validate(1), Error);
    c.model.moe = true;
    c.ep_size = 3;
    CHECK_THROWS_AS(c.validate(2), Error);
}

TEST_CASE("the memory model predicts the activation caches held after forward") {
    for (bool moe : {false, true})
        for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
            Config c = small(moe);
            c.model.seq_len = 128;
            c.recompute = rc;
            ParamStore ps;
            Model model(ps, c.model, rc, 1, Group{});
            ps.finalize(1, 0.02f);
            const SyntheticCorpus corpus(1, c.model.vocab);
            const Batch b = make_batch(corpus, 0, 2, 1, 0, 0, 2, c.model.seq_len);
            const auto r = model.step(b, 1.0f, 0.0f, nullptr, false);
            const auto est = estimate_memory(c, 1);
            const double predicted = est.breakdown.at("activations_stored").get<double>();
            INFO("moe " << moe << " recompute " << to_string(rc) << " measured " << r.activation_bytes
                        << " predicted " << predicted);
            CHECK(std::abs(predicted - double(r.activation_bytes)) < 0.05 * double(r.activation_bytes));
        }
}
