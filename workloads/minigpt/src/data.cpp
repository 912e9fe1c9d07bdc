#include "data.hpp"

#include "tensor.hpp"

namespace minigpt {

SyntheticCorpus::SyntheticCorpus(std::uint64_t seed, int vocab)
    : seed_(seed), vocab_(vocab), next_(vocab * 4) {
    for (std::size_t i = 0; i < next_.size(); ++i)
        next_[i] = static_cast<std::int32_t>(mix64(seed ^ 0xb16ee5ULL ^ (i * 0x1000193ULL)) % vocab);
}

void SyntheticCorpus::sample(std::uint64_t index, int T, std::int32_t* out) const {
    std::uint64_t state = mix64(seed_ ^ mix64(index + 0x5eedULL));
    auto next_u = [&] { return state = mix64(state); };
    out[0] = static_cast<std::int32_t>(next_u() % vocab_);
    // A bigram chain with Zipf-like successor choice (learnable in a few steps), plus long-range copies at a
    // fixed distance that only full-length attention can exploit.
    constexpr int kCopyDistance = 192;
    for (int t = 1; t <= T; ++t) {
        const std::uint64_t r = next_u();
        if (t >= kCopyDistance && r % 100 < 25) {
            out[t] = out[t - kCopyDistance];
            continue;
        }
        const int u = static_cast<int>((r >> 8) % 100);
        const int j = u < 50 ? 0 : u < 75 ? 1 : u < 90 ? 2 : 3;
        out[t] = next_[out[t - 1] * 4 + j];
    }
}

Batch make_batch(const SyntheticCorpus& corpus, int step, int global_batch, int dp_size, int rank, int micro,
                 int micro_batch, int T) {
    Batch b;
    b.B = micro_batch;
    b.T = T;
    b.inputs.resize(static_cast<std::size_t>(micro_batch) * T);
    b.targets.resize(b.inputs.size());
    std::vector<std::int32_t> seq(T + 1);
    for (int j = 0; j < micro_batch; ++j) {
        const std::uint64_t index =
            static_cast<std::uint64_t>(step) * global_batch + (micro * dp_size + rank) * micro_batch + j;
        corpus.sample(index, T, seq.data());
        for (int t = 0; t < T; ++t) {
            b.inputs[j * T + t] = seq[t];
            b.targets[j * T + t] = seq[t + 1];
        }
    }
    return b;
}

} // namespace minigpt
