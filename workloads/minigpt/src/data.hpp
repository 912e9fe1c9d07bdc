#pragma once
// Deterministic training data: a synthetic language generated from the seed, so every node has the corpus
// without shipping files. Sample i of the run is a pure function of (seed, i), which fixes the data order
// by the seed and makes it independent of the rank layout (2 ranks see the same global batch as 1 rank).
#include <cstdint>
#include <vector>

namespace minigpt {

class SyntheticCorpus {
  public:
    SyntheticCorpus(std::uint64_t seed, int vocab);
    // Writes the T+1 tokens of global sample `index` (inputs are [0,T), targets are [1,T]).
    void sample(std::uint64_t index, int T, std::int32_t* out) const;

  private:
    std::uint64_t seed_;
    int vocab_;
    std::vector<std::int32_t> next_; // 4 successor candidates per token (a sparse bigram table)
};

// The global batch of one step, laid out as micro-batches: rank r's micro-batch a holds the global samples
// step*G + (a*dp + r)*mb + j, j < mb.
struct Batch {
    int B = 0, T = 0;
    std::vector<std::int32_t> inputs;  // B*T
    std::vector<std::int32_t> targets; // B*T
};
Batch make_batch(const SyntheticCorpus& corpus, int step, int global_batch, int dp_size, int rank, int micro,
                 int micro_batch, int T);

} // namespace minigpt
