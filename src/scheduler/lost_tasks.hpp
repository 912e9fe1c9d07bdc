#pragma once
// Tasks the scheduler has forgotten. Slurm can lose an array task outright: slurmctld killed right after a
// held array was released restarts from state saved before the release, and the task that was already
// launched is purged ("Purged files for defunct batch job"): it is in no queue, no accounting and no
// completion file, and nothing will ever report its end. A task absent from every answer of a scheduler that
// answers, for longer than a grace (a record on its way: accounting written after the queue forgot the job),
// is lost: the campaign ends it as such and re-queues its candidate instead of waiting for it.
#include "slurm/job.hpp"

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace infrarsi::scheduler {

// The indices a record stands for: an array task's own, a plain job's 0, a pending range's ("12_[0-3,7%2]":
// 0..3 and 7); nullopt when the range cannot be read (then it is taken to cover every task).
std::optional<std::set<int>> record_indices(const slurm::JobRecord& record);

class LostTasks {
  public:
    using clock = std::chrono::steady_clock;
    // Tasks first_index .. first_index + tasks - 1 of one array job.
    LostTasks(int first_index, int tasks, std::chrono::seconds grace);

    // Whether some task of the array is absent from `records` (one answer of the scheduler).
    bool any_missing(const std::vector<slurm::JobRecord>& records) const;

    // One answer at `now`. `answered`: whether the scheduler answered then; while it does not, absence
    // proves nothing and every grace starts again once it does. Returns the tasks that have now been absent
    // longer than the grace, each once.
    std::vector<int> observe(const std::vector<slurm::JobRecord>& records, bool answered,
                             clock::time_point now);

  private:
    std::set<int> missing(const std::vector<slurm::JobRecord>& records) const;
    int first_, tasks_;
    std::chrono::seconds grace_;
    std::map<int, clock::time_point> absent_since_;
    std::set<int> lost_;
};

} // namespace infrarsi::scheduler
