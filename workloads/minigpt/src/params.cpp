#include "tensor.hpp"

#include "error.hpp"

#include <algorithm>
#include <random>

namespace minigpt {

int ParamStore::add(std::string name, int rows, int cols, bool expert, bool decay) {
    if (!data.empty()) throw Error("parameter " + name + " registered after ParamStore::finalize()");
    info.push_back({std::move(name), rows, cols, expert, decay, 0});
    return static_cast<int>(info.size()) - 1;
}

void ParamStore::finalize(std::uint64_t seed, float init_std) {
    std::size_t off = 0;
    for (bool expert : {false, true}) {
        for (auto& p : info)
            if (p.expert == expert) {
                p.offset = off;
                off = align_up(off + p.size());
            }
        if (!expert) replicated_ = off;
    }
    data.assign(off, 0.0f);
    grad.assign(off, 0.0f);
    for (const auto& p : info) {
        float* w = data.data() + p.offset;
        if (!p.decay) { // gains start at 1, biases at 0
            std::fill(w, w + p.size(), p.name.ends_with(".gain") ? 1.0f : 0.0f);
            continue;
        }
        std::mt19937_64 rng(mix64(seed ^ hash_str(p.name)));
        std::normal_distribution<float> dist(0.0f, init_std);
        for (std::size_t i = 0; i < p.size(); ++i)
            w[i] = dist(rng);
    }
}

void ParamStore::zero_grad() {
    std::fill(grad.begin(), grad.end(), 0.0f);
}

} // namespace minigpt
