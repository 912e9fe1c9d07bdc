#include "trial/record.hpp"

namespace infrarsi::trial {

nlohmann::json to_json(const IsolationRecord& i) {
    return {{"in_place", i.in_place}, {"detail", i.detail}};
}

nlohmann::json to_json(const std::vector<SelfSubmittedJob>& jobs) {
    auto j = nlohmann::json::array();
    for (const auto& s : jobs)
        j.push_back({{"job", s.job}, {"state", s.state}, {"submitted", s.submitted}});
    return j;
}

nlohmann::json to_json(const JobFilesRemoved& r) {
    return {{"entries", r.entries}, {"bytes", r.bytes}};
}

} // namespace infrarsi::trial
