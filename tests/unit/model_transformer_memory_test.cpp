// The transformer memory prior (model/transformer_memory.hpp): the published formulas, by hand, and how the
// settings move it.
#include "model/transformer_memory.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

using namespace infrarsi::model;

namespace {
TransformerShape gpt_small() {
    TransformerShape s;
    s.layers = 4;
    s.hidden = 128;
    s.heads = 4;
    s.seq_len = 128;
    s.vocab = 65;
    return s;
}
} // namespace

TEST_CASE("model states and activations as Korthikanti et al. 2022 count them, by hand") {
    const auto sh = gpt_small();
    TransformerSettings st;
    st.micro_batch = 8;
    const auto m = transformer_memory(sh, st);
    const double P = 12.0 * 4 * 128 * 128 + 65.0 * 128; // 12 L h^2 + V h
    CHECK(m.parameters == doctest::Approx(P));
    CHECK(m.states == doctest::Approx(P * (2 + 2 + 12))); // bf16 weights and grads, Adam's fp32 states
    const double sbh = 128.0 * 8 * 128;
    const double layer = sbh * (34 + 5.0 * 4 * 128 / 128); // s b h (34 + 5 a s / h)
    CHECK(m.activations == doctest::Approx(4 * layer + 7 * sbh + 8.0 * 128 * 8 * 65));
    CHECK(m.per_rank == doctest::Approx(m.states + m.activations));
    CHECK(m.per_node == doctest::Approx(m.per_rank));
}

TEST_CASE("the settings move memory the way they should") {
    auto sh = gpt_small();
    sh.runtime_bytes = 200e6;
    TransformerSettings st;
    st.micro_batch = 4;
    const double base = transformer_memory(sh, st).per_node;
    st.micro_batch = 8;
    CHECK(transformer_memory(sh, st).per_node > base); // more micro-batch, more memory
    st.recompute = Recompute::Selective;
    const double selective = transformer_memory(sh, st).per_node;
    st.recompute = Recompute::Full;
    const double full = transformer_memory(sh, st).per_node;
    st.recompute = Recompute::None;
    CHECK(selective < transformer_memory(sh, st).per_node);
    CHECK(full < selective);
    st.ranks_per_node = 2;
    st.data_parallel = 2;
    const double two = transformer_memory(sh, st).per_node;
    st.ranks_per_node = 1;
    CHECK(two == doctest::Approx(2 * transformer_memory(sh, st).per_node)); // two ranks, two copies
    // ZeRO shards optimizer states, then gradients, then weights among the data-parallel ranks.
    st.data_parallel = 4;
    double previous = transformer_memory(sh, st).states;
    for (int stage = 1; stage <= 3; ++stage) {
        st.zero_stage = stage;
        const double states = transformer_memory(sh, st).states;
        CHECK(states < previous);
        previous = states;
    }
    sh.activation_bytes = 4; // fp32 activations: the layers' share doubles
    st.zero_stage = 0;
    const auto m2 = transformer_memory(sh, st);
    sh.activation_bytes = 2;
    const auto m1 = transformer_memory(sh, st);
    CHECK(m2.activations > 1.9 * (m1.activations - 8.0 * 128 * 8 * 65));
}

TEST_CASE("recompute settings by name") {
    CHECK(parse_recompute("none") == Recompute::None);
    CHECK(parse_recompute("selective") == Recompute::Selective);
    CHECK(parse_recompute("full") == Recompute::Full);
    CHECK(parse_recompute("true") == Recompute::Full);
    CHECK_THROWS_AS(parse_recompute("some"), infrarsi::Error);
}
