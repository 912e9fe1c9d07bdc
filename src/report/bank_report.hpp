#pragma once
// What the experience bank knows, for `infrarsi bank show` (text and --json).
#include "bank/experience_bank.hpp"

#include <nlohmann/json.hpp>
#include <string>

namespace infrarsi::report {

// Hardware entries nearest to `here` first, each with its findings (verified priors and evidence).
nlohmann::json describe_bank(bank::ExperienceBank& bank, const bank::HardwareKey& here);
std::string render_bank(const nlohmann::json& j);

} // namespace infrarsi::report
