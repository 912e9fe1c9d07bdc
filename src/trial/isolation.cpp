#include "trial/isolation.hpp"

#include "trial/manifest.hpp"
#include "util/fd.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace infrarsi::trial {

namespace fs = std::filesystem;

namespace {

// `p` canonical and strictly inside `dir` (canonical); nullopt otherwise or when it does not exist.
std::optional<fs::path> inside(const fs::path& p, const fs::path& dir) {
    std::error_code ec;
    const fs::path c = fs::canonical(p, ec);
    if (ec) return std::nullopt;
    const auto rel = c.lexically_relative(dir);
    if (rel.empty() || rel == "." || *rel.begin() == "..") return std::nullopt;
    return c;
}

bool write_proc(const char* file, const std::string& text) {
    UniqueFd f(::open(file, O_WRONLY | O_CLOEXEC));
    return f && ::write(f.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

std::string sys(const char* what) {
    return fmt::format("{}: {}", what, std::strerror(errno));
}

} // namespace

std::optional<IsolationPlan> isolation_plan(const fs::path& manifest, const ManifestTask& task) {
    std::error_code ec;
    const fs::path m = fs::canonical(manifest, ec);
    if (ec) return std::nullopt;
    const fs::path batches = m.parent_path().parent_path();
    if (batches.filename() != "batches") return std::nullopt;
    const fs::path campaign = batches.parent_path();
    if (!fs::is_regular_file(campaign / "campaign.db", ec)) return std::nullopt;
    IsolationPlan plan;
    plan.hide = campaign;
    std::vector<fs::path> want;
    for (const auto& p : {task.workdir, task.result, task.log, task.build})
        if (!p.empty()) want.push_back(p);
    for (auto p : want) {
        if (!fs::is_directory(p, ec)) p = fs::path(p).parent_path();
        auto c = inside(p, campaign);
        if (!c) continue;
        // The build's sandbox whole: its patched source beside it.
        const auto rel = c->lexically_relative(campaign);
        if (*rel.begin() == "sandboxes") {
            auto it = rel.begin();
            if (++it == rel.end()) continue; // the sandboxes directory itself: not one trial's
            c = campaign / "sandboxes" / *it;
            if (std::find(plan.read_only.begin(), plan.read_only.end(), *c) == plan.read_only.end())
                plan.read_only.push_back(*c);
        }
        if (std::find(plan.keep.begin(), plan.keep.end(), *c) == plan.keep.end()) plan.keep.push_back(*c);
    }
    std::sort(plan.keep.begin(), plan.keep.end());
    // A directory kept inside another kept one comes with it.
    std::vector<fs::path> outer;
    for (const auto& k : plan.keep)
        if (outer.empty() || k.lexically_relative(outer.back()).native().rfind("..", 0) == 0)
            outer.push_back(k);
    plan.keep = outer;
    std::sort(plan.read_only.begin(), plan.read_only.end());
    return plan;
}

Isolation isolate(const IsolationPlan& plan) {
    Isolation out;
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    if (uid == 0) {
        if (::unshare(CLONE_NEWNS) != 0) {
            out.detail = sys("unshare(CLONE_NEWNS)");
            return out;
        }
    } else {
        if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            out.detail = sys("unshare(CLONE_NEWUSER | CLONE_NEWNS) (unprivileged user namespaces disabled?)");
            return out;
        }
        // Only this user and group, as themselves: files keep their owners, and the workload, executed as
        // a uid other than 0 in the namespace, has no capability in it to undo the mounts.
        if (!write_proc("/proc/self/setgroups", "deny") ||
            !write_proc("/proc/self/uid_map", fmt::format("{} {} 1\n", uid, uid)) ||
            !write_proc("/proc/self/gid_map", fmt::format("{} {} 1\n", gid, gid))) {
            out.detail = sys("user namespace id maps");
            return out;
        }
    }
    // From here on a failure leaves this process in a namespace with the campaign directory visible as it
    // was (the mounts below are all or nothing for what the trial sees).
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        out.detail = sys("making mounts private");
        return out;
    }
    // Opened in the new namespace (a bind mount's source must be one of its mounts) before the tmpfs hides
    // them; bound back from these descriptors.
    std::vector<std::pair<UniqueFd, fs::path>> keep;
    for (const auto& k : plan.keep) {
        UniqueFd fd(::open(k.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
        if (!fd) {
            out.detail = sys(("open " + k.string()).c_str());
            return out;
        }
        keep.emplace_back(std::move(fd), k);
    }
    if (::mount("infrarsi-trial", plan.hide.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") !=
        0) {
        out.detail = sys(("tmpfs over " + plan.hide.string()).c_str());
        return out;
    }
    for (const auto& [fd, path] : keep) {
        std::error_code ec;
        fs::create_directories(path, ec); // the mount point, on the tmpfs
        const std::string from = fmt::format("/proc/self/fd/{}", fd.get());
        if (ec || ::mount(from.c_str(), path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
            const std::string why = ec ? ec.message() : std::strerror(errno);
            ::umount2(plan.hide.c_str(), MNT_DETACH);
            out.detail = fmt::format("binding {} back: {}", path.string(), why);
            return out;
        }
    }
    // The sandboxes read-only. A remount inside a user namespace must keep the flags the mount had (the
    // kernel locks them), so they are read back first.
    std::string read_only;
    for (const auto& path : plan.read_only) {
        if (std::find(plan.keep.begin(), plan.keep.end(), path) == plan.keep.end()) continue;
        struct statvfs st {};
        unsigned long flags = MS_REMOUNT | MS_BIND | MS_RDONLY;
        if (::statvfs(path.c_str(), &st) == 0) {
            if (st.f_flag & ST_NOSUID) flags |= MS_NOSUID;
            if (st.f_flag & ST_NODEV) flags |= MS_NODEV;
            if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
            if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
            if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
            if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
        }
        // A kernel that refuses leaves the sandbox writable, said in the detail, the rest of the isolation in
        // place (hiding the campaign matters more).
        const bool ok = ::mount(nullptr, path.c_str(), nullptr, flags, nullptr) == 0;
        read_only +=
            fmt::format("{}{}{}", read_only.empty() ? "" : ", ", path.lexically_relative(plan.hide).string(),
                        ok ? "" : fmt::format(" (left writable: {})", std::strerror(errno)));
    }
    if (uid == 0)
        for (int cap : {CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH})
            ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    out.in_place = true;
    out.detail = fmt::format("{} hidden by a private mount namespace{}; visible: ", plan.hide.string(),
                             uid == 0 ? "" : " (user namespace)");
    for (std::size_t i = 0; i < plan.keep.size(); ++i)
        out.detail += (i ? ", " : "") + plan.keep[i].lexically_relative(plan.hide).string();
    if (!read_only.empty()) out.detail += "; read-only: " + read_only;
    return out;
}

} // namespace infrarsi::trial
