#include "scheduler/lost_tasks.hpp"

#include "util/number.hpp"

#include <sstream>

namespace infrarsi::scheduler {

std::optional<std::set<int>> record_indices(const slurm::JobRecord& r) {
    if (r.array_task_id) return std::set<int>{*r.array_task_id};
    const auto open = r.job_id.find("_[");
    if (open == std::string::npos) {
        if (r.job_id.find('_') == std::string::npos) return std::set<int>{0}; // a plain job: task 0
        return std::nullopt;
    }
    const auto close = r.job_id.find(']', open);
    if (close == std::string::npos) return std::nullopt;
    std::string list = r.job_id.substr(open + 2, close - open - 2);
    list = list.substr(0, list.find('%')); // the throttle
    std::set<int> out;
    std::istringstream in(list);
    for (std::string item; std::getline(in, item, ',');) {
        const auto dash = item.find('-');
        const auto lo = parse_integer<int>(item.substr(0, dash), 0);
        const auto hi = dash == std::string::npos ? lo : parse_integer<int>(item.substr(dash + 1), 0);
        // A range wider than any array Slurm allows (MaxArraySize <= 4000001) is not one to enumerate.
        if (!lo || !hi || *hi < *lo || *hi - *lo > 4000000) return std::nullopt;
        for (int i = *lo; i <= *hi; ++i)
            out.insert(i);
    }
    if (out.empty()) return std::nullopt;
    return out;
}

LostTasks::LostTasks(int first_index, int tasks, std::chrono::seconds grace)
    : first_(first_index), tasks_(tasks), grace_(grace) {}

std::set<int> LostTasks::missing(const std::vector<slurm::JobRecord>& records) const {
    std::set<int> out;
    for (int i = first_; i < first_ + tasks_; ++i)
        out.insert(i);
    for (const auto& r : records) {
        const auto covered = record_indices(r);
        if (!covered) return {}; // a range it cannot read: nothing is taken as missing
        for (const int i : *covered)
            out.erase(i);
    }
    return out;
}

bool LostTasks::any_missing(const std::vector<slurm::JobRecord>& records) const {
    for (const int i : missing(records))
        if (!lost_.count(i)) return true;
    return false;
}

std::vector<int> LostTasks::observe(const std::vector<slurm::JobRecord>& records, bool answered,
                                    clock::time_point now) {
    if (!answered) {
        absent_since_.clear();
        return {};
    }
    const auto gone = missing(records);
    std::vector<int> out;
    for (auto it = absent_since_.begin(); it != absent_since_.end();)
        it = gone.count(it->first) ? std::next(it) : absent_since_.erase(it); // seen again: not lost
    for (const int i : gone) {
        if (lost_.count(i)) continue;
        const auto [at, fresh] = absent_since_.emplace(i, now);
        if (!fresh && now - at->second > grace_) {
            lost_.insert(i);
            absent_since_.erase(at);
            out.push_back(i);
        }
    }
    return out;
}

} // namespace infrarsi::scheduler
