#pragma once
// Tune requests acted on: the daemon's intake of <spool>/tune/<job_id>.json (written by the plugin's tune
// mode, docs/plugin.md "Tune an existing job"). A request of the daemon's own user whose contract and script
// are that user's regular files becomes a campaign <root>/tune-<job_id>, which the daemon's loop then drives
// like any campaign under its root; the request moves to tune/done/. A request that cannot be acted on moves
// to tune/refused/ with a <job_id>.reason beside it. Another user's request is left where it is (that user's
// daemon takes it). <root>/tune-<job_id> marks a request as started, so a restart, or a spool the daemon may
// not write (the plugin makes tune/ as root), never starts it twice.
// A root daemon (a site's) acts for every user but never as root: a request's campaign is made in
// <root>/<user>/tune-<job_id> (<root>/<user> made 0700 and given to the user) by a child process that dropped
// to the request's uid, gid and groups before it opens the contract or the script (or looks whether the
// campaign exists); root's own requests are refused. The campaign daemon (campaign/daemon.hpp) then drives
// <root>/<user> as that user. Requests are read only from a tune/ on a path nobody but root (or the acting
// user) may change, and only from regular files of root's (or the acting user's) that no one else may write:
// a request a user planted could name any uid. The .reason of a refused request is 0640 in its group.
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace infrarsi::campaign {

// What the intake did with one request file.
enum class TuneAction {
    Started,        // campaign <root>/tune-<job_id> created
    AlreadyStarted, // <root>/tune-<job_id> existed: not started again
    Refused,        // reason says why
    OtherUser,      // another uid's request: left in place
};

struct TuneRequestHandled {
    std::string file;         // the request's name in tune/
    std::uint32_t job_id = 0; // 0 when the request could not be read
    TuneAction action = TuneAction::Refused;
    std::string reason;             // Refused: why; OtherUser: whose
    std::filesystem::path campaign; // Started, AlreadyStarted
    bool moved = false;             // the request went to done/ or refused/
    std::string move_error;         // why it could not be moved (it stays in tune/)
};

struct TuneIntake {
    std::vector<TuneRequestHandled> requests;
    std::string problem; // the spool's tune/ could not be scanned (not a directory, a symlink, unreadable)
};

// One scan of <spool>/tune/*.json. `acting_uid` is the user the campaigns run as: the daemon's effective uid
// (a parameter so tests can act as a user while running as root); 0 acts for each request's user as above,
// and then `root` must be owned by root and writable by nobody else (made 0755 when missing). Never throws
// for a request's sake; without tune/ it does nothing.
TuneIntake scan_tune_requests(const std::filesystem::path& spool, const std::filesystem::path& root,
                              uid_t acting_uid);

// The one log line for a handled request ("tune request 17.json: ...").
std::string describe(const TuneRequestHandled& h);

} // namespace infrarsi::campaign
