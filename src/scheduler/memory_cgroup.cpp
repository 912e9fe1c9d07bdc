#include "scheduler/memory_cgroup.hpp"

#include "trial/memory_peak.hpp"
#include "util/error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace infrarsi::scheduler {
namespace {

std::string read_text(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), {}};
}

// Writes `value` to a control file; false (errno kept in `err`) when the kernel refuses it.
bool write_control(const fs::path& p, const std::string& value, std::string* err = nullptr) {
    std::ofstream out(p);
    if (out) out << value << std::flush;
    if (out) return true;
    if (err) *err = fmt::format("cannot write '{}' to {}: {}", value, p.string(), std::strerror(errno));
    return false;
}

bool has_word(const std::string& text, const std::string& word) {
    std::istringstream in(text);
    for (std::string w; in >> w;)
        if (w == word) return true;
    return false;
}

// The mount point of the first line of /proc/self/mountinfo whose filesystem type and super options (the
// fields after " - ": fstype, source, options) `wanted` accepts; the mount point is the 5th field before it.
std::optional<fs::path>
mount_point(const std::function<bool(const std::string&, const std::string&)>& wanted) {
    std::ifstream in("/proc/self/mountinfo");
    for (std::string line; std::getline(in, line);) {
        const auto dash = line.find(" - ");
        if (dash == std::string::npos) continue;
        std::istringstream after(line.substr(dash + 3));
        std::string type, source, options;
        after >> type >> source >> options;
        if (!wanted(type, options)) continue;
        std::istringstream before(line.substr(0, dash));
        std::string f, mount;
        for (int i = 1; i <= 5 && before >> f; ++i)
            if (i == 5) mount = f;
        if (!mount.empty()) return fs::path(mount);
    }
    return std::nullopt;
}

// The mount point of the unified hierarchy.
std::optional<fs::path> unified_mount() {
    return mount_point([](const std::string& type, const std::string&) { return type == "cgroup2"; });
}

// The mount point of the cgroup v1 hierarchy with the memory controller ("memory" among its super options).
std::optional<fs::path> v1_memory_mount() {
    return mount_point([](const std::string& type, const std::string& options) {
        if (type != "cgroup") return false;
        std::istringstream opts(options);
        for (std::string o; std::getline(opts, o, ',');)
            if (o == "memory") return true;
        return false;
    });
}

// This process's cgroup on the v1 memory hierarchy: the "N:...memory...:/path" line of /proc/self/cgroup.
std::optional<std::string> own_v1_memory_cgroup() {
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);) {
        const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        std::istringstream controllers(line.substr(a + 1, b - a - 1));
        for (std::string c; std::getline(controllers, c, ',');)
            if (c == "memory") return line.substr(b + 1);
    }
    return std::nullopt;
}

// This process's cgroup on the unified hierarchy: the "0::/path" line of /proc/self/cgroup.
std::optional<std::string> own_unified_cgroup() {
    std::ifstream in("/proc/self/cgroup");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("0::", 0) == 0) return line.substr(3);
    return std::nullopt;
}

long long read_number(const fs::path& p) {
    const std::string s = read_text(p);
    try {
        return s.empty() || s.rfind("max", 0) == 0 ? 0 : std::stoll(s);
    } catch (const std::exception&) {
        return 0;
    }
}

} // namespace

std::optional<MemoryCgroups> MemoryCgroups::find(std::string* why) {
    std::string v2_why;
    if (auto v2 = find_v2(&v2_why)) return v2;
    // A v1/v2 hybrid (the memory controller on v1, as on many hosts and in Slurm's own cgroup/v1): a child of
    // this process's memory cgroup, where this process may make one (root, or a delegated directory).
    const auto fail = [&](std::string reason) {
        if (why) *why = v2_why + "; " + reason;
        return std::nullopt;
    };
    const auto mount = v1_memory_mount();
    if (!mount) return fail("no cgroup v1 memory hierarchy is mounted");
    const auto own = own_v1_memory_cgroup();
    if (!own) return fail("this process has no cgroup v1 memory cgroup");
    fs::path parent = (*mount / fs::path(*own).relative_path()).lexically_normal();
    if (parent.filename().empty()) parent = parent.parent_path();
    for (const fs::path& p : {parent, parent / "cgroup.procs"})
        if (::access(p.c_str(), W_OK) != 0)
            return fail(fmt::format("{} is not writable: {}", p.string(), std::strerror(errno)));
    return MemoryCgroups(parent, 1);
}

std::optional<MemoryCgroups> MemoryCgroups::find_v2(std::string* why) {
    const auto fail = [&](std::string reason) {
        if (why) *why = std::move(reason);
        return std::nullopt;
    };
    const auto mount = unified_mount();
    if (!mount) return fail("no cgroup v2 (unified) hierarchy is mounted");
    const auto own = own_unified_cgroup();
    if (!own) return fail("this process has no cgroup v2");
    fs::path parent = (*mount / fs::path(*own).relative_path()).lexically_normal();
    if (parent.filename().empty()) parent = parent.parent_path(); // "/sys/fs/cgroup/" for the root cgroup
    if (!has_word(read_text(parent / "cgroup.controllers"), "memory"))
        return fail(fmt::format("the memory controller is not available in {} (cgroup v1 memory, or not "
                                "delegated)",
                                parent.string()));
    if (!has_word(read_text(parent / "cgroup.subtree_control"), "memory")) {
        std::string err;
        if (!write_control(parent / "cgroup.subtree_control", "+memory", &err))
            return fail(err + " (a cgroup with processes of its own cannot enable it for children)");
    }
    // Making a child needs the directory; moving a trial into it, its cgroup.procs (the common ancestor's).
    for (const fs::path& p : {parent, parent / "cgroup.procs"})
        if (::access(p.c_str(), W_OK) != 0)
            return fail(fmt::format("{} is not writable: {}", p.string(), std::strerror(errno)));
    return MemoryCgroups(parent, 2);
}

fs::path MemoryCgroups::create(const std::string& name, long long limit_bytes) const {
    const fs::path cg = parent_ / name;
    remove(cg); // a predecessor's, left by an orchestrator that died
    std::error_code ec;
    if (!fs::create_directory(cg, ec) && ec)
        throw Error("cannot create the trial's cgroup: " + ec.message(), cg.string());
    std::string err;
    if (version_ == 1) {
        // memsw (memory + swap) after the memory limit, which it may not be below; not every kernel has it.
        if (!write_control(cg / "memory.limit_in_bytes", std::to_string(limit_bytes), &err)) {
            remove(cg);
            throw Error(err, cg.string(), "a cgroup whose memory.limit_in_bytes this process may set");
        }
        if (fs::exists(cg / "memory.memsw.limit_in_bytes"))
            write_control(cg / "memory.memsw.limit_in_bytes", std::to_string(limit_bytes));
        write_control(cg / "memory.swappiness", "0");
        return cg;
    }
    if (!write_control(cg / "memory.max", std::to_string(limit_bytes), &err)) {
        remove(cg);
        throw Error(err, cg.string(), "a cgroup whose memory.max this process may set");
    }
    // Swap would let a trial exceed its limit slowly instead of being stopped; not every kernel accounts it.
    if (fs::exists(cg / "memory.swap.max")) write_control(cg / "memory.swap.max", "0");
    // One OOM kill ends the whole trial, as under Slurm, not one process of it.
    if (fs::exists(cg / "memory.oom.group")) write_control(cg / "memory.oom.group", "1");
    return cg;
}

MemoryCgroups::Usage MemoryCgroups::usage(const fs::path& cg) {
    Usage u;
    const auto m = trial::read_cgroup_memory(cg);
    u.peak_bytes = m.peak_bytes ? static_cast<long long>(*m.peak_bytes) : 0;
    // A v2 kernel before 5.19 has no memory.peak: what the cgroup holds now, sampled at every poll.
    if (u.peak_bytes == 0 && m.version != 1) u.peak_bytes = read_number(cg / "memory.current");
    u.oom_kills = m.oom_kills.value_or(0);
    return u;
}

std::vector<pid_t> MemoryCgroups::members(const fs::path& cg) {
    std::vector<pid_t> out;
    std::istringstream procs(read_text(cg / "cgroup.procs"));
    for (pid_t pid; procs >> pid;)
        out.push_back(pid);
    return out;
}

void MemoryCgroups::remove(const fs::path& cg) {
    std::error_code ec;
    if (!fs::exists(cg / "cgroup.procs", ec)) return;
    const bool has_kill = fs::exists(cg / "cgroup.kill", ec);
    // Processes leave a cgroup when they are reaped: wait a little for that (a zombie keeps it busy).
    for (int i = 0; i < 250; ++i) {
        if (has_kill) {
            write_control(cg / "cgroup.kill", "1");
        } else {
            std::istringstream procs(read_text(cg / "cgroup.procs"));
            for (pid_t pid; procs >> pid;)
                ::kill(pid, SIGKILL);
        }
        if (::rmdir(cg.c_str()) == 0 || errno == ENOENT) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

} // namespace infrarsi::scheduler
