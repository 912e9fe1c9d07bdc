#include "campaign/daemon.hpp"

#include "campaign/campaign_lock.hpp"
#include "campaign/tune_intake.hpp"
#include "util/error.hpp"
#include "util/privilege.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <csignal>
#include <map>
#include <memory>
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

// A root daemon's users: every directory under the root that a user owns (made by the tune intake) is driven
// by a worker, a child process that dropped to that user and runs this daemon's loop on that directory alone.
class UserWorkers {
  public:
    UserWorkers(const DaemonOptions& o, const std::atomic<bool>& stop) : o_(o), stop_(stop) {}
    ~UserWorkers() { stop_all(); }

    // Reaps the workers that ended and starts one for each user directory without one (with --once, each
    // directory once). Returns how many are running.
    std::size_t poll(std::set<std::string>& said) {
        reap();
        std::error_code ec;
        for (fs::directory_iterator it(o_.root, ec), end; !ec && it != end; it.increment(ec)) {
            const auto dir = it->path();
            struct stat st {};
            if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid == 0) continue;
            if (running_.count(dir) || (o_.once && started_.count(dir))) continue;
            const auto account = lookup_account(st.st_uid);
            if (!account) {
                if (said.insert("no-account:" + dir.string()).second)
                    say(fmt::format("{}: its owner uid {} has no passwd entry; not driven", dir.string(),
                                    st.st_uid));
                continue;
            }
            DaemonOptions u = o_;
            u.root = dir;
            u.campaigns.clear();
            u.take_requests = false;
            const auto& stop = stop_;
            running_[dir] = spawn_as(*account, [u, &stop] { return run_daemon(u, stop) == 0 ? 0 : 1; });
            started_.insert(dir);
            say(fmt::format("campaigns of {} under {}: driven as uid {}", account->name, dir.string(),
                            account->uid));
        }
        return running_.size();
    }
    int failed() const { return failed_; }

  private:
    void reap() {
        for (auto it = running_.begin(); it != running_.end();) {
            int st = 0;
            const pid_t r = ::waitpid(it->second, &st, WNOHANG);
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
    }
    void stop_all() {
        for (const auto& [dir, pid] : running_)
            ::kill(pid, SIGTERM);
        for (const auto& [dir, pid] : running_) {
            int st = 0;
            while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
        }
        running_.clear();
    }

    const DaemonOptions& o_;
    const std::atomic<bool>& stop_;
    std::map<fs::path, pid_t> running_;
    std::set<fs::path> started_;
    int failed_ = 0;
};

} // namespace

int run_daemon(const DaemonOptions& o, const std::atomic<bool>& stop) {
    std::set<fs::path> failed;
    std::set<std::string> said;
    // Each campaign's lock, taken at first sight and held for the daemon's life: no `infrarsi run` drives
    // one of them beside us. One held by another process is skipped (and said once) until it is free.
    std::map<std::filesystem::path, CampaignLock> locks;
    RunOptions ro = o.run;
    ro.stop = &stop;
    const bool site = ::geteuid() == 0 && o.take_requests && !o.run.spool.empty() && !o.root.empty();
    std::unique_ptr<UserWorkers> workers;
    if (site) workers = std::make_unique<UserWorkers>(o, stop);
    while (!stop) {
        if (o.take_requests && !o.run.spool.empty() && !o.root.empty()) take_tune_requests(o, said);
        std::vector<fs::path> dirs = o.campaigns;
        if (!o.root.empty() && fs::is_directory(o.root))
            for (const auto& e : fs::directory_iterator(o.root))
                if (fs::exists(e.path() / "campaign.db")) dirs.push_back(e.path());
        std::size_t open = 0;
        for (const auto& d : dirs) {
            if (stop) break;
            if (failed.count(d)) continue;
            try {
                if (!locks.count(d)) {
                    std::string holder;
                    auto lock = CampaignLock::try_take(d, &holder);
                    if (!lock) {
                        if (said.insert("locked " + d.string()).second)
                            fmt::print(stderr,
                                       "infrarsid: campaign {} is in use by {}; skipped while it is\n",
                                       d.string(), holder);
                        continue;
                    }
                    locks.emplace(d, std::move(*lock));
                }
                // A finished campaign is left alone, also once the user has changed its tree or contract
                // (applying its result): only one that still runs must find its inputs as at init.
                if (Campaign(d, Campaign::Open::read_only).finished()) continue;
                Campaign c(d);
                ++open;
                fmt::print("infrarsid: running campaign {}\n", d.string());
                std::fflush(stdout);
                c.run(ro);
            } catch (const Error& e) {
                fmt::print(stderr, "infrarsid: campaign {} stopped with an error: {}\n", d.string(),
                           e.what());
                failed.insert(d);
            } catch (const std::exception& e) {
                // A bug met by one campaign stops that campaign only; the daemon keeps the others going.
                fmt::print(stderr,
                           "infrarsid: campaign {} stopped with an internal error (please report it): {}\n",
                           d.string(), e.what());
                failed.insert(d);
            } catch (...) {
                fmt::print(stderr, "infrarsid: campaign {} stopped with an unknown internal error\n",
                           d.string());
                failed.insert(d);
            }
        }
        if (workers && !stop) open += workers->poll(said);
        if (o.once && open == 0) break;
        for (int i = 0; i < o.idle.count() && !stop; ++i)
            std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    const int worker_failures = workers ? workers->failed() : 0;
    workers.reset(); // stops the users' workers (SIGTERM) and waits for them
    return static_cast<int>(failed.size()) + worker_failures;
}

} // namespace infrarsi::campaign
