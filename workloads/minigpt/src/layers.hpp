#pragma once
// The position-wise layers: token/position embedding, normalization (RMSNorm or LayerNorm), the MLP (also the
// expert FFN of the MoE layer) and the LM head with cross-entropy. Each forward fills a cache that its
// backward reads; backward accumulates into the parameter gradients (gradient accumulation) and returns the
// input gradient. Activations are rows: [tokens, features].
#include "config.hpp"
#include "footprint.hpp"
#include "tensor.hpp"

#include <cstdint>
#include <string>

namespace minigpt {

class Embedding {
  public:
    Embedding(ParamStore& ps, const ModelConfig& m);
    void forward(const std::int32_t* ids, int B, int T, Mat& x);
    void backward(const std::int32_t* ids, int B, int T, const Mat& dx);
    int tok, pos;

  private:
    ParamStore& ps_;
};

struct NormCache {
    Mat xhat; // normalized input, before the gain
    Vec rstd; // 1/sqrt(var + eps) per row (RMS: 1/sqrt(mean(x^2) + eps))
    std::size_t bytes() const { return (xhat.size() + rstd.size()) * sizeof(float); }
};

// LayerNorm (Ba et al. 2016) or RMSNorm (Zhang & Sennrich 2019).
class Norm {
  public:
    Norm(ParamStore& ps, const ModelConfig& m, const std::string& name);
    void forward(const Mat& x, NormCache& c, Mat& y) const;
    void backward(const Mat& dy, const NormCache& c, Mat& dx);
    // Activation memory of one norm over `rows` tokens.
    static Footprint footprint(double rows, int d);
    int gain, bias = -1;

  private:
    ParamStore& ps_;
    NormKind kind_;
};

struct MlpCache {
    Mat x; // input
    Mat h; // pre-activation (after bias)
    Mat a; // GELU output
    std::size_t bytes() const { return (x.size() + h.size() + a.size()) * sizeof(float); }
};

// y = GELU(x W1 + b1) W2 + b2. Also the expert FFN of the MoE layer (expert = true).
class Mlp {
  public:
    Mlp(ParamStore& ps, const std::string& name, int d, int hidden, bool expert);
    void forward(const Mat& x, MlpCache& c, Mat& y) const;
    void backward(const Mat& dy, MlpCache& c, Mat& dx);
    // Activation memory of one MLP over `rows` tokens (an expert: over its slots).
    static Footprint footprint(double rows, int d, int hidden);
    int w1, b1, w2, b2;

  private:
    ParamStore& ps_;
};

struct HeadCache {
    Mat x;      // final hidden states
    Mat logits; // [tokens, vocab]
    float scale = 0;
    std::size_t bytes() const { return (x.size() + logits.size()) * sizeof(float); }
};

// logits = x W; loss = sum over tokens of cross-entropy. `scale` is d(objective)/d(token loss), i.e.
// 1 / tokens in the global batch, so that gradients of micro-batches and ranks add up to the batch mean.
class LmHead {
  public:
    LmHead(ParamStore& ps, const ModelConfig& m);
    double forward(const Mat& x, const std::int32_t* targets, float scale, HeadCache& c);
    void backward(HeadCache& c, const std::int32_t* targets, Mat& dx);
    // Activation memory of the LM head and its loss over `rows` tokens.
    static Footprint footprint(double rows, int d, int vocab);
    int w;

  private:
    ParamStore& ps_;
};

} // namespace minigpt
