#include "trial/memory_peak.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <charconv>
#include <climits>
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

CgroupMemory read_cgroup_memory(const fs::path& dir) {
    CgroupMemory m;
    const auto text = [&](const char* name) -> std::optional<std::string> {
        try {
            return read_regular_file((dir / name).string(), {.max_bytes = 4096, .follow_symlink = false});
        } catch (const Error&) {
            return std::nullopt;
        }
    };
    const auto number = [](std::string t) -> std::optional<unsigned long long> {
        while (!t.empty() && (t.back() == '\n' || t.back() == ' '))
            t.pop_back();
        unsigned long long v = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || end != t.data() + t.size() || t.empty()) return std::nullopt;
        return v;
    };
    // "key value" lines (memory.oom_control, memory.events): the value of `key`, nullopt without it.
    const auto keyed = [&](const std::string& t, std::string_view key) -> std::optional<long long> {
        std::istringstream in(t);
        for (std::string k, v; in >> k >> v;)
            if (k == key)
                if (const auto n = number(v); n && *n <= static_cast<unsigned long long>(LLONG_MAX))
                    return static_cast<long long>(*n);
        return std::nullopt;
    };
    const auto v1_peak = text("memory.max_usage_in_bytes");
    const auto v1_oom = text("memory.oom_control");
    if (v1_peak || v1_oom) {
        m.version = 1;
        if (v1_peak)
            if (const auto n = number(*v1_peak)) m.peak_bytes = static_cast<double>(*n);
        if (v1_oom) m.oom_kills = keyed(*v1_oom, "oom_kill");
    }
    // v2 where v1's files are absent, or v1's peak was junk (a filesystem that is not the kernel's).
    if (!m.peak_bytes)
        if (const auto peak = text("memory.peak")) {
            if (const auto n = number(*peak)) m.peak_bytes = static_cast<double>(*n);
            if (m.version == 0) m.version = 2;
        }
    if (m.version != 1)
        if (const auto events = text("memory.events")) {
            m.version = 2;
            m.oom_kills = keyed(*events, "oom_kill");
        }
    return m;
}

std::optional<double> cgroup_peak_bytes(const fs::path& dir) {
    return read_cgroup_memory(dir).peak_bytes;
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
