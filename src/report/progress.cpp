#include "report/progress.hpp"

#include "report/report.hpp"

#include <fmt/core.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sys/ioctl.h>
#include <thread>
#include <unistd.h>

namespace infrarsi::report {

using nlohmann::json;

namespace {

double monotonic_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string duration(double s) {
    if (!(s >= 0)) return "?";
    const long t = static_cast<long>(s + 0.5);
    if (t < 60) return fmt::format("{}s", t);
    if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
    return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
}

// A number of the status, or `otherwise` when it has none there (null before the doctor, say).
double number(const json& j, const char* key, double otherwise = 0) {
    return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : otherwise;
}
std::string text(const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

std::size_t terminal_width(std::FILE* f) {
    winsize ws{};
    if (::ioctl(::fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    return 80;
}

} // namespace

std::string progress_line(const json& j, double since_s, std::size_t width) {
    std::string o = text(j, "state");
    if (j.contains("batch") && j["batch"].is_object()) {
        const auto& b = j["batch"];
        o += fmt::format(" | batch {:.0f} ({}, {:.0f} trials{})", number(b, "id"), text(b, "kind"),
                         number(b, "trials"), text(b, "state") == "finished" ? ", done" : "");
    }
    const json trials = j.value("trials", json::object());
    o += fmt::format(" | trials {:.0f}/{:.0f}", number(trials, "used"), number(trials, "budget"));
    std::string by;
    const json outcomes = j.value("search_outcomes", json::object());
    for (const auto& [k, v] : outcomes.items())
        if (v.is_number()) by += fmt::format("{}{}={}", by.empty() ? "" : " ", k, v.get<int>());
    if (!by.empty()) o += " (" + by + ")";
    if (number(j, "running") > 0) o += fmt::format(", {:.0f} running", number(j, "running"));
    const json best = j.value("best", json::object());
    if (number(best, "step_s") > 0) {
        o += fmt::format(" | best {:.4g} s", number(best, "step_s"));
        if (number(best, "speedup_vs_baseline") > 0)
            o += fmt::format(" ({:.2f}x)", number(best, "speedup_vs_baseline"));
    }
    o += " | " + duration(number(j, "wall_s") + since_s);
    if (j.contains("estimate_left_s") && j["estimate_left_s"].is_number()) {
        const double left = std::max(0.0, j["estimate_left_s"].get<double>() - since_s);
        o += fmt::format(" elapsed, ~{} left ({})", duration(left), text(j, "estimate_basis"));
    } else {
        o += " elapsed";
    }
    if (width > 0 && o.size() > width) o = o.substr(0, width > 3 ? width - 3 : width) + "...";
    return o;
}

bool is_live_terminal(std::FILE* f) {
    const char* term = std::getenv("TERM");
    return ::isatty(::fileno(f)) && !(term && std::strcmp(term, "dumb") == 0);
}

LiveLine::LiveLine(std::FILE* out) : out_(out) {
    thread_ = std::thread([this] {
        std::unique_lock lk(mu_);
        while (!stop_) {
            if (!status_.is_null()) draw_locked();
            cv_.wait_for(lk, std::chrono::seconds(1));
        }
    });
}

LiveLine::~LiveLine() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
        if (drawn_) std::fputs("\r\033[K", out_);
        std::fflush(out_);
    }
    cv_.notify_all();
    thread_.join();
}

void LiveLine::draw_locked() {
    const auto line = progress_line(status_, monotonic_s() - snapshot_at_, terminal_width(out_) - 1);
    std::fputs(("\r\033[K" + line).c_str(), out_);
    std::fflush(out_);
    drawn_ = true;
}

void LiveLine::update(json status) {
    std::lock_guard lk(mu_);
    status_ = std::move(status);
    snapshot_at_ = monotonic_s();
    draw_locked();
}

void LiveLine::event(const std::string& line) {
    std::lock_guard lk(mu_);
    std::fputs(((drawn_ ? "\r\033[K" : "") + line + "\n").c_str(), out_);
    drawn_ = false;
    if (!status_.is_null()) draw_locked();
    std::fflush(out_);
}

bool watch(campaign::Campaign& c, const std::atomic<bool>& stop, std::chrono::milliseconds poll) {
    std::optional<LiveLine> live;
    if (is_live_terminal(stdout)) live.emplace(stdout);
    double last = -1;
    json j;
    for (;;) {
        j = status(c);
        for (const auto& [t, msg] : c.store().events(last < 0 ? 8 : 1000)) {
            if (t <= last) continue;
            last = t;
            if (live)
                live->event("infrarsi: " + msg);
            else
                fmt::print("infrarsi: {}\n", msg);
        }
        if (live) live->update(j);
        std::fflush(stdout);
        if (j.value("state", "") == "done") break;
        for (auto waited = std::chrono::milliseconds(0); waited < poll && !stop;
             waited += std::chrono::milliseconds(50))
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (stop) break;
    }
    live.reset();
    fmt::print("{}\n", progress_line(j));
    return !stop;
}

} // namespace infrarsi::report
