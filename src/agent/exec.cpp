#include "agent/exec.hpp"

#include "trial/isolation.hpp"
#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"
#include "util/process.hpp"
#include "util/process_tree.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace infrarsi::agent {

using nlohmann::json;

namespace {

constexpr std::size_t kErrTail = 4096;

fs::path out_file(const fs::path& call_dir) {
    return call_dir / "agent.stdout";
}
fs::path err_file(const fs::path& call_dir) {
    return call_dir / "agent.stderr";
}

// Created fresh (never through a symlink or onto a FIFO planted in its place), owner-only.
UniqueFd create_output(const fs::path& p) {
    std::error_code ec;
    fs::remove(p, ec);
    UniqueFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) throw Error(std::string("cannot create: ") + std::strerror(errno), p.string());
    return fd;
}

// The agent's command as the namespace must bind it back: its program, resolved through PATH like execvp.
std::vector<fs::path> command_paths(const std::vector<std::string>& argv) {
    std::vector<fs::path> out;
    if (argv.empty()) return out;
    std::error_code ec;
    if (argv[0].find('/') != std::string::npos) {
        out.push_back(fs::absolute(argv[0], ec));
    } else if (const char* path = std::getenv("PATH")) {
        std::string p = path;
        for (std::size_t start = 0; start <= p.size();) {
            const auto end = std::min(p.find(':', start), p.size());
            const fs::path cand = fs::path(p.substr(start, end - start)) / argv[0];
            if (end > start && ::access(cand.c_str(), X_OK) == 0) {
                out.push_back(cand);
                break;
            }
            start = end + 1;
        }
    }
    // Arguments that are existing absolute paths (a script given to an interpreter, a prompt template).
    for (std::size_t i = 1; i < argv.size(); ++i)
        if (!argv[i].empty() && argv[i][0] == '/' && fs::exists(argv[i], ec)) out.emplace_back(argv[i]);
    return out;
}

} // namespace

int agent_exec(const CallSpec& spec) {
    // The request, before the view changes (stdin is a pipe from the campaign, bounded here).
    std::string request;
    try {
        request = read_all(0, 16u << 20, "agent request (stdin)");
    } catch (const Error& e) {
        fmt::print("{}\n", json{{"error", e.what()}}.dump());
        return 2;
    }
    UniqueFd out_fd, err_fd;
    try {
        out_fd = create_output(out_file(spec.call_dir));
        err_fd = create_output(err_file(spec.call_dir));
    } catch (const Error& e) {
        fmt::print("{}\n", json{{"error", e.what()}}.dump());
        return 2;
    }
    std::signal(SIGPIPE, SIG_IGN);
    ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

    std::error_code ec;
    const fs::path campaign = fs::canonical(spec.campaign, ec);
    const fs::path work = fs::canonical(spec.call_dir / "work", ec);
    const fs::path tree = fs::canonical(spec.tree, ec);
    trial::Isolation isolation;
    if (campaign.empty() || work.empty() || tree.empty()) {
        isolation.detail = "the campaign, the call's work directory or the tree does not exist";
    } else {
        std::vector<trial::IsolationPlan::Bind> own{{work, false}};
        // The tree is a sandbox of the campaign (read-only, like a trial's), or a copy outside it.
        own.push_back({tree, true});
        const auto plan = trial::isolation_plan_for(campaign, std::move(own), command_paths(spec.command),
                                                    trial::site_of_this_process());
        isolation = trial::isolate(plan);
    }

    ProcessOptions po;
    po.cwd = work.empty() ? "/" : work.string();
    po.stdin_data = std::move(request);
    po.timeout = spec.time_limit;
    po.max_output_bytes = spec.max_output_bytes;
    po.drop_env_prefixes = {"INFRARSI_", "SLURM_"};
    ProcessResult r;
    std::string start_error;
    try {
        r = run_process(spec.command, po);
    } catch (const Error& e) {
        start_error = e.what();
    }
    const int leftovers = kill_orphans(std::chrono::milliseconds(500));
    json status = {{"exit_code", r.exit_code},     {"signal", r.term_signal},
                   {"timed_out", r.timed_out},     {"output_exceeded", r.output_exceeded},
                   {"leftovers", leftovers},       {"isolated", isolation.in_place},
                   {"isolation", isolation.detail}};
    if (!start_error.empty()) status["error"] = start_error;
    try {
        write_all(out_fd.get(), r.out, out_file(spec.call_dir).string());
        const std::string_view err(r.err);
        write_all(err_fd.get(), err.substr(err.size() > kErrTail ? err.size() - kErrTail : 0),
                  err_file(spec.call_dir).string());
    } catch (const Error& e) {
        status["error"] = e.what();
    }
    fmt::print("{}\n", status.dump());
    return 0;
}

CallResult call_agent(const fs::path& infrarsi, const CallSpec& spec) {
    CallResult res;
    std::error_code ec;
    fs::create_directories(spec.call_dir / "work", ec);
    if (ec) throw Error("cannot make the agent's work directory: " + ec.message(), spec.call_dir.string());
    fs::permissions(spec.call_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    std::vector<std::string> argv = {infrarsi.string(),
                                     "agent-exec",
                                     "--campaign",
                                     spec.campaign.string(),
                                     "--call-dir",
                                     spec.call_dir.string(),
                                     "--tree",
                                     spec.tree.string(),
                                     "--time-limit",
                                     std::to_string(spec.time_limit.count()),
                                     "--max-output",
                                     std::to_string(spec.max_output_bytes),
                                     "--"};
    argv.insert(argv.end(), spec.command.begin(), spec.command.end());
    ProcessOptions po;
    po.stdin_data = spec.request;
    // agent-exec ends the agent at the limit and kills what it left; this bound holds if agent-exec itself
    // does not return (its status line is small).
    po.timeout = spec.time_limit + std::chrono::seconds(30);
    po.max_output_bytes = 64u << 10;
    const auto start = std::chrono::steady_clock::now();
    ProcessResult r;
    try {
        r = run_process(argv, po);
    } catch (const Error& e) {
        res.reason = e.what();
        return res;
    }
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    json status;
    try {
        status = parse_bounded_json(r.out, "agent-exec status", "one JSON line", {.max_bytes = 64u << 10});
    } catch (const Error& e) {
        res.reason = fmt::format("agent-exec ended without its status (exit {}, signal {}{}): {}",
                                 r.exit_code, r.term_signal, r.timed_out ? ", timed out" : "", e.problem());
        return res;
    }
    if (!status.is_object()) {
        res.reason = "agent-exec printed no status object";
        return res;
    }
    try {
        res.exit_code = json_field<int>(status, "exit_code", "agent-exec status");
        res.signal = json_field<int>(status, "signal", "agent-exec status");
        res.leftovers = json_field<int>(status, "leftovers", "agent-exec status");
        res.isolated = json_field<bool>(status, "isolated", "agent-exec status");
        res.isolation = json_field<std::string>(status, "isolation", "agent-exec status");
        const bool timed_out = json_field<bool>(status, "timed_out", "agent-exec status");
        const bool exceeded = json_field<bool>(status, "output_exceeded", "agent-exec status");
        if (status.contains("error")) {
            res.reason =
                status["error"].is_string() ? status["error"].get<std::string>() : "agent-exec error";
            return res; // not_started
        }
        res.out = read_regular_file(out_file(spec.call_dir).string(),
                                    {.max_bytes = spec.max_output_bytes, .follow_symlink = false});
        res.err_tail = read_regular_file_tail(err_file(spec.call_dir).string(),
                                              {.max_bytes = kErrTail, .follow_symlink = false});
        if (timed_out) {
            res.outcome = CallOutcome::timeout;
            res.reason =
                fmt::format("no answer within {} s: killed with its processes", spec.time_limit.count());
        } else if (exceeded) {
            res.outcome = CallOutcome::output_exceeded;
            res.reason = fmt::format("wrote more than {} bytes: killed", spec.max_output_bytes);
        } else if (res.signal != 0) {
            res.outcome = CallOutcome::crashed;
            res.reason = fmt::format("ended by signal {}", res.signal);
        } else if (res.exit_code != 0) {
            res.outcome = CallOutcome::exit_nonzero;
            res.reason = fmt::format("exited {}", res.exit_code);
        } else {
            res.outcome = CallOutcome::ok;
        }
    } catch (const Error& e) {
        res.outcome = CallOutcome::not_started;
        res.reason = e.what();
    }
    return res;
}

} // namespace infrarsi::agent
