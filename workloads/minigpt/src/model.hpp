#pragma once
// The decoder-only transformer (GPT-2 layout, pre-norm): embedding, L blocks of
// x + Attn(Norm(x)) then x + FFN(Norm(x)) with FFN = MLP or MoE, a final norm and the LM head. Activation
// recompute is decided here, per block:
//   none:      every block keeps all of its caches until its backward;
//   selective: the attention core (T x T probabilities) is dropped and recomputed in backward;
//   full:      a block keeps only its input and re-runs its forward right before its backward
//              (Chen et al. 2016, "Training deep nets with sublinear memory cost").
#include "attention.hpp"
#include "comm.hpp"
#include "config.hpp"
#include "data.hpp"
#include "layers.hpp"
#include "moe.hpp"

#include <memory>
#include <optional>
#include <vector>

namespace minigpt {

struct BlockCache {
    Mat x_in;
    NormCache n1;
    AttnCache attn;
    NormCache n2;
    MlpCache mlp;
    MoeCache moe;
    std::size_t bytes() const {
        return x_in.size() * sizeof(float) + n1.bytes() + attn.bytes() + n2.bytes() + mlp.bytes() +
               moe.bytes();
    }
};

class Block {
  public:
    Block(ParamStore& ps, const ModelConfig& m, int layer, int threads, const Group& ep);
    // Returns the MoE load-balancing loss (0 for a dense block).
    double forward(const Mat& x, int B, int T, bool keep_probs, BlockCache& c, Mat& y) const;
    void backward(const Mat& dy, BlockCache& c, Mat& dx, float aux_weight);
    std::vector<int> params; // this block's parameters, for gradient-ready notifications

  private:
    Norm n1_;
    Attention attn_;
    Norm n2_;
    std::optional<Mlp> mlp_;
    std::optional<Moe> moe_;
};

// Activation memory of one micro-batch on one rank, in bytes: the modules' footprints composed under the
// recompute policy (Model::footprint). memory.cpp adds parameters, gradients and optimizer states.
struct ActivationMemory {
    double stored = 0;    // caches held at the end of forward: what Result::activation_bytes measures
    double transient = 0; // the most that temporaries add on top of them, in forward or in backward
    // Parts of the two above, named in the estimate's breakdown.
    double attention_scores = 0, moe_buffers = 0;
};

class Model {
  public:
    // Registers all parameters in ps; the caller calls ps.finalize() afterwards.
    Model(ParamStore& ps, const ModelConfig& m, Recompute recompute, int threads, const Group& ep);

    struct Result {
        double loss_sum = 0; // sum of token cross-entropies of this micro-batch
        double aux = 0;      // sum over layers of the MoE load-balancing loss
        double forward_s = 0, backward_s = 0;
        std::size_t activation_bytes = 0; // caches held at the end of forward
    };
    // One micro-batch: forward, then backward (unless backward = false). Gradients accumulate in ps.
    // loss_scale = 1/(tokens in the global batch); aux_weight = aux_coef * (micro-batch tokens / global
    // tokens).
    Result step(const Batch& batch, float loss_scale, float aux_weight, GradSync* sync, bool backward = true);
    // What step() holds for a micro-batch of B sequences under this recompute policy.
    static ActivationMemory footprint(const ModelConfig& m, Recompute recompute, int B, int threads);

  private:
    static std::vector<Block> make_blocks(ParamStore& ps, const ModelConfig& m, int threads, const Group& ep);
    ParamStore& ps_;
    ModelConfig m_;
    Recompute recompute_;
    Embedding emb_;
    std::vector<Block> blocks_;
    Norm final_norm_;
    LmHead head_;
    std::vector<int> head_params_, emb_params_;
};

} // namespace minigpt
