#pragma once
// Numbers from text we did not write (Slurm's output, a contract, a job's files): the whole text must be the
// number, in range, finite. nullopt otherwise; never an exception, never a silent wrap or truncation.
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>

namespace infrarsi {

// A decimal integer (optional leading '-' for signed T) filling all of `text`, within [lo, hi].
template <class T>
std::optional<T> parse_integer(std::string_view text, T lo = std::numeric_limits<T>::min(),
                               T hi = std::numeric_limits<T>::max()) {
    if (text.empty() || text.front() == '+') return std::nullopt;
    T v{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return std::nullopt;
    return v;
}

// A finite decimal number ("12", "-0.5", "1e3") filling all of `text`, within [lo, hi]: never inf or nan.
inline std::optional<double> parse_finite(std::string_view text, double lo = -HUGE_VAL,
                                          double hi = HUGE_VAL) {
    if (text.empty() || text.front() == '+') return std::nullopt;
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < lo || v > hi)
        return std::nullopt;
    return v;
}

} // namespace infrarsi
