#pragma once
// Internal to src/store/: a typed record into its JSON document. `put` writes an optional field, where a
// field not set is no key (the shape the records kept before they were typed); each record's file brings it
// in with `using internal::put;` beside any overload of its own (a double written as null when not finite).
// `to_json_array` writes a list, each item by its `to_json` (found beside its type) or by `f`.
#include <nlohmann/json.hpp>

#include <optional>
#include <vector>

namespace infrarsi::store::internal {

template <class T> void put(nlohmann::json& j, const char* key, const std::optional<T>& v) {
    if (v) j[key] = *v;
}

template <class T, class F> nlohmann::json to_json_array(const std::vector<T>& items, F f) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : items)
        a.push_back(f(x));
    return a;
}

template <class T> nlohmann::json to_json_array(const std::vector<T>& items) {
    return to_json_array(items, [](const T& x) { return to_json(x); });
}

} // namespace infrarsi::store::internal
