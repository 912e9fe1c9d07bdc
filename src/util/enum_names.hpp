#pragma once
// One name table per enum: its printed name and its parser come from the same table, so each name is spelled
// once and a value stored on disk always reads back as the value that wrote it.
//
//   inline constexpr util::EnumNames<Color, 2> color_names{{{{Color::Red, "red"}, {Color::Blue, "blue"}}}};
//   color_names.name(Color::Red) == "red"; color_names.parse("blue") == Color::Blue; color_names.list()
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace infrarsi::util {

template <class E, std::size_t N> struct EnumNames {
    std::array<std::pair<E, std::string_view>, N> entries;

    // The value's name; "?" for a value outside the table (a table that misses a value is a bug, and its
    // unit test says so).
    constexpr std::string_view name(E value) const {
        for (const auto& [v, n] : entries)
            if (v == value) return n;
        return "?";
    }
    constexpr std::optional<E> parse(std::string_view name) const {
        for (const auto& [v, n] : entries)
            if (n == name) return v;
        return std::nullopt;
    }
    // "a, b, c": the accepted names, for an error message.
    std::string list() const {
        std::string s;
        for (const auto& [v, n] : entries)
            s.append(s.empty() ? "" : ", ").append(n);
        return s;
    }
};

} // namespace infrarsi::util
