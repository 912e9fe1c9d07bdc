#include "campaign/daemon.hpp"

#include "campaign/campaign_lock.hpp"
#include "campaign/tune_intake.hpp"
#include "util/error.hpp"

#include <fmt/core.h>

#include <map>
#include <set>
#include <thread>
#include <unistd.h>

namespace infrarsi::campaign {
namespace {

// Takes the spool's new tune requests. Each thing is said once: a request left for another user's daemon, or
// one the daemon may not move (started, then seen as started at every later scan), comes back at every scan.
void take_tune_requests(const DaemonOptions& o, std::set<std::string>& said) {
    const auto intake = scan_tune_requests(o.run.spool, o.root, ::geteuid());
    auto say = [&](const std::string& key, const std::string& line) {
        if (!said.insert(key).second) return;
        fmt::print(stderr, "infrarsid: {}\n", line);
        std::fflush(stderr);
    };
    if (!intake.problem.empty()) say(intake.problem, "tune requests: " + intake.problem);
    for (const auto& h : intake.requests)
        say(h.moved || h.move_error.empty() ? describe(h) : h.file + " stays: " + h.move_error, describe(h));
}

} // namespace

int run_daemon(const DaemonOptions& o, const std::atomic<bool>& stop) {
    std::set<std::filesystem::path> failed;
    std::set<std::string> said;
    // Each campaign's lock, taken at first sight and held for the daemon's life: no `infrarsi run` drives
    // one of them beside us. One held by another process is skipped (and said once) until it is free.
    std::map<std::filesystem::path, CampaignLock> locks;
    RunOptions ro = o.run;
    ro.stop = &stop;
    while (!stop) {
        if (!o.run.spool.empty() && !o.root.empty()) take_tune_requests(o, said);
        std::vector<std::filesystem::path> dirs = o.campaigns;
        if (!o.root.empty() && std::filesystem::is_directory(o.root))
            for (const auto& e : std::filesystem::directory_iterator(o.root))
                if (std::filesystem::exists(e.path() / "campaign.db")) dirs.push_back(e.path());
        int open = 0;
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
                Campaign c(d);
                if (c.finished()) continue;
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
        if (o.once && open == 0) break;
        for (int i = 0; i < o.idle.count() && !stop; ++i)
            std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    return static_cast<int>(failed.size());
}

} // namespace infrarsi::campaign
