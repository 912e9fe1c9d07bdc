#pragma once
// Dense math types and the parameter store.
//
// All parameters live in one flat buffer and all gradients in another (like PyTorch DDP's contiguous gradient
// buckets): bucketed all-reduce and ZeRO-1 sharding are then plain ranges of floats. The layout is
// [replicated params in registration order | expert params in registration order], because expert params are
// reduced over a different communicator (the expert-data-parallel group) than the replicated ones.
#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

namespace minigpt {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<Mat>;
using RowVec = Eigen::Matrix<float, 1, Eigen::Dynamic>;
using Vec = Eigen::VectorXf;

// Every tensor starts on a 64-byte boundary: Eigen's vectorized loops peel scalar iterations up to the first
// aligned element, and the peeled ones round differently (no FMA), so unaligned maps would make results
// depend on heap addresses and break bit-reproducible runs.
constexpr std::size_t kAlignFloats = 16;
inline std::size_t align_up(std::size_t n) {
    return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}
using FloatBuffer = std::vector<float, Eigen::aligned_allocator<float>>;

struct ParamInfo {
    std::string name;
    int rows = 0;
    int cols = 0;
    bool expert = false;    // reduced over the expert-data-parallel group, not the world
    bool decay = true;      // AdamW weight decay applies to matrices, not to gains and biases
    std::size_t offset = 0; // into ParamStore::data / grad, set by finalize()
    std::size_t size() const { return static_cast<std::size_t>(rows) * cols; }
};

class ParamStore {
  public:
    // Registers a parameter; storage exists only after finalize().
    int add(std::string name, int rows, int cols, bool expert = false, bool decay = true);
    // Lays out the flat buffers and initializes every tensor from (seed, name), so that a parameter has the
    // same initial value whatever the rank layout (expert parallelism shards experts by global id).
    void finalize(std::uint64_t seed, float init_std);

    MatMap w(int i) { return {data.data() + info[i].offset, info[i].rows, info[i].cols}; }
    MatMap g(int i) { return {grad.data() + info[i].offset, info[i].rows, info[i].cols}; }
    std::size_t replicated_count() const { return replicated_; }
    std::size_t expert_count() const { return data.size() - replicated_; }
    std::size_t count() const { return data.size(); }
    void zero_grad();

    std::vector<ParamInfo> info;
    FloatBuffer data;
    FloatBuffer grad;

  private:
    std::size_t replicated_ = 0;
};

// splitmix64 (Steele et al. 2014): a stateless mixer for seeds derived from names and indices.
inline std::uint64_t mix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
inline std::uint64_t hash_str(const std::string& s, std::uint64_t h = 1469598103934665603ULL) {
    for (unsigned char c : s)
        h = (h ^ c) * 1099511628211ULL; // FNV-1a
    return h;
}

// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in section 2), as in GPT-2.
constexpr float kGeluC0 = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluC1 = 0.044715f;

} // namespace minigpt
