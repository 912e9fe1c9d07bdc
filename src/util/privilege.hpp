#pragma once
// Acting as a user: a root daemon never runs a user's campaign as root. It looks the user up (Account),
// and runs the work in a child process that has dropped to the user's uid, gid and groups for good
// (spawn_as / run_as), so nothing the user names is ever opened with root's rights. Before root acts on a
// path at all it asks who controls it (path_control): only a path that no one but root can change is root's
// to open.
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace infrarsi {

struct Account {
    uid_t uid = 0;
    gid_t gid = 0;
    std::string name;
    std::string home;
};

// The passwd entry of `uid`; nullopt when there is none.
std::optional<Account> lookup_account(uid_t uid);

// In this process, for good: supplementary groups, gid, then uid (real, effective and saved), and HOME,
// USER and LOGNAME set to the account's (root's XDG_* directories unset). Throws infrarsi::Error when a step
// fails or when root could be regained afterwards. Refuses uid 0: the point is never to act as root.
void drop_to(const Account& a);

// Forks a child that drops to `a` and runs `work`; its exit status is what `work` returns (0..125), 126 when
// the drop failed and 127 when `work` threw. Standard output is flushed first. Returns the child's pid;
// throws infrarsi::Error when fork fails.
pid_t spawn_as(const Account& a, const std::function<int()>& work);

struct AsUser {
    int status = 0;      // the child's exit status (see spawn_as); 128+N when killed by signal N
    std::string message; // what the work reported (at most 64 KiB), or why it could not run
};

// As run_as, for work that gives its own status (0..125) beside its message.
AsUser run_as_status(const Account& a, const std::function<AsUser()>& work);

// spawn_as and wait: `work` returns its message (empty: success, status 0; otherwise status 1); an exception
// is reported by its what() with status 127.
AsUser run_as(const Account& a, const std::function<std::string()>& work);

// Who can change what a path names, found with lstat(2) from / down, one component at a time, without
// following a symlink that anyone but root made:
// - `uid` 0: only root (and `trusted`) can: every directory on the way and the path itself belong to root (or
//   `trusted`) and no group or other may write them; a world-writable directory with the sticky bit (/tmp) is
//   passed when the entry in it is root's, as nobody else may then rename or replace that entry.
// - `uid` U: user U can (and only U): the first component on the way that is not root's is U's. Everything
//   below is U's to change, so root acts there only as U (spawn_as); root did not look further.
// - `why` not empty: no one user controls it (a directory on the way, or the path itself, is writable by a
//   group or others), or it cannot be walked (missing, not a directory, too many symlinks); `uid` is then
//   meaningless. A relative path is refused.
// `trusted` is a uid treated as root: the caller's own, for an unprivileged daemon and for tests.
struct PathControl {
    uid_t uid = 0;
    std::string why;
    bool root_only() const { return why.empty() && uid == 0; }
};
PathControl path_control(const std::filesystem::path& path, uid_t trusted = 0);

// Root about to act on `path` itself (a command run as root on a campaign directory, which need not exist
// yet): the user this process must become first, as a daemon's worker does, or nullopt where root may act
// (not root, or only root can change the path: for a path that does not exist, its nearest existing parent).
// Throws infrarsi::Error when no one user controls it (a group or others may write a directory on the way)
// or its user has no passwd entry: root opens nothing there.
std::optional<Account> account_to_act_as(const std::filesystem::path& path);

} // namespace infrarsi
