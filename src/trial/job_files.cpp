#include "trial/job_files.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi::trial {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxDepth = 32;              // directories open at once below the trial directory
constexpr std::size_t kNamesAtOnce = 4096; // names read from a directory before acting on them
constexpr std::size_t kMaxLeft = 8;        // what was left, named

struct DirCloser {
    void operator()(DIR* d) const { ::closedir(d); }
};

class Walk {
  public:
    Walk(int top, dev_t dev, contract::KeepJobFiles mode)
        : top_(top), dev_(dev), uid_(::geteuid()), mode_(mode) {}

    // Empties the trial directory as the mode says, then removes whatever was moved up from too deep.
    RemovedJobFiles run() {
        if (UniqueFd self(::fcntl(top_, F_DUPFD_CLOEXEC, 0)); self) {
            empty(std::move(self), 0, "", false);
        } else {
            note(fmt::format("the trial directory: {}", std::strerror(errno)));
        }
        while (!hoisted_.empty()) {
            const std::string name = hoisted_.front();
            hoisted_.pop_front();
            act(top_, 0, "", name, true);
        }
        return std::move(out_);
    }

  private:
    void note(std::string what) {
        if (out_.left.size() < kMaxLeft) out_.left.push_back(std::move(what));
    }

    bool keep(const struct stat& st) {
        if (mode_ != contract::KeepJobFiles::Small || !S_ISREG(st.st_mode)) return false;
        const auto size = static_cast<std::uint64_t>(st.st_size);
        if (size > kKeptJobFileBytes || kept_bytes_ + size > kKeptJobFilesBytes ||
            out_.kept >= kKeptJobFilesEntries)
            return false;
        kept_bytes_ += size;
        ++out_.kept;
        return true;
    }

    // Acts on each entry of the directory `dir`, `depth` levels below the trial directory (`path` from it,
    // for messages). Names are read a batch at a time: a directory of millions of entries costs no more
    // memory.
    void empty(UniqueFd dir, int depth, const std::string& path, bool whole) {
        std::unique_ptr<DIR, DirCloser> d(::fdopendir(dir.get()));
        if (!d) {
            note(fmt::format("{}: {}", path.empty() ? "." : path, std::strerror(errno)));
            return;
        }
        const int fd = dir.release(); // owned by d now
        for (;;) {
            std::vector<std::string> names;
            errno = 0;
            while (names.size() < kNamesAtOnce) {
                const dirent* e = ::readdir(d.get());
                if (!e) break;
                const std::string_view n = e->d_name;
                if (n == "." || n == "..") continue;
                // The wrapper's files stay; what was moved up from too deep is removed whole, after the walk.
                if (depth == 0 && (is_wrapper_file(std::string(n)) || hoisted_names_.count(std::string(n))))
                    continue;
                names.emplace_back(n);
            }
            if (names.empty()) {
                if (errno != 0) note(fmt::format("{}: {}", path.empty() ? "." : path, std::strerror(errno)));
                return;
            }
            for (const auto& n : names)
                act(fd, depth, path, n, whole);
        }
    }

    void act(int fd, int depth, const std::string& path, const std::string& name, bool whole) {
        const std::string where = path.empty() ? name : path + "/" + name;
        struct stat st {};
        if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) note(fmt::format("{}: {}", where, std::strerror(errno)));
            return;
        }
        // Never an entry of another uid: this process removes only what the campaign's own jobs wrote.
        if (st.st_uid != uid_) {
            note(fmt::format("{}: owned by uid {}, not the campaign's", where, st.st_uid));
            return;
        }
        if (S_ISDIR(st.st_mode)) {
            if (st.st_dev != dev_) {
                note(where + ": on another file system");
                return;
            }
            if (depth + 1 >= kMaxDepth) {
                hoist(fd, name, where);
                return;
            }
            UniqueFd child(
                ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
            struct stat opened {};
            if (!child || ::fstat(child.get(), &opened) != 0 || opened.st_ino != st.st_ino ||
                opened.st_dev != st.st_dev) {
                if (errno != ENOENT) note(where + ": replaced while it was read");
                return;
            }
            empty(std::move(child), depth + 1, where, whole);
            if (::unlinkat(fd, name.c_str(), AT_REMOVEDIR) == 0)
                ++out_.entries;
            else if (errno != ENOTEMPTY && errno != EEXIST && errno != ENOENT)
                note(fmt::format("{}: {}", where, std::strerror(errno)));
            return;
        }
        if (!whole && keep(st)) return;
        // A symlink is removed as a link: its target, wherever it points, is never touched.
        if (::unlinkat(fd, name.c_str(), 0) == 0) {
            ++out_.entries;
            if (S_ISREG(st.st_mode)) out_.bytes += static_cast<std::uint64_t>(st.st_size);
        } else if (errno != ENOENT) {
            note(fmt::format("{}: {}", where, std::strerror(errno)));
        }
    }

    // A directory kMaxDepth levels down: moved up into the trial directory under a name of its own and
    // removed whole from there, so no walk holds more than kMaxDepth descriptors. Never out of the trial
    // directory: both ends are named relative to descriptors inside it.
    void hoist(int fd, const std::string& name, const std::string& where) {
        for (int tries = 0; tries < 64; ++tries) {
            const std::string up = fmt::format(".infrarsi-nested-{}", hoists_++);
            if (::renameat2(fd, name.c_str(), top_, up.c_str(), RENAME_NOREPLACE) == 0) {
                hoisted_.push_back(up);
                hoisted_names_.insert(up);
                return;
            }
            if (errno != EEXIST) break;
        }
        note(fmt::format("{}: nested more than {} levels deep and not moved up: {}", where, kMaxDepth,
                         std::strerror(errno)));
    }

    int top_;
    dev_t dev_;
    uid_t uid_;
    contract::KeepJobFiles mode_;
    std::uint64_t kept_bytes_ = 0;
    std::uint64_t hoists_ = 0;
    std::deque<std::string> hoisted_;
    std::set<std::string> hoisted_names_;
    RemovedJobFiles out_;
};

} // namespace

bool is_wrapper_file(const std::string& name) {
    return name == "result.json" || name == "log.txt" || name == "log.txt.times";
}

RemovedJobFiles remove_job_files(const fs::path& campaign, const fs::path& trial_dir,
                                 contract::KeepJobFiles mode) {
    if (mode == contract::KeepJobFiles::All) return {};
    const std::string where = (campaign / trial_dir).string();
    if (trial_dir.empty() || trial_dir.is_absolute())
        throw Error("not a trial directory relative to its campaign", where, "batches/<batch>/<index>");
    UniqueFd dir(::open(campaign.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir) throw Error(fmt::format("cannot open the campaign directory: {}", std::strerror(errno)), where);
    struct stat st {};
    if (::fstat(dir.get(), &st) != 0) throw Error(fmt::format("fstat: {}", std::strerror(errno)), where);
    const dev_t dev = st.st_dev;
    // One component at a time, none through a symlink, none onto another file system.
    for (const auto& part : trial_dir) {
        const std::string p = part.string();
        if (p.empty() || p == "." || p == "..")
            throw Error("not a trial directory relative to its campaign", where, "batches/<batch>/<index>");
        UniqueFd next(::openat(dir.get(), p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next)
            throw Error(fmt::format("cannot open {} as a directory: {}", p, std::strerror(errno)), where);
        if (::fstat(next.get(), &st) != 0) throw Error(fmt::format("fstat: {}", std::strerror(errno)), where);
        if (st.st_dev != dev) throw Error(p + " is on another file system than its campaign", where);
        dir = std::move(next);
    }
    if (st.st_uid != ::geteuid())
        throw Error(fmt::format("the trial directory is owned by uid {}, not the campaign's {}", st.st_uid,
                                ::geteuid()),
                    where);
    return Walk(dir.get(), dev, mode).run();
}

} // namespace infrarsi::trial
