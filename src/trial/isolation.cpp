#include "trial/isolation.hpp"

#include "trial/manifest.hpp"
#include "util/fd.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace infrarsi::trial {

namespace fs = std::filesystem;

namespace {

// The name of every tmpfs a private view mounts: how a process tells it is already in one.
constexpr const char* kViewSource = "infrarsi-trial";
// A campaign's parent is scanned for sibling campaigns up to this many entries (a bound on a directory a
// user fills).
constexpr int kMaxSiblingEntries = 10000;

// `p` is `dir` or lies under it (both canonical).
bool within(const fs::path& p, const fs::path& dir) {
    const auto rel = p.lexically_relative(dir);
    return !rel.empty() && *rel.begin() != "..";
}

bool strictly_inside(const fs::path& p, const fs::path& dir) {
    return p != dir && within(p, dir);
}

std::optional<fs::path> canonical_or_none(const fs::path& p) {
    std::error_code ec;
    fs::path c = fs::canonical(p, ec);
    if (ec) return std::nullopt;
    return c;
}

// Too shared to hide whole: `/`, a directory right under it (/tmp, /home, /scratch), the user's home or
// one of its ancestors. A bank there is covered file by file.
bool too_shared(const fs::path& dir, const fs::path& home) {
    if (std::distance(dir.begin(), dir.end()) <= 2) return true;
    return !home.empty() && within(home, dir);
}

// The campaigns directly in `parent` (directories holding a campaign.db), not following symlinks.
std::vector<fs::path> campaigns_in(const fs::path& parent) {
    std::vector<fs::path> out;
    std::error_code ec;
    fs::directory_iterator it(parent, ec), end;
    for (int n = 0; !ec && it != end && n < kMaxSiblingEntries; it.increment(ec), ++n) {
        std::error_code e2;
        if (!it->is_directory(e2) || it->is_symlink(e2)) continue;
        if (fs::is_regular_file(fs::symlink_status(it->path() / "campaign.db", e2)))
            out.push_back(it->path());
    }
    return out;
}

// The absolute paths a task names: its command and arguments (also the value of "--flag=/path") and its
// environment's values.
std::vector<fs::path> named_paths(const ManifestTask& task) {
    std::vector<fs::path> out;
    auto add = [&](const std::string& s) {
        if (!s.empty() && s[0] == '/') {
            out.emplace_back(s);
        } else if (const auto eq = s.find('=');
                   eq != std::string::npos && s.size() > eq + 1 && s[eq + 1] == '/') {
            out.emplace_back(s.substr(eq + 1));
        }
    };
    for (const auto& a : task.command)
        add(a);
    for (const auto& a : task.args)
        add(a);
    for (const auto& [name, value] : task.env) {
        (void)name;
        add(value);
    }
    return out;
}

void sort_unique(std::vector<fs::path>& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Of a sorted list, the outermost entries (one inside another comes with it).
template <class T, class Path> std::vector<T> outermost(std::vector<T> v, Path path_of) {
    std::sort(v.begin(), v.end(), [&](const T& a, const T& b) { return path_of(a) < path_of(b); });
    std::vector<T> out;
    for (auto& x : v)
        if (out.empty() || !within(path_of(x), path_of(out.back()))) out.push_back(std::move(x));
    return out;
}

bool write_proc(const char* file, const std::string& text) {
    UniqueFd f(::open(file, O_WRONLY | O_CLOEXEC));
    return f && ::write(f.get(), text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

std::string sys(const std::string& what) {
    return fmt::format("{}: {}", what, std::strerror(errno));
}

// An O_PATH descriptor of a canonical path, refusing any symlink on the way (openat2 RESOLVE_NO_SYMLINKS;
// O_NOFOLLOW on the last component where the kernel predates openat2).
UniqueFd open_no_symlinks(const fs::path& p, bool directory) {
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC | (directory ? O_DIRECTORY : 0);
    how.resolve = RESOLVE_NO_SYMLINKS;
    const long fd = ::syscall(SYS_openat2, AT_FDCWD, p.c_str(), &how, sizeof how);
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno != ENOSYS) return UniqueFd();
    return UniqueFd(::open(p.c_str(), static_cast<int>(how.flags) | O_NOFOLLOW));
}

// Makes the mount at `path` read-only. A remount inside a user namespace must keep the flags the mount had
// (the kernel locks them), so they are read back first.
bool remount_read_only(const fs::path& path) {
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
    return ::mount(nullptr, path.c_str(), nullptr, flags, nullptr) == 0;
}

std::string join(const std::vector<fs::path>& v) {
    std::string s;
    for (const auto& p : v)
        s += (s.empty() ? "" : ", ") + p.string();
    return s;
}

} // namespace

std::vector<fs::path> bank_files(const std::function<std::string(const char*)>& env, const fs::path& home) {
    std::vector<fs::path> out;
    if (const std::string b = env("INFRARSI_BANK"); !b.empty() && b != "off" && b[0] == '/')
        out.emplace_back(b);
    if (const std::string x = env("XDG_DATA_HOME"); !x.empty() && x[0] == '/')
        out.push_back(fs::path(x) / "infrarsi" / "bank.sqlite");
    if (!home.empty()) out.push_back(home / ".local" / "share" / "infrarsi" / "bank.sqlite");
    return out;
}

IsolationPlan isolation_plan_for(const fs::path& campaign, std::vector<IsolationPlan::Bind> keep,
                                 std::vector<fs::path> named, const ContainmentSite& site) {
    std::error_code ec;
    const fs::path home = canonical_or_none(site.home).value_or(site.home);

    IsolationPlan plan;
    plan.campaign = campaign;
    // What the trial must not see (beyond what is bound back of its own campaign), and what is mounted over.
    // The campaign and each campaign beside it, one by one: the parent itself stays as it is, with what else
    // the user keeps there (data, scripts, files the command writes), which the contract may name.
    std::vector<fs::path> forbidden{campaign};
    for (auto& c : campaigns_in(campaign.parent_path()))
        forbidden.push_back(std::move(c));
    plan.hide = forbidden;
    for (const auto& r : site.roots)
        if (auto c = canonical_or_none(r); c && fs::is_directory(*c, ec) && *c != "/") {
            plan.hide.push_back(*c);
            for (auto& inner : campaigns_in(*c))
                forbidden.push_back(std::move(inner));
        }
    if (auto c = canonical_or_none(site.spool);
        !site.spool.empty() && c && fs::is_directory(*c, ec) && *c != "/") {
        plan.hide.push_back(*c);
        forbidden.push_back(*c);
    }
    for (const auto& b : site.bank) {
        const auto dir = canonical_or_none(b.parent_path());
        if (!dir || !fs::is_directory(*dir, ec)) continue;
        if (!too_shared(*dir, home)) {
            forbidden.push_back(*dir);
            plan.hide.push_back(*dir);
            continue;
        }
        // The bank and SQLite's files beside it, where they are (a journal planted later is not hidden: put
        // a bank in a directory of its own).
        for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
            const fs::path f = *dir / (b.filename().string() + suffix);
            if (fs::is_regular_file(fs::symlink_status(f, ec))) {
                forbidden.push_back(f);
                plan.hide_files.push_back(f);
            }
        }
    }
    sort_unique(forbidden);
    plan.hide = outermost(plan.hide, [](const fs::path& p) -> const fs::path& { return p; });
    sort_unique(plan.hide_files);
    std::erase_if(plan.hide_files, [&](const fs::path& f) {
        return std::any_of(plan.hide.begin(), plan.hide.end(),
                           [&](const fs::path& h) { return within(f, h); });
    });

    const auto own = keep;
    auto in_own = [&](const fs::path& p) {
        return std::any_of(own.begin(), own.end(), [&](const auto& k) { return within(p, k.path); });
    };
    auto hidden = [&](const fs::path& p) {
        return std::any_of(plan.hide.begin(), plan.hide.end(),
                           [&](const fs::path& h) { return within(p, h); }) ||
               std::find(plan.hide_files.begin(), plan.hide_files.end(), p) != plan.hide_files.end();
    };
    // What the workload needs that a hidden directory holds, as its command, arguments and environment name
    // it: read-only, unless it is, or holds, a campaign or the bank.
    named.insert(named.end(), site.inputs.begin(), site.inputs.end());
    for (const auto& n : named) {
        const auto c = canonical_or_none(n);
        if (!c || !hidden(*c) || in_own(*c)) continue;
        const bool in_forbidden =
            std::any_of(forbidden.begin(), forbidden.end(), [&](const fs::path& f) { return within(*c, f); });
        auto holds_forbidden = [&](const fs::path& d) {
            return std::any_of(forbidden.begin(), forbidden.end(),
                               [&](const fs::path& f) { return within(f, d); }) ||
                   std::any_of(plan.hide.begin(), plan.hide.end(),
                               [&](const fs::path& h) { return within(h, d); });
        };
        if (in_forbidden) {
            plan.refused.push_back(n.string() + ": inside a campaign or the bank");
            continue;
        }
        if (fs::is_directory(*c, ec)) {
            if (holds_forbidden(*c))
                plan.refused.push_back(n.string() + ": holds a campaign or the bank");
            else
                keep.push_back({*c, true});
            continue;
        }
        // A file: its directory with it where that holds nothing hidden, else the file alone.
        const fs::path d = c->parent_path();
        if (hidden(d) && !holds_forbidden(d))
            keep.push_back({d, true});
        else
            keep.push_back({*c, true});
    }
    // Only what a tmpfs covers needs binding back; one inside another comes with it.
    std::erase_if(keep, [&](const auto& k) {
        return std::none_of(plan.hide.begin(), plan.hide.end(),
                            [&](const fs::path& h) { return strictly_inside(k.path, h); });
    });
    plan.keep = outermost(keep, [](const IsolationPlan::Bind& b) -> const fs::path& { return b.path; });
    std::sort(plan.refused.begin(), plan.refused.end());
    plan.refused.erase(std::unique(plan.refused.begin(), plan.refused.end()), plan.refused.end());
    return plan;
}

std::optional<IsolationPlan> isolation_plan(const fs::path& manifest, const ManifestTask& task,
                                            const ContainmentSite& site) {
    const auto m = canonical_or_none(manifest);
    if (!m) return std::nullopt;
    const fs::path batches = m->parent_path().parent_path();
    if (batches.filename() != "batches") return std::nullopt;
    const fs::path campaign = batches.parent_path();
    std::error_code ec;
    if (!fs::is_regular_file(campaign / "campaign.db", ec)) return std::nullopt;
    // The trial's own directories in its campaign: its trial directory, writable, and its sandbox (the
    // patched source beside the build it runs), read-only: every trial of a patch set (search, equivalence
    // check, A/B pairs) runs the same sandbox, and none may leave state there for a later one.
    std::vector<IsolationPlan::Bind> keep;
    for (const auto& p : {task.workdir, task.result, task.log, task.build}) {
        if (p.empty()) continue;
        fs::path d = p;
        if (!fs::is_directory(d, ec)) d = d.parent_path();
        auto c = canonical_or_none(d);
        if (!c || !strictly_inside(*c, campaign)) continue;
        const auto rel = c->lexically_relative(campaign);
        if (*rel.begin() == "sandboxes") {
            auto it = rel.begin();
            if (++it == rel.end()) continue; // the sandboxes directory itself: not one trial's
            keep.push_back({campaign / "sandboxes" / *it, true});
        } else {
            keep.push_back({*c, false});
        }
    }
    // The batch manifest, read by the wrapper inside the view; read-only, so no task rewrites another's
    // settings before that task reads them.
    keep.push_back({*m, true});
    return isolation_plan_for(campaign, std::move(keep), named_paths(task), site);
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
        // a uid other than 0 in the namespace, has no capability in it to undo the mounts (which, made in a
        // more privileged namespace than any the workload can create, are locked together besides).
        // A task slurmstepd switched from root to the user is not dumpable, which makes its /proc files
        // root's: dumpable for these writes, as before after them (exec decides again for the workload).
        const int dumpable = ::prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
        if (dumpable == 0) ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        const bool mapped = write_proc("/proc/self/setgroups", "deny") &&
                            write_proc("/proc/self/uid_map", fmt::format("{} {} 1\n", uid, uid)) &&
                            write_proc("/proc/self/gid_map", fmt::format("{} {} 1\n", gid, gid));
        const int map_errno = errno;
        if (dumpable == 0) ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        if (!mapped) {
            errno = map_errno;
            out.detail = sys("user namespace id maps");
            return out;
        }
    }
    // From here on a failure leaves this process in a namespace with what it hides partly visible: the caller
    // must not run the workload (in_place stays false).
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
        out.detail = sys("making mounts private");
        return out;
    }
    char cwd[PATH_MAX];
    const bool had_cwd = ::getcwd(cwd, sizeof cwd) != nullptr;
    // Opened in the new namespace (a bind mount's source must be one of its mounts) before the tmpfs hides
    // them; bound back from these descriptors.
    std::vector<UniqueFd> sources, targets;
    for (const auto& k : plan.keep) {
        std::error_code ec;
        const bool dir = fs::is_directory(k.path, ec);
        UniqueFd fd = open_no_symlinks(k.path, dir);
        if (!fd) {
            out.detail = sys("open " + k.path.string());
            return out;
        }
        sources.push_back(std::move(fd));
    }
    for (const auto& h : plan.hide) {
        UniqueFd fd = open_no_symlinks(h, true);
        if (!fd) {
            out.detail = sys("open " + h.string());
            return out;
        }
        targets.push_back(std::move(fd));
    }
    for (std::size_t i = 0; i < plan.hide.size(); ++i) {
        const std::string at = fmt::format("/proc/self/fd/{}", targets[i].get());
        if (::mount(kViewSource, at.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0) {
            out.detail = sys("tmpfs over " + plan.hide[i].string());
            return out;
        }
    }
    std::string read_only;
    for (std::size_t i = 0; i < plan.keep.size(); ++i) {
        const auto& k = plan.keep[i];
        std::error_code ec;
        struct stat st {};
        ::fstat(sources[i].get(), &st);
        const bool dir = S_ISDIR(st.st_mode);
        // The mount point, on the tmpfs (nobody else sees it yet).
        fs::create_directories(k.path.parent_path(), ec);
        if (!ec) {
            if (dir)
                fs::create_directory(k.path, ec);
            else
                UniqueFd(::open(k.path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444));
        }
        const std::string from = fmt::format("/proc/self/fd/{}", sources[i].get());
        if (ec || ::mount(from.c_str(), k.path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
            out.detail =
                fmt::format("binding {} back: {}", k.path.string(), ec ? ec.message() : std::strerror(errno));
            return out;
        }
        if (!k.read_only) continue;
        // A kernel that refuses leaves it writable, said in the detail, the rest in place (hiding matters
        // more).
        const bool ok = remount_read_only(k.path);
        read_only += fmt::format("{}{}{}", read_only.empty() ? "" : ", ", k.path.string(),
                                 ok ? "" : fmt::format(" (left writable: {})", std::strerror(errno)));
    }
    // The tmpfs mounts read-only once their mount points are made: nothing can be written in place of what
    // they hide.
    for (const auto& h : plan.hide)
        if (!remount_read_only(h)) {
            out.detail = sys("read-only tmpfs over " + h.string());
            return out;
        }
    for (const auto& f : plan.hide_files)
        if (::mount("/dev/null", f.c_str(), nullptr, MS_BIND, nullptr) != 0 || !remount_read_only(f)) {
            out.detail = sys("covering " + f.string());
            return out;
        }
    // The working directory through the new view: where it was when that is still visible, else the trial's
    // own directory, else /.
    bool moved = had_cwd && ::chdir(cwd) == 0;
    for (const auto& k : plan.keep)
        if (!moved && !k.read_only) moved = ::chdir(k.path.c_str()) == 0;
    if (!moved && ::chdir("/") != 0) {
        out.detail = sys("chdir /");
        return out;
    }
    if (uid == 0)
        for (int cap : {CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH})
            ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
    out.in_place = true;
    out.detail = fmt::format("hidden by a private mount namespace{}: {}", uid == 0 ? "" : " (user namespace)",
                             join(plan.hide));
    if (!plan.hide_files.empty()) out.detail += "; files covered: " + join(plan.hide_files);
    std::vector<fs::path> writable;
    for (const auto& k : plan.keep)
        if (!k.read_only) writable.push_back(k.path);
    out.detail += "; visible: " + join(writable);
    if (!read_only.empty()) out.detail += "; read-only: " + read_only;
    if (!plan.refused.empty()) {
        out.detail += "; not bound back:";
        for (const auto& r : plan.refused)
            out.detail += " " + r + ";";
        out.detail.pop_back();
    }
    return out;
}

std::optional<std::string> private_view() {
    std::string text;
    try {
        UniqueFd f(::open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC));
        if (!f) return std::nullopt;
        text = read_all(f.get(), 16u << 20, "/proc/self/mountinfo");
    } catch (const std::exception&) {
        return std::nullopt;
    }
    // "36 35 0:40 / /path rw,nosuid - tmpfs infrarsi-trial ro,size=1024k": the mount point is field 5.
    std::vector<std::string> hidden;
    std::size_t pos = 0;
    while (pos < text.size()) {
        const auto eol = text.find('\n', pos);
        const std::string line = text.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
        pos = eol == std::string::npos ? text.size() : eol + 1;
        if (line.find(std::string(" - tmpfs ") + kViewSource + " ") == std::string::npos) continue;
        std::size_t f = 0;
        for (int field = 0; field < 4 && f != std::string::npos; ++field)
            f = line.find(' ', f + (field ? 1 : 0));
        if (f == std::string::npos) continue;
        const auto end = line.find(' ', f + 1);
        hidden.push_back(line.substr(f + 1, end - f - 1));
    }
    if (hidden.empty()) return std::nullopt;
    std::string s;
    for (const auto& h : hidden)
        s += (s.empty() ? "" : ", ") + h;
    return "hidden by the plugin's private view, made for every step of the job: " + s;
}

ContainmentSite site_of_this_process() {
    ContainmentSite site;
    struct passwd pw {
    }, *found = nullptr;
    char buf[4096];
    if (::getpwuid_r(::geteuid(), &pw, buf, sizeof buf, &found) == 0 && found && found->pw_dir)
        site.home = found->pw_dir;
    site.bank = bank_files(
        [](const char* name) {
            const char* v = std::getenv(name);
            return std::string(v ? v : "");
        },
        site.home);
    return site;
}

std::optional<Isolation> contain(const fs::path& manifest, const ManifestTask& task,
                                 const ContainmentSite& site) {
    if (auto view = private_view()) return Isolation{true, *view};
    const auto plan = isolation_plan(manifest, task, site);
    if (!plan) return std::nullopt;
    return isolate(*plan);
}

} // namespace infrarsi::trial
