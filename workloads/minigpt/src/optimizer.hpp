#pragma once
// AdamW (Loshchilov & Hutter 2019) over the flat parameter buffer, with optional ZeRO stage 1 (Rajbhandari et
// al. 2020): each data-parallel rank keeps the moments m and v only for its 1/dp shard of the parameters,
// updates that shard, and the updated parameters are all-gathered.
#include "comm.hpp"
#include "tensor.hpp"

#include <vector>

namespace minigpt {

struct AdamWConfig {
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW {
  public:
    AdamW(ParamStore& ps, const Group& world, const Group& expert_dp, bool zero1, AdamWConfig cfg = {});
    // t is the 1-based step count (for bias correction).
    void step(int t, float lr);
    std::size_t state_bytes() const { return (m_.size() + v_.size()) * sizeof(float); }

  private:
    struct Shard {
        const Group* group;
        std::size_t region_begin, region_end; // the region of the flat buffer
        std::size_t begin, end;               // this rank's part
        std::size_t state;                    // offset of its moments in m_/v_
        std::vector<int> counts, displs;      // per rank, for the all-gather
    };
    ParamStore& ps_;
    Group world_, expert_dp_;
    AdamWConfig cfg_;
    std::vector<Shard> shards_;
    FloatBuffer m_, v_;
};

} // namespace minigpt
