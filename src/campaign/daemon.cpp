#include "campaign/daemon.hpp"

#include "util/error.hpp"

#include <fmt/core.h>

#include <set>
#include <thread>

namespace infrarsi::campaign {

int run_daemon(const DaemonOptions& o, const std::atomic<bool>& stop) {
    std::set<std::filesystem::path> failed;
    RunOptions ro = o.run;
    ro.stop = &stop;
    while (!stop) {
        std::vector<std::filesystem::path> dirs = o.campaigns;
        if (!o.root.empty() && std::filesystem::is_directory(o.root))
            for (const auto& e : std::filesystem::directory_iterator(o.root))
                if (std::filesystem::exists(e.path() / "campaign.db")) dirs.push_back(e.path());
        int open = 0;
        for (const auto& d : dirs) {
            if (stop) break;
            if (failed.count(d)) continue;
            try {
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
            }
        }
        if (o.once && open == 0) break;
        for (int i = 0; i < o.idle.count() && !stop; ++i)
            std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    return static_cast<int>(failed.size());
}

} // namespace infrarsi::campaign
