#include "campaign/tune_intake.hpp"

#include "campaign/campaign.hpp"
#include "trial/tune_request.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/privilege.hpp"
#include "util/safe_directory.hpp"
#include "util/text.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi::campaign {
namespace {

std::string errno_text() {
    return std::strerror(errno);
}

// A user's input file named by a root-written request: a regular file (not a symlink) owned by `uid`.
// Empty when it is; else what it is instead.
std::string check_owned_file(const std::string& what, const std::string& path, std::uint32_t uid) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return fmt::format("{} {}: {}", what, path, errno_text());
    if (S_ISLNK(st.st_mode)) return fmt::format("{} {} is a symlink (expected a regular file)", what, path);
    if (!S_ISREG(st.st_mode)) return fmt::format("{} {} is not a regular file", what, path);
    if (st.st_uid != uid)
        return fmt::format("{} {} is owned by uid {}, not by the request's uid {}", what, path, st.st_uid,
                           uid);
    return {};
}

// A site daemon's root: a directory owned by root that nobody else may write, on a path only root may change
// (users' directories are made in it as root). Made 0755 when missing. Empty when usable; else why not.
std::string check_site_root(const std::filesystem::path& root) {
    const auto abs = std::filesystem::absolute(root).lexically_normal();
    const auto e = safe_directory_problem(abs, {"it", 0, 0755});
    if (e.empty()) return {};
    return fmt::format(
        "a root daemon's --root {} must be owned by root and writable by nobody else, on a path "
        "only root may change: {}",
        abs.string(), e);
}

// <root>/<user>: the user's campaigns under a site daemon, made 0700 and given to the user by root, who never
// opens anything inside it: O_PATH only looks at the directory (and a root without CAP_DAC_OVERRIDE, as the
// unit runs it, could not open a user's 0700 directory anyway). Empty when usable; else why not.
std::string user_directory(const std::filesystem::path& dir, const Account& a) {
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        return fmt::format("cannot create {}: {}", dir.string(), errno_text());
    UniqueFd fd(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return fmt::format("{}: {} (a symlink is not followed)", dir.string(), errno_text());
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return fmt::format("{}: {}", dir.string(), errno_text());
    // Root's (made now, or left by a daemon stopped before it gave it away): 0700 first, while it is root's.
    if (st.st_uid == 0 &&
        (::chmod(dir.c_str(), 0700) != 0 || ::fchownat(fd.get(), "", a.uid, a.gid, AT_EMPTY_PATH) != 0))
        return fmt::format("cannot give {} to {}: {}", dir.string(), a.name, errno_text());
    if (st.st_uid != 0 && st.st_uid != a.uid)
        return fmt::format("{} is owned by uid {}, not by {} (uid {})", dir.string(), st.st_uid, a.name,
                           a.uid);
    return {};
}

// A request file the plugin wrote: a regular file of root's (or of the acting user's, for a spool of its
// own) that no group or other may write. Empty when it is; else why it is no request of the plugin's.
std::string check_request_file(const std::filesystem::path& path, uid_t acting_uid) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return fmt::format("{}: {}", path.string(), errno_text());
    if (!S_ISREG(st.st_mode)) return fmt::format("{} is not a regular file", path.string());
    if (st.st_uid != 0 && st.st_uid != acting_uid)
        return fmt::format("{} is owned by uid {}, not by root: the plugin did not write it", path.string(),
                           st.st_uid);
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return fmt::format("{} is writable by others (mode {:o}): the plugin did not write it", path.string(),
                           st.st_mode & 07777);
    return {};
}

// Renames tune/<file> into tune/<sub>/<stem>.json (and writes <stem>.reason first when refused).
// tune/<sub> is made 0755 when missing, as safe as tune/ (root's or `acting_uid`'s, never a symlink).
void move_request(const std::filesystem::path& tune, const std::string& sub, const std::string& stem,
                  const std::string& reason, uid_t acting_uid, TuneRequestHandled& h) {
    const auto dir = tune / sub;
    const auto abs = std::filesystem::absolute(dir).lexically_normal();
    if (auto e = safe_directory_problem(abs, {abs.string(), acting_uid, 0755}); !e.empty()) {
        h.move_error = e;
        return;
    }
    if (!reason.empty()) {
        const auto path = dir / (stem + ".reason");
        UniqueFd f(
            ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0640));
        if (!f) {
            h.move_error = fmt::format("cannot write {}: {}", path.string(), errno_text());
            return;
        }
        // As private as the request it explains (it names the user's files): its group, not every user.
        struct stat req {};
        if (::geteuid() == 0 && ::lstat((tune / h.file).c_str(), &req) == 0)
            (void)!::fchown(f.get(), -1, req.st_gid);
        ::fchmod(f.get(), 0640);
        try {
            write_all(f.get(), reason + "\n", path.string());
        } catch (const Error& e) {
            h.move_error = e.what();
            return;
        }
    }
    const auto from = tune / h.file, to = dir / (stem + ".json");
    if (::rename(from.c_str(), to.c_str()) != 0) {
        h.move_error = fmt::format("cannot move {} to {}: {}", from.string(), to.string(), errno_text());
        return;
    }
    h.moved = true;
}

// Creates the campaign in a staging directory outside the daemon's view (<root>/.tune-intake/<id>: not a
// direct child, so never driven half-made), records the request in its store, then renames it into place:
// <root>/tune-<id> exists only for a campaign that is complete.
void start_campaign(const trial::TuneRequest& r, const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    const auto staging = dir.parent_path() / ".tune-intake" / std::to_string(r.job_id);
    fs::remove_all(staging); // left by a daemon killed while starting it
    fs::create_directories(staging.parent_path());
    try {
        Campaign::init(r.contract, staging);
        {
            Campaign c(staging);
            auto& s = c.store();
            s.set_meta("tune_job_id", std::to_string(r.job_id));
            s.set_meta("tune_script", r.script);
            s.set_meta("tune_user", r.user);
            s.set_meta("tune_request", trial::to_json(r).dump());
            s.log(fmt::format("campaign started from the tune request of job {} ({}, user {})", r.job_id,
                              r.script.empty() ? "no script file" : r.script, r.user));
        }
        fs::rename(staging, dir);
    } catch (...) {
        std::error_code ec;
        fs::remove_all(staging, ec);
        throw;
    }
}

TuneRequestHandled handle(const std::filesystem::path& tune, const std::string& file,
                          const std::filesystem::path& root, uid_t acting_uid) {
    TuneRequestHandled h;
    h.file = file;
    const std::string stem = file.substr(0, file.size() - 5); // without ".json"
    auto refuse = [&](const std::string& reason) {
        h.action = TuneAction::Refused;
        h.reason = reason;
        move_request(tune, "refused", stem, reason, acting_uid, h);
        return h;
    };
    if (auto e = check_request_file(tune / file, acting_uid); !e.empty()) return refuse(e);
    trial::TuneRequest r;
    try {
        r = trial::read_tune_request(tune / file);
    } catch (const Error& e) {
        return refuse(e.what());
    }
    h.job_id = r.job_id;
    if (stem != std::to_string(r.job_id))
        return refuse(fmt::format("the file is named for job {} but the request is job {}", stem, r.job_id));
    if (acting_uid != 0 && r.uid != acting_uid) {
        h.action = TuneAction::OtherUser;
        h.reason = fmt::format("uid {} ({}), not this daemon's uid {}", r.uid, r.user, acting_uid);
        return h;
    }
    // A root daemon acts for the request's user: in <root>/<user>/, from a child that dropped to that user.
    std::optional<Account> account;
    auto campaigns = root;
    if (acting_uid == 0) {
        if (r.uid == 0) return refuse("a campaign never runs as root, and this request is root's (uid 0)");
        account = lookup_account(r.uid);
        if (!account) return refuse(fmt::format("uid {} has no passwd entry", r.uid));
        campaigns = root / account->name;
        if (auto e = user_directory(campaigns, *account); !e.empty()) return refuse(e);
    }
    const auto dir = campaigns / ("tune-" + std::to_string(r.job_id));
    h.campaign = dir;
    // Started (status 0), found started (kAlreadyStarted), or why not. As the user for a root daemon: root
    // does not even look inside the user's directory.
    constexpr int kAlreadyStarted = 3;
    auto start = [&]() -> AsUser {
        std::error_code ec;
        if (std::filesystem::symlink_status(dir, ec).type() != std::filesystem::file_type::not_found)
            return {kAlreadyStarted, {}};
        if (auto e = check_owned_file("contract", r.contract, r.uid); !e.empty()) return {1, e};
        if (!r.script.empty())
            if (auto e = check_owned_file("script", r.script, r.uid); !e.empty()) return {1, e};
        try {
            start_campaign(r, dir);
        } catch (const std::exception& e) {
            return {1, std::string("the campaign could not be initialized: ") + e.what()};
        }
        return {};
    };
    const AsUser done = account ? run_as_status(*account, start) : start();
    if (done.status == kAlreadyStarted) {
        h.action = TuneAction::AlreadyStarted;
        move_request(tune, "done", stem, {}, acting_uid, h);
        return h;
    }
    if (done.status != 0) {
        h.campaign.clear();
        return refuse(!done.message.empty() ? done.message
                      : account
                          ? fmt::format("starting it as {} ended with status {}", account->name, done.status)
                          : fmt::format("starting it ended with status {}", done.status));
    }
    h.action = TuneAction::Started;
    move_request(tune, "done", stem, {}, acting_uid, h);
    return h;
}

} // namespace

TuneIntake scan_tune_requests(const std::filesystem::path& spool, const std::filesystem::path& root,
                              uid_t acting_uid) {
    namespace fs = std::filesystem;
    TuneIntake out;
    const auto tune = spool / "tune";
    struct stat st {};
    if (::lstat(tune.c_str(), &st) != 0) {
        if (errno != ENOENT) out.problem = fmt::format("{}: {}", tune.string(), errno_text());
        return out;
    }
    // Requests are trusted to say their user only where nobody but root (or this daemon's own user, for a
    // spool of its own) can put files.
    const auto abs = std::filesystem::absolute(tune).lexically_normal();
    if (auto e = safe_directory_problem(abs, {"tune/", acting_uid, {}}); !e.empty()) {
        out.problem = fmt::format("{}: not read: {}", tune.string(), e);
        return out;
    }
    if (acting_uid == 0)
        if (auto e = check_site_root(root); !e.empty()) {
            out.problem = e;
            return out;
        }
    std::vector<std::string> files;
    std::error_code ec;
    for (fs::directory_iterator it(tune, ec), end; !ec && it != end; it.increment(ec)) {
        const auto name = it->path().filename().string();
        if (name.size() > 5 && name.ends_with(".json") && all_digits(name.substr(0, name.size() - 5)))
            files.push_back(name);
    }
    if (ec) {
        out.problem = fmt::format("cannot list {}: {}", tune.string(), ec.message());
        return out;
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        try {
            out.requests.push_back(handle(tune, f, root, acting_uid));
        } catch (
            const std::exception& e) { // a filesystem error of the spool or the root: the next scan retries
            TuneRequestHandled h;
            h.file = f;
            h.reason = std::string("not handled, the next scan retries: ") + e.what();
            h.move_error = "not handled";
            out.requests.push_back(h);
        }
    }
    return out;
}

std::string describe(const TuneRequestHandled& h) {
    std::string s = "tune request " + h.file + ": ";
    switch (h.action) {
    case TuneAction::Started:
        s += "campaign " + h.campaign.string() + " started";
        break;
    case TuneAction::AlreadyStarted:
        s += "campaign " + h.campaign.string() + " was started already";
        break;
    case TuneAction::Refused:
        s += "refused: " + h.reason;
        break;
    case TuneAction::OtherUser:
        s += "left for its user's daemon: " + h.reason;
        break;
    }
    if (h.moved)
        s += h.action == TuneAction::Refused ? " (moved to refused/)" : " (moved to done/)";
    else if (!h.move_error.empty())
        s += "; it stays in tune/: " + h.move_error;
    return s;
}

} // namespace infrarsi::campaign
