#pragma once
// Internal to src/store/: a typed record's optional field into its JSON document, where a field not set is
// no key (the shape the records kept before they were typed). Each record's file brings it in with
// `using internal::put;` beside any overload of its own (a double written as null when not finite).
#include <nlohmann/json.hpp>

#include <optional>

namespace infrarsi::store::internal {

template <class T> void put(nlohmann::json& j, const char* key, const std::optional<T>& v) {
    if (v) j[key] = *v;
}

} // namespace infrarsi::store::internal
