#pragma once
// One validator for a field of JSON that comes from a file or a job (records, calibrations, topologies): it
// must be there, of the type asked for, and an integer must be in its type's range (nlohmann would turn -1
// into 4294967295 and 4294967297 into 1 without a word). `where` names the source in the error.
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace infrarsi {

template <class T> T json_field(const nlohmann::json& j, const char* name, const std::string& where) {
    if (!j.is_object() || !j.contains(name)) throw Error(std::string("missing field '") + name + "'", where);
    const auto& v = j.at(name);
    if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && !std::is_same_v<T, bool>) {
        const bool ok =
            v.is_number_unsigned() || (v.is_number_integer() && v.template get<std::int64_t>() >= 0);
        if (!ok || v.template get<std::uint64_t>() > std::numeric_limits<T>::max())
            throw Error(std::string("field '") + name + "' must be an integer in 0.." +
                            std::to_string(std::numeric_limits<T>::max()),
                        where);
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
        // In range, or a conversion would wrap it (4294967297 read as an int is 1).
        const bool ok =
            v.is_number_unsigned()
                ? v.template get<std::uint64_t>() <= std::uint64_t(std::numeric_limits<T>::max())
            : v.is_number_integer() ? v.template get<std::int64_t>() >= std::numeric_limits<T>::min() &&
                                          v.template get<std::int64_t>() <= std::numeric_limits<T>::max()
            : v.is_number_float() ? v.template get<double>() >= double(std::numeric_limits<T>::min()) &&
                                        v.template get<double>() < double(std::numeric_limits<T>::max()) + 1.0
                                  : true; // not a number: the wrong type, below
        if (!ok)
            throw Error(std::string("field '") + name + "' must be an integer in " +
                            std::to_string(std::numeric_limits<T>::min()) + ".." +
                            std::to_string(std::numeric_limits<T>::max()),
                        where);
    }
    try {
        return v.template get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(std::string("field '") + name + "' has the wrong type", where);
    }
}

// A number the campaign wrote itself that may have been infinite or NaN: JSON has neither, so nlohmann wrote
// it as null. Read back: `j[name]` when it is a number, else `if_not` (e.g. -INFINITY for an interval's
// unbounded lower end).
inline double json_number_or(const nlohmann::json& j, const char* name, double if_not) {
    if (!j.is_object()) return if_not;
    const auto it = j.find(name);
    return it != j.end() && it->is_number() ? it->template get<double>() : if_not;
}

} // namespace infrarsi
