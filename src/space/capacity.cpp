#include "space/capacity.hpp"

#include "space/memory_role.hpp"
#include "util/error.hpp"

#include <cmath>
#include <fmt/core.h>
#include <utility>
#include <vector>

namespace infrarsi::space {
namespace {

// Moves the accumulation knobs (every combination of their domains, in order) until the candidate satisfies
// the constraints; false when none does.
bool satisfy_with_accumulation(const Space& space, Candidate& c) {
    if (space.feasible(c)) return true;
    std::vector<const Knob*> free;
    for (const auto& k : space.knobs)
        if (memory_role(k) == MemoryRole::Accumulation && c.knobs.count(k.name) && k.size() > 0)
            free.push_back(&k);
    if (free.empty()) return false;
    std::vector<std::uint64_t> at(free.size(), 0);
    for (int combos = 0; combos < 100000; ++combos) {
        for (std::size_t i = 0; i < free.size(); ++i)
            c.knobs[free[i]->name] = free[i]->at(at[i]);
        if (space.feasible(c)) return true;
        std::size_t i = 0;
        while (i < free.size() && ++at[i] == free[i]->size())
            at[i++] = 0;
        if (i == free.size()) break;
    }
    return false;
}

} // namespace

std::optional<CapacityRule> scale_capacity(const Space& space, const Candidate& from, double scale) {
    if (!(scale > 0) || !std::isfinite(scale))
        throw Error(fmt::format("capacity scale {}", scale), "experience bank", "a positive finite ratio");
    Candidate to = from;
    bool short_of_memory = false;
    for (const auto& k : space.knobs) {
        auto it = to.knobs.find(k.name);
        if (memory_role(k) != MemoryRole::MicroBatch || it == to.knobs.end()) continue;
        const double want = static_cast<double>(std::get<long long>(it->second)) * scale;
        // The largest value at most `want`, by bisection over the (ascending) domain.
        auto value = [&](std::uint64_t i) { return static_cast<double>(std::get<long long>(k.at(i))); };
        const std::uint64_t n = k.size();
        if (n == 0) continue;
        std::uint64_t lo = 0, hi = n; // values below lo fit; values from hi on do not
        while (lo < hi) {
            const std::uint64_t mid = lo + (hi - lo) / 2;
            if (value(mid) <= want * (1 + 1e-9))
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == 0) short_of_memory = true;
        it->second = k.at(lo == 0 ? 0 : lo - 1);
    }
    if (short_of_memory)
        for (const auto& k : space.knobs) {
            auto it = to.knobs.find(k.name);
            if (memory_role(k) != MemoryRole::Recompute || it == to.knobs.end()) continue;
            std::optional<Value> next; // the weakest setting stronger than the current one
            for (std::uint64_t i = 0; i < std::min<std::uint64_t>(k.size(), Knob::kMaxListedValues); ++i)
                if (const Value v = k.at(i); recompute_strength(v) > recompute_strength(it->second) &&
                                             (!next || recompute_strength(v) < recompute_strength(*next)))
                    next = v;
            if (next) it->second = *next;
        }
    if (!satisfy_with_accumulation(space, to)) return std::nullopt;
    CapacityRule r{to, ""};
    for (const auto& [name, value] : to.knobs) {
        auto was = from.knobs.find(name);
        if (was != from.knobs.end() && was->second == value) continue;
        r.change += fmt::format("{}{} {} -> {}", r.change.empty() ? "" : ", ", name,
                                was == from.knobs.end() ? "-" : to_string(was->second), to_string(value));
    }
    return r;
}

} // namespace infrarsi::space
