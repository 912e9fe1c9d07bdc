#include "trial/memory_peak.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <charconv>
#include <sstream>

namespace infrarsi::trial {

namespace fs = std::filesystem;

namespace {

// The path up to and including its last `job_<digits>` component; nullopt without one.
std::optional<fs::path> job_prefix(const std::string& path) {
    fs::path out, job;
    for (const auto& part : fs::path(path)) {
        out /= part;
        const auto name = part.string();
        if (name.size() > 4 && name.rfind("job_", 0) == 0 &&
            name.find_first_not_of("0123456789", 4) == std::string::npos)
            job = out;
    }
    if (job.empty()) return std::nullopt;
    return job;
}

} // namespace

std::optional<fs::path> job_cgroup_dir(const std::string& proc_cgroup, const fs::path& root) {
    std::istringstream in(proc_cgroup);
    std::string line;
    std::optional<fs::path> v2;
    while (std::getline(in, line)) {
        // hierarchy-id:controllers:path
        const auto a = line.find(':');
        const auto b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (path.empty() || path[0] != '/') continue;
        const auto job = job_prefix(path);
        if (!job) continue;
        std::istringstream cs(controllers);
        std::string c;
        while (std::getline(cs, c, ','))
            if (c == "memory") return root / "memory" / job->relative_path(); // v1 wins: it enforces
        if (controllers.empty()) v2 = root / job->relative_path();
    }
    return v2;
}

std::optional<double> cgroup_peak_bytes(const fs::path& dir) {
    for (const char* name : {"memory.max_usage_in_bytes", "memory.peak"}) {
        std::string text;
        try {
            text = read_regular_file((dir / name).string(), {.max_bytes = 4096, .follow_symlink = false});
        } catch (const Error&) {
            continue;
        }
        while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
            text.pop_back();
        unsigned long long v = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && !text.empty())
            return static_cast<double>(v);
    }
    return std::nullopt;
}

std::optional<double> job_cgroup_peak_bytes() {
    std::string text;
    try {
        text = read_regular_file("/proc/self/cgroup", {.max_bytes = 64u << 10, .follow_symlink = true});
    } catch (const Error&) {
        return std::nullopt;
    }
    const auto dir = job_cgroup_dir(text, "/sys/fs/cgroup");
    return dir ? cgroup_peak_bytes(*dir) : std::nullopt;
}

} // namespace infrarsi::trial
