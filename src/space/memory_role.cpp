#include "space/memory_role.hpp"

#include <algorithm>

namespace infrarsi::space {

namespace {
bool has(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}
} // namespace

MemoryRole memory_role(const Knob& k) {
    if (has(k.name, "grad_accum") || has(k.name, "gradient_accumulation")) return MemoryRole::Accumulation;
    const bool numeric = k.kind == KnobKind::Integer || k.kind == KnobKind::Pow2;
    if (numeric && (has(k.name, "micro_batch") || k.name == "mbs")) return MemoryRole::MicroBatch;
    if (has(k.name, "recompute")) {
        if (k.kind == KnobKind::Bool) return MemoryRole::Recompute;
        if (k.kind == KnobKind::Choice && std::all_of(k.choices.begin(), k.choices.end(), [](const auto& v) {
                return v == "none" || v == "selective" || v == "full";
            }))
            return MemoryRole::Recompute;
    }
    return MemoryRole::Other;
}

int recompute_strength(const Value& v) {
    if (const auto* b = std::get_if<bool>(&v)) return *b ? 2 : 0;
    const auto& s = std::get<std::string>(v);
    return s == "none" ? 0 : s == "selective" ? 1 : 2;
}

} // namespace infrarsi::space
