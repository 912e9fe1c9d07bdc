#include "campaign/daemon.hpp"

#include "bank/experience_bank.hpp"
#include "campaign/campaign_lock.hpp"
#include "campaign/tune_intake.hpp"
#include "contract/contract.hpp"
#include "store/campaign_store.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/privilege.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <memory>
#include <poll.h>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace infrarsi::campaign {
namespace {

namespace fs = std::filesystem;

void say(const std::string& line) {
    fmt::print(stderr, "infrarsid: {}\n", line);
    std::fflush(stderr);
}

// Takes the spool's new tune requests. Each thing is said once: a request left for another user's daemon, or
// one the daemon may not move (started, then seen as started at every later scan), comes back at every scan.
void take_tune_requests(const DaemonOptions& o, std::set<std::string>& said) {
    const auto intake = scan_tune_requests(o.run.spool, o.root, ::geteuid());
    auto say_once = [&](const std::string& key, const std::string& line) {
        if (said.insert(key).second) say(line);
    };
    if (!intake.problem.empty()) say_once(intake.problem, "tune requests: " + intake.problem);
    for (const auto& h : intake.requests)
        say_once(h.moved || h.move_error.empty() ? describe(h) : h.file + " stays: " + h.move_error,
                 describe(h));
}

// A root daemon's workers: each directory a user controls (path_control) is driven by a child process that
// dropped to that user and runs this daemon's loop on that directory alone; root never opens it.
class UserWorkers {
  public:
    explicit UserWorkers(const std::atomic<bool>& stop) : stop_(stop) {}
    ~UserWorkers() { stop_all(); }

    // Starts a worker as `uid` on `dir` unless one runs (with --once: unless one ran): `u` is what it drives,
    // and with `self` the worker adds `dir` itself as a campaign when it holds campaign.db (looked for once
    // it is the user, as root does not look inside a user's directory).
    void start(const fs::path& dir, uid_t uid, DaemonOptions u, bool self, std::set<std::string>& said) {
        if (running_.count(dir) || (u.once && started_.count(dir))) return;
        const auto account = lookup_account(uid);
        if (!account) {
            if (said.insert("no-account:" + dir.string()).second)
                say(fmt::format("{}: its owner uid {} has no passwd entry; not driven", dir.string(), uid));
            return;
        }
        u.take_requests = false;
        // The worker's stop: the end of a pipe from this process, closed by stop_all() or by this process's
        // death (even SIGKILL). Root needs no CAP_KILL to stop a user's process this way.
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
        UniqueFd from_parent(fds[0]), to_worker(fds[1]);
        const auto& stop = stop_;
        const pid_t pid = spawn_as(*account, [this, u, dir, self, &stop, &from_parent, &to_worker]() mutable {
            // Our copies of every worker's pipe to it would keep them open: only our own read end stays.
            to_worker.reset();
            for (auto& [other, w] : running_)
                w.to_worker.reset();
            // Shared with the watcher, which may outlive this call by the moment before _exit.
            auto worker_stop = std::make_shared<std::atomic<bool>>(false);
            std::thread([worker_stop, &stop, fd = from_parent.release()] {
                // Ends at EOF (the parent closed its end or died) or at this worker's own SIGTERM.
                for (char c = 0;;) {
                    pollfd p{fd, POLLIN, 0};
                    const int n = ::poll(&p, 1, 200);
                    if (stop || (n > 0 && ::read(fd, &c, 1) <= 0) || (n < 0 && errno != EINTR)) break;
                }
                *worker_stop = true;
            }).detach();
            std::error_code ec;
            if (self && fs::exists(dir / "campaign.db", ec)) u.campaigns.push_back(dir);
            return run_daemon(u, *worker_stop) == 0 ? 0 : 1;
        });
        running_[dir] = Worker{pid, std::move(to_worker)};
        started_.insert(dir);
        say(fmt::format("campaigns of {} under {}: driven as uid {}", account->name, dir.string(),
                        account->uid));
    }

    // Reaps the workers that ended; returns how many run.
    std::size_t poll() {
        for (auto it = running_.begin(); it != running_.end();) {
            int st = 0;
            const pid_t r = ::waitpid(it->second.pid, &st, WNOHANG);
            if (r == 0 || (r < 0 && errno == EINTR)) {
                ++it;
                continue;
            }
            if (r > 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
                ++failed_;
                say(fmt::format("the worker for {} ended with {} {}", it->first.string(),
                                WIFSIGNALED(st) ? "signal" : "status",
                                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st)));
            }
            it = running_.erase(it);
        }
        return running_.size();
    }
    int failed() const { return failed_; }

  private:
    void stop_all() {
        for (auto& [dir, w] : running_)
            w.to_worker.reset(); // EOF: each worker stops at its next safe point
        for (const auto& [dir, w] : running_) {
            int st = 0;
            while (::waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {
            }
        }
        running_.clear();
    }

    struct Worker {
        pid_t pid = -1;
        UniqueFd to_worker;
    };
    const std::atomic<bool>& stop_;
    std::map<fs::path, Worker> running_;
    std::set<fs::path> started_;
    int failed_ = 0;
};

bool has_store(const fs::path& dir) {
    struct stat st {};
    return ::lstat((dir / "campaign.db").c_str(), &st) == 0;
}

// What a root daemon drives itself: the campaigns only root can change (root_campaign_problem). Each
// directory a user controls goes to a worker as that user; one that no one user controls is driven by no
// one. Each refusal is said once.
// What a worker drives for a user's directory `d` under the root. Without a bank named (--bank,
// INFRARSI_BANK), the user's experience bank is d/bank.sqlite, written as the user: not root's (every user's
// findings in one file that any of them could write), not the user's home (the unit's homes are read-only).
DaemonOptions for_user_directory(const DaemonOptions& o, const fs::path& d) {
    DaemonOptions u = o;
    u.campaigns.clear();
    u.root = d;
    const char* site_bank = std::getenv("INFRARSI_BANK");
    if (u.default_bank && u.run.bank.empty() && !(site_bank && *site_bank))
        u.run.bank = (d / "bank.sqlite").string();
    return u;
}

std::vector<fs::path> sort_for_root(const DaemonOptions& o, UserWorkers& workers,
                                    std::set<std::string>& said) {
    std::vector<fs::path> own;
    auto refuse = [&](const fs::path& d, const std::string& why) {
        if (said.insert("refused " + d.string()).second)
            say(fmt::format("{}: not driven: {}", d.string(), why));
    };
    auto take = [&](const fs::path& d) {
        if (auto why = root_campaign_problem(d); !why.empty())
            refuse(d, why);
        else
            own.push_back(d);
    };
    for (const auto& c : o.campaigns) {
        const auto d = fs::absolute(c).lexically_normal();
        const auto pc = path_control(d);
        if (!pc.why.empty()) {
            refuse(d, pc.why);
        } else if (pc.uid != 0) {
            DaemonOptions u = o;
            u.campaigns = {d};
            u.root.clear();
            workers.start(d, pc.uid, u, false, said);
        } else {
            take(d);
        }
    }
    if (o.root.empty()) return own;
    const auto root = fs::absolute(o.root).lexically_normal();
    const auto pc = path_control(root);
    if (!pc.why.empty()) {
        refuse(root, pc.why);
        return own;
    }
    if (pc.uid != 0) { // all of it is that user's
        workers.start(root, pc.uid, for_user_directory(o, root), false, said);
        return own;
    }
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
        const auto d = it->path();
        const auto entry = path_control(d);
        if (!entry.why.empty()) {
            // Only said of a campaign: a root-owned directory others may write is looked at, never opened.
            if (has_store(d)) refuse(d, entry.why);
        } else if (entry.uid != 0) {
            workers.start(d, entry.uid, for_user_directory(o, d), true, said);
        } else if (has_store(d)) {
            take(d);
        }
    }
    return own;
}

} // namespace

std::string root_campaign_problem(const fs::path& dir) {
    const auto pc = path_control(dir);
    if (!pc.why.empty()) return pc.why;
    if (pc.uid != 0) return fmt::format("{} is controlled by uid {}, not root", dir.string(), pc.uid);
    struct stat st {};
    const auto db = dir / "campaign.db";
    if (::lstat(db.c_str(), &st) != 0) return fmt::format("{}: {}", db.string(), std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return db.string() + " is not a regular file";
    // Every entry directly in it: one a user owns, or others may write, is content root would act on.
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const auto p = it->path();
        if (::lstat(p.c_str(), &st) != 0) continue; // gone since listed
        if (st.st_uid != 0)
            return fmt::format("{} is owned by uid {}: a campaign a user can change is not driven as root",
                               p.string(), st.st_uid);
        if (!S_ISLNK(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH)))
            return fmt::format("{} is writable by others (mode {:o})", p.string(), st.st_mode & 07777);
    }
    if (ec) return fmt::format("cannot list {}: {}", dir.string(), ec.message());
    // What it reads and builds as root outside itself: the contract, the workload's tree, its batch script
    // and the patch catalog must be root's alone too (checked before the contract file is read).
    try {
        store::CampaignStore store(db.string());
        const auto file = store.meta("contract");
        if (!file) return db.string() + " names no contract";
        const auto named_problem = [](const fs::path& p) -> std::string {
            const auto pc = path_control(p);
            if (pc.root_only()) return {};
            return fmt::format("it reads {} as root, which {}", p.string(),
                               pc.why.empty() ? fmt::format("uid {} controls", pc.uid) : pc.why);
        };
        if (auto why = named_problem(*file); !why.empty()) return why;
        const auto text = store.meta("contract_text");
        const auto c = text ? contract::load_text(*text, *file) : contract::load(*file);
        for (const auto& p : {c.workload.source, c.workload.sbatch_script, c.patch_catalog}) {
            if (p.empty()) continue;
            if (auto why = named_problem(p.is_absolute() ? p : c.dir / p); !why.empty()) return why;
        }
    } catch (const std::exception& e) {
        return fmt::format("its contract cannot be checked: {}", e.what());
    }
    return {};
}

namespace {

// The campaigns a daemon not run as root drives: those it was given, and each under its root.
std::vector<fs::path> campaigns_to_drive(const DaemonOptions& o) {
    std::vector<fs::path> dirs = o.campaigns;
    if (!o.root.empty() && fs::is_directory(o.root))
        for (const auto& e : fs::directory_iterator(o.root))
            if (fs::exists(e.path() / "campaign.db")) dirs.push_back(e.path());
    return dirs;
}

// Each campaign's lock, taken at first sight and held for the daemon's life: no `infrarsi run` drives one of
// them beside us. False for one held by another process, skipped (and said once) until it is free.
bool hold_lock(std::map<fs::path, CampaignLock>& locks, const fs::path& d, std::set<std::string>& said) {
    if (locks.count(d)) return true;
    std::string holder;
    auto lock = CampaignLock::try_take(d, &holder);
    if (!lock) {
        if (said.insert("locked " + d.string()).second)
            fmt::print(stderr, "infrarsid: campaign {} is in use by {}; skipped while it is\n", d.string(),
                       holder);
        return false;
    }
    locks.emplace(d, std::move(*lock));
    return true;
}

// A finished campaign is left alone, also once the user has changed its tree or contract (applying its
// result): only one that still runs must find its inputs as at init. A paused one (too noisy to promote a
// real gain) waits for `infrarsi run --accept-noise` (or a daemon started with it). A cancelled one
// (`infrarsi cancel`) is never driven again. True when left alone.
bool left_alone(const fs::path& d, const RunOptions& ro, std::set<std::string>& said) {
    Campaign ro_view(d, Campaign::Open::read_only);
    if (!ro_view.finished() && !ro_view.cancelled() && !(ro_view.paused() && !ro.accept_noise)) return false;
    // Its findings into this daemon's bank if they are in none yet, as `infrarsi run` on a finished campaign
    // records them: a campaign is finished for good, so now or never.
    if (ro_view.finished()) ro_view.record_in_bank(ro);
    if (const auto why = ro_view.cancelled(); why && said.insert("cancelled " + d.string()).second)
        fmt::print("infrarsid: campaign {} is cancelled: {}\n", d.string(), *why);
    else if (const auto why = ro_view.paused(); why && said.insert("paused " + d.string()).second)
        fmt::print("infrarsid: campaign {} is paused: {}\n", d.string(), *why);
    return true;
}

// Drives one campaign in this process; true when it was opened (it ran, or stopped with an error). An error
// stops that campaign only (into `failed`); the daemon keeps the others going.
bool drive_campaign(const fs::path& d, const RunOptions& ro, std::map<fs::path, CampaignLock>& locks,
                    std::set<std::string>& said, std::set<fs::path>& failed) {
    bool opened = false;
    try {
        if (!hold_lock(locks, d, said) || left_alone(d, ro, said)) return false;
        Campaign c(d);
        opened = true;
        fmt::print("infrarsid: running campaign {}\n", d.string());
        std::fflush(stdout);
        c.run(ro);
        return true;
    } catch (const Error& e) {
        fmt::print(stderr, "infrarsid: campaign {} stopped with an error: {}\n", d.string(), e.what());
    } catch (const std::exception& e) {
        // A bug met by one campaign stops that campaign only; the daemon keeps the others going.
        fmt::print(stderr, "infrarsid: campaign {} stopped with an internal error (please report it): {}\n",
                   d.string(), e.what());
    } catch (...) {
        fmt::print(stderr, "infrarsid: campaign {} stopped with an unknown internal error\n", d.string());
    }
    failed.insert(d);
    return opened;
}

} // namespace

int run_daemon(const DaemonOptions& o, const std::atomic<bool>& stop) {
    std::set<fs::path> failed;
    std::set<std::string> said;
    std::map<fs::path, CampaignLock> locks; // held for the daemon's life (hold_lock)
    RunOptions ro = o.run;
    ro.stop = &stop;
    if (ro.bank.empty() && o.default_bank) ro.bank = bank::default_bank_path();
    // As root, no campaign a user controls is opened in this process (sort_for_root).
    const bool as_root = ::geteuid() == 0;
    std::unique_ptr<UserWorkers> workers;
    if (as_root) workers = std::make_unique<UserWorkers>(stop);
    while (!stop) {
        if (o.take_requests && !o.run.spool.empty() && !o.root.empty()) take_tune_requests(o, said);
        const auto dirs = as_root ? sort_for_root(o, *workers, said) : campaigns_to_drive(o);
        std::size_t open = 0;
        for (const auto& d : dirs) {
            if (stop) break;
            if (!failed.count(d) && drive_campaign(d, ro, locks, said, failed)) ++open;
        }
        const std::size_t by_workers = workers && !stop ? workers->poll() : 0;
        open += by_workers;
        if (o.once && open == 0) break;
        // Waiting for users' workers only: not a busy loop, whatever --idle says.
        if (by_workers > 0 && by_workers == open && o.idle.count() == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        for (int i = 0; i < o.idle.count() && !stop; ++i)
            std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    const int worker_failures = workers ? workers->failed() : 0;
    workers.reset(); // stops the users' workers (SIGTERM) and waits for them
    return static_cast<int>(failed.size()) + worker_failures;
}

} // namespace infrarsi::campaign
