#include "metrics.hpp"

#include "tensor.hpp"

#include <chrono>

namespace minigpt {

double active_params(const ModelConfig& m) {
    const double d = m.d_model, L = m.n_layers, V = m.vocab;
    const double norms = (m.norm == NormKind::Layer ? 2 : 1) * d;
    double layer = 4 * d * d + 4 * d + 2 * norms;
    if (m.moe)
        layer += d * m.experts + m.top_k * (2 * d * m.eff() + m.eff() + d);
    else
        layer += 2 * d * m.ffn() + m.ffn() + d;
    return L * layer + norms + d * V;
}

double flops_per_token(const ModelConfig& m) {
    return 6 * active_params(m) + 12.0 * m.n_layers * m.d_model * m.seq_len;
}

double gemm_probe_gflops(int threads, double seconds) {
    Eigen::setNbThreads(threads);
    constexpr int n = 512;
    Mat a = Mat::Random(n, n), b = Mat::Random(n, n), c(n, n);
    c.noalias() = a * b; // warm caches and thread pool
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    long iters = 0;
    do {
        c.noalias() = a * b;
        ++iters;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds);
    return 2.0 * n * n * n * iters / elapsed / 1e9;
}

} // namespace minigpt
