#pragma once
// Mixture-of-Experts FFN (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch, Fedus et al. 2021):
// softmax router, top-k experts per token, a static per-expert capacity C = ceil(cf * N * k / E) (choices
// past it are dropped, top-1 choices first), expert parallelism with all-to-all dispatch and combine, and the
// Switch load-balancing loss aux = E * sum_e f_e * P_e (f_e: share of routed choices, P_e: mean router prob).
//
// Experts compute on their padded [C, d] slot buffers, as static-shape implementations do, so the capacity
// factor costs both memory and time.
#include "comm.hpp"
#include "config.hpp"
#include "layers.hpp"

#include <vector>

namespace minigpt {

struct MoeCache {
    int C = 0;                     // capacity per expert per rank
    Mat x;                         // input [N, d]
    Mat probs;                     // router softmax [N, E]
    std::vector<int> expert;       // [N*k] chosen expert of choice (n, j)
    std::vector<int> slot;         // [N*k] slot in the expert's buffer, -1 if dropped
    std::vector<float> frac;       // [E] f_e
    std::vector<int> recv_counts;  // [ep * E_local] filled slots per (source rank, local expert)
    std::vector<MlpCache> experts; // per local expert, over its [ep*C] received rows
    Mat yback;                     // expert outputs in the sender's layout [E*C, d]
    std::size_t bytes() const;
};

class Moe {
  public:
    Moe(ParamStore& ps, const ModelConfig& m, const std::string& name, const Group& ep);
    // Returns the load-balancing loss of this micro-batch; aux_weight is its weight in the objective.
    double forward(const Mat& x, MoeCache& c, Mat& y) const;
    void backward(const Mat& dy, MoeCache& c, Mat& dx, float aux_weight);
    // Slots per expert for `tokens` tokens of this rank: ceil(cf * tokens * k / E).
    static int capacity(const ModelConfig& m, int tokens);
    // Activation memory of one MoE layer over `tokens` tokens of this rank.
    static Footprint footprint(const ModelConfig& m, int tokens);
    int router;
    std::vector<Mlp> experts; // the local ones: global ids [ep_rank*E_local, (ep_rank+1)*E_local)

  private:
    ParamStore& ps_;
    Group ep_;
    int d_, E_, k_, El_;
    ModelConfig m_; // shape and capacity factor
};

} // namespace minigpt
