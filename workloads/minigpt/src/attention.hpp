#pragma once
// Causal multi-head self-attention (Vaswani et al. 2017), written the unfused way: the T x T score matrix of
// every (sequence, head) is materialized, softmaxed in place and, unless recompute drops it, kept for the
// backward pass. That T x T term dominates activation memory at long sequence lengths.
#include "config.hpp"
#include "footprint.hpp"
#include "tensor.hpp"

#include <string>

namespace minigpt {

struct AttnCache {
    int B = 0, T = 0;
    Mat x;     // input [B*T, d]
    Mat qkv;   // [B*T, 3d]: queries | keys | values, heads contiguous inside each
    Mat probs; // softmax(QK^T/sqrt(dh)) [B*H*T, T]; empty when selective/full recompute dropped it
    Mat ctx;   // concatenated head outputs [B*T, d]
    std::size_t bytes() const { return (x.size() + qkv.size() + probs.size() + ctx.size()) * sizeof(float); }
};

class Attention {
  public:
    Attention(ParamStore& ps, const ModelConfig& m, const std::string& name, int threads);
    // keep_probs = false is selective recompute (Korthikanti et al. 2022, section 4.1): the attention core is
    // recomputed in backward from the cached qkv instead of storing B*H*T*T probabilities.
    void forward(const Mat& x, int B, int T, bool keep_probs, AttnCache& c, Mat& y) const;
    void backward(const Mat& dy, AttnCache& c, Mat& dx);
    // One layer's activation memory for a micro-batch of B sequences: its cache and its largest temporaries.
    static Footprint footprint(const ModelConfig& m, int B, int threads, bool keep_probs);
    int wqkv, bqkv, wo, bo;

  private:
    ParamStore& ps_;
    int d_, heads_, hd_, threads_;
};

} // namespace minigpt
