#pragma once
// Acting as a user: a root daemon never runs a user's campaign as root. It looks the user up (Account),
// and runs the work in a child process that has dropped to the user's uid, gid and groups for good
// (spawn_as / run_as), so nothing the user names is ever opened with root's rights.
#include <sys/types.h>

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
// USER and LOGNAME set to the account's. Throws infrarsi::Error when a step fails or when root could be
// regained afterwards. Refuses uid 0: the point is never to act as root.
void drop_to(const Account& a);

// Forks a child that drops to `a` and runs `work`; its exit status is what `work` returns (0..125), 126 when
// the drop failed and 127 when `work` threw. Standard output is flushed first. Returns the child's pid;
// throws infrarsi::Error when fork fails.
pid_t spawn_as(const Account& a, const std::function<int()>& work);

struct AsUser {
    int status = 0;      // the child's exit status (see spawn_as); 128+N when killed by signal N
    std::string message; // what the work reported (at most 64 KiB), or why it could not run
};

// spawn_as and wait: `work` returns its message (empty: success, status 0; otherwise status 1); an exception
// is reported by its what() with status 127.
AsUser run_as(const Account& a, const std::function<std::string()>& work);

} // namespace infrarsi
