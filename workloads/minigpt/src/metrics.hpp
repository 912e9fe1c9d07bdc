#pragma once
// Model FLOPs and peak FLOP/s for MFU.
#include "config.hpp"

namespace minigpt {

// Parameters that do matrix work per token (everything but the embedding lookups; for MoE the router and
// top_k experts, i.e. the *active* parameters).
double active_params(const ModelConfig& m);

// Training FLOPs per token: 6 N + 12 L d T (Kaplan et al. 2020, section 2.1, C = 6N; the attention term is
// from Chowdhery et al. 2022, PaLM, appendix B: 6N + 12 L H Q T with H*Q = d_model and T = sequence length).
double flops_per_token(const ModelConfig& m);

// Sustained single-precision GEMM rate of this process with `threads` threads, measured for ~seconds.
double gemm_probe_gflops(int threads, double seconds);

} // namespace minigpt
