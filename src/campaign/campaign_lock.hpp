#pragma once
// One writer per campaign directory: `infrarsi run`, `doctor`, `verify` and `infrarsid` hold an exclusive
// flock on <dir>/lock for as long as they drive the campaign. A second one is refused with the holder's pid
// instead of submitting its own batches (two writers re-propose the same candidates and build in one
// workspace). The kernel drops the lock when the holder dies, even by SIGKILL: nothing to clean up.
#include "util/fd.hpp"

#include <filesystem>
#include <optional>

namespace infrarsi::campaign {

class CampaignLock {
  public:
    // Takes the lock without waiting. Throws infrarsi::Error naming the holder's pid when another process
    // (or another CampaignLock in this one) holds it.
    explicit CampaignLock(const std::filesystem::path& campaign_dir);
    // nullopt instead of throwing when another holds it; `holder` then says who ("pid 1234").
    static std::optional<CampaignLock> try_take(const std::filesystem::path& campaign_dir,
                                                std::string* holder);

    CampaignLock(CampaignLock&&) = default;
    CampaignLock& operator=(CampaignLock&&) = default;

  private:
    CampaignLock() = default;
    UniqueFd fd_;
};

} // namespace infrarsi::campaign
