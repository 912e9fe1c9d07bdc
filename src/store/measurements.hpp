#pragma once
// A trial's measurements as the campaign store keeps them: one JSON document per trial (the trials table's
// `measurements` column), versioned by its "version" key. Version 1 is the layout every earlier build wrote
// without the key, so a campaign written before the measurements were typed reads back unchanged.
#include "trial/record.hpp"

#include <nlohmann/json.hpp>

namespace infrarsi::store {

inline constexpr int kMeasurementsVersion = 1;

nlohmann::json to_json(const trial::Measurements& m);
// Throws an Error for a document of a newer version than this build writes.
trial::Measurements measurements_from_json(const nlohmann::json& j);

} // namespace infrarsi::store
