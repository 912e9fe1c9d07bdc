#pragma once
// Progress while a campaign runs. On a terminal, one live status line (stage, batch, search trials used of
// the budget by outcome, best so far and its speed-up, elapsed, an estimate of what is left), redrawn in
// place with the campaign's events printed above it; elsewhere (a pipe, a log file) one line per event, as
// before. `infrarsi run` feeds it from the campaign's events; `infrarsi status --watch` polls the store of a
// campaign another process (a daemon) drives.
#include "campaign/campaign.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace infrarsi::report {

// The status line from report::status's JSON, `since_s` seconds after that JSON was made (the elapsed time
// and the estimate move on between snapshots). At most `width` characters (0: no limit).
std::string progress_line(const nlohmann::json& status, double since_s = 0, std::size_t width = 0);

// Whether `f` is a terminal that understands carriage return and "erase line" (not TERM=dumb).
bool is_live_terminal(std::FILE* f);

// The live line on a terminal: a thread redraws it every second from the latest snapshot.
class LiveLine {
  public:
    explicit LiveLine(std::FILE* out);
    ~LiveLine(); // erases the line and stops the thread
    LiveLine(const LiveLine&) = delete;
    LiveLine& operator=(const LiveLine&) = delete;

    void update(nlohmann::json status);  // a new snapshot (report::status)
    void event(const std::string& line); // printed above the status line

  private:
    void draw_locked();
    std::FILE* out_;
    std::mutex mu_;
    std::condition_variable cv_;
    nlohmann::json status_;
    double snapshot_at_ = 0; // monotonic seconds
    bool drawn_ = false, stop_ = false;
    std::thread thread_;
};

// `infrarsi status --watch`: follows a campaign another process drives, printing its events as they are
// logged (and, on a terminal, the live line under them) until it is done (true) or `stop` is set (false).
bool watch(campaign::Campaign& c, const std::atomic<bool>& stop,
           std::chrono::milliseconds poll = std::chrono::milliseconds(1000));

} // namespace infrarsi::report
