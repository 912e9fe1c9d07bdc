#include "campaign/campaign_lock.hpp"

#include "util/error.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/file.h>
#include <unistd.h>

namespace infrarsi::campaign {

std::optional<CampaignLock> CampaignLock::try_take(const std::filesystem::path& dir, std::string* holder) {
    const std::string path = (dir / "lock").string();
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644));
    if (!fd) throw Error(std::string("cannot open the campaign lock: ") + std::strerror(errno), path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) throw Error(std::string("flock: ") + std::strerror(errno), path);
        if (holder) {
            std::string text;
            try {
                text = read_all(fd.get(), 64, path);
            } catch (const Error&) {
            }
            while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
                text.pop_back();
            *holder = text.empty() ? "another process" : "pid " + text;
        }
        return std::nullopt;
    }
    // Ours: say who holds it, for the next one refused.
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd.get(), 0) == 0) (void)!::pwrite(fd.get(), pid.data(), pid.size(), 0);
    CampaignLock lock;
    lock.fd_ = std::move(fd);
    return lock;
}

CampaignLock::CampaignLock(const std::filesystem::path& dir) {
    std::string holder;
    auto lock = try_take(dir, &holder);
    if (!lock)
        throw Error("the campaign is in use by " + holder +
                        " (another infrarsi run, doctor, verify or infrarsid)",
                    dir.string(), "one process driving a campaign at a time");
    fd_ = std::move(lock->fd_);
}

} // namespace infrarsi::campaign
