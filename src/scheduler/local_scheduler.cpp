// The local backend: a batch's tasks run as child processes of the orchestrator (util/process's
// start_detached), each in a session of its own, with output to the task's output file. Nothing runs between
// calls: wait() starts tasks, samples their memory, enforces the limits and records their ends.
// A task is its whole process tree, not its session: a workload may setsid, double fork or leave orphans.
// Where this process may make a memory cgroup (v2, or v1 on a hybrid host: memory_cgroup.hpp) the task runs
// in one, which holds every process it starts. Besides, this process is a child subreaper: a task's process
// whose parent ends is reparented here instead of to init, so it stays findable; each poll adds what is
// below the task's leader and its known processes to those known (an orphan that escapes between two polls
// is adopted by the running task that started before it). Memory, the time limit and the end act on all of
// them: at the leader's end every process left is killed (and reaped) before the end is recorded. Limits:
//   memory: in a cgroup the kernel holds the limit, and a task with an OOM kill is recorded OUT_OF_MEMORY
//           (its other processes are killed at once, as memory.oom.group does under v2). Elsewhere a
//           watchdog: the resident set of the task's processes, sampled every poll (at most 200 ms apart),
//           is killed (SIGKILL) when it exceeds the limit and recorded OUT_OF_MEMORY; an allocation faster
//           than the sampling may overshoot the limit briefly. description() says which;
//   time:   SIGTERM at the limit, SIGKILL 2 s later, recorded TIMEOUT.
// State on disk, under <state_dir>/<job id>/: job.json (the request), `held` until released, `cancelled`,
// <index>.pid while a task runs (pid and start time, so a restarted orchestrator can tell its orphan from
// a recycled pid and stop it; its cgroup, if any) and <index>.json once it ended. A task that was running
// when its orchestrator died has no end record: the next wait() stops what is left of it and runs it again.
#include "scheduler/scheduler.hpp"

#include "scheduler/memory_cgroup.hpp"
#include "trial/evidence.hpp"
#include "trial/manifest.hpp"
#include "trial/result.hpp"
#include "util/atomic_file.hpp"
#include "util/bounded_json.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"
#include "util/file_digest.hpp"
#include "util/json_field.hpp"
#include "util/process.hpp"
#include "util/process_tree.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <thread>
#include <tuple>
#include <unistd.h>

namespace infrarsi::scheduler {
namespace {

using json = nlohmann::json;
using clock = std::chrono::steady_clock;

std::string host_name() {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    return host;
}

// A state file: absent, torn or foreign (a FIFO, a symlink, too large or too deep: the trial runs as the same
// user and can reach the directory) is treated as absent; nothing in it can hang or crash the scheduler.
std::optional<json> read_json(const fs::path& p) {
    try {
        return read_bounded_json(p.string(), "a local scheduler state file", {.max_bytes = 1u << 20},
                                 /*follow_symlink=*/false);
    } catch (const Error&) {
        return std::nullopt;
    }
}

// Field 22 of /proc/<pid>/stat (start time in clock ticks after boot) and field 6 (session); the command
// name (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
struct ProcStat {
    long long session = -1;
    unsigned long long start_ticks = 0;
};
std::optional<ProcStat> proc_stat(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const auto close = text.rfind(')');
    if (close == std::string::npos) return std::nullopt;
    std::istringstream rest(text.substr(close + 1));
    std::string field;
    ProcStat s;
    for (int i = 3; rest >> field; ++i) {
        if (i == 6) s.session = std::stoll(field);
        if (i == 22) {
            s.start_ticks = std::stoull(field);
            return s;
        }
    }
    return std::nullopt;
}

// The processes of session `sid`.
std::vector<pid_t> session_members(pid_t sid) {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
        const std::string name = e.path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
        const pid_t pid = static_cast<pid_t>(std::stol(name));
        try {
            if (const auto st = proc_stat(pid); st && st->session == sid) out.push_back(pid);
        } catch (const std::exception&) {
            // the process ended while being read
        }
    }
    return out;
}

void signal_session(pid_t sid, int sig) {
    for (const pid_t pid : session_members(sid))
        ::kill(pid, sig);
}

// Slurm's names of the states a local task ends in, so the records read back through slurm::parse_job_state;
// any other state is recorded FAILED.
constexpr util::EnumNames<slurm::JobState, 5> slurm_state_names{{{
    {slurm::JobState::Completed, "COMPLETED"},
    {slurm::JobState::OutOfMemory, "OUT_OF_MEMORY"},
    {slurm::JobState::Timeout, "TIMEOUT"},
    {slurm::JobState::Cancelled, "CANCELLED"},
    {slurm::JobState::Failed, "FAILED"},
}}};

const char* slurm_name(slurm::JobState s) {
    const auto n = slurm_state_names.name(s);
    return (n == "?" ? slurm_state_names.name(slurm::JobState::Failed) : n)
        .data(); // literals: NUL-terminated
}

std::string expand_output(const std::string& pattern, const std::string& job, int index) {
    std::string out;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] == '%' && i + 1 < pattern.size() && (pattern[i + 1] == 'A' || pattern[i + 1] == 'a')) {
            out += pattern[i + 1] == 'A' ? job : std::to_string(index);
            ++i;
        } else {
            out += pattern[i];
        }
    }
    return out;
}

// An epoch time as Slurm's records write one (YYYY-MM-DDTHH:MM:SS, local time).
std::string slurm_stamp(double epoch) {
    const auto t = static_cast<std::time_t>(epoch);
    std::tm tm{};
    localtime_r(&t, &tm);
    char b[32];
    return std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm) ? std::string(b) : std::string();
}

// A task this process started and has not reaped yet.
struct Running {
    pid_t pid = -1;
    clock::time_point started;
    double start_epoch = 0;
    long long peak_rss = 0;
    slurm::JobState kill_reason = slurm::JobState::Unknown; // set when the watchdog or a cancel killed it
    std::optional<clock::time_point> sigkill_at;
    fs::path cgroup;                    // where the kernel holds its memory limit; empty: the watchdog does
    unsigned long long start_ticks = 0; // the leader's, to tell what started after it
    std::map<pid_t, unsigned long long> known; // its processes seen so far: pid -> start ticks
    // Its manifest entry's result.json and log.txt, digested when it ends (trial/evidence.hpp).
    std::string result_path, log_path;
};

// The task's processes now, zombies left out: its cgroup's, its session's, those below the leader and below
// every process it had (reparented to this subreaper when their parent ended). `r.known` becomes that set.
std::set<pid_t> task_processes(Running& r, const ProcessTable& table) {
    // Pids are reused once reaped: a process counts only with the start time it was seen with.
    std::vector<pid_t> roots;
    if (const auto* leader = table.find(r.pid); leader && leader->start_ticks == r.start_ticks)
        roots.push_back(r.pid);
    for (const auto& [pid, ticks] : r.known)
        if (const auto* p = table.find(pid); p && p->start_ticks == ticks) roots.push_back(pid);
    std::set<pid_t> all = table.descendants_of(roots);
    all.insert(roots.begin(), roots.end());
    for (const auto& [pid, p] : table.all())
        if (p.session == r.pid && p.start_ticks >= r.start_ticks) all.insert(pid);
    if (!r.cgroup.empty())
        for (const pid_t pid : MemoryCgroups::members(r.cgroup))
            all.insert(pid);
    std::set<pid_t> live;
    r.known.clear();
    for (const pid_t pid : all)
        if (const auto* p = table.find(pid); p && p->state != 'Z' && p->state != 'X') {
            live.insert(pid);
            r.known[pid] = p->start_ticks;
        }
    return live;
}

long long rss_bytes(const std::set<pid_t>& pids) {
    static const long page = ::sysconf(_SC_PAGESIZE);
    long long total = 0;
    for (const pid_t pid : pids) {
        std::ifstream statm(fmt::format("/proc/{}/statm", pid));
        long long size = 0, resident = 0;
        if (statm >> size >> resident) total += resident * page;
    }
    return total;
}

// Whether `p`, a child of this process, may be an orphan reparented here: outside this process's session.
// Every child this process starts itself and waits for elsewhere (run_process's, a daemon's user workers)
// stays in its session; a trial's processes are in the trial's session (start_detached makes one) or in one
// they made, and no process can join another's session.
bool reparented(const ProcessInfo& p) {
    return p.session != ::getsid(0);
}

// The leaders of the tasks every local scheduler of this process runs: each reaps its own.
std::mutex leaders_mutex;
std::set<pid_t> leaders;
bool is_leader(pid_t pid) {
    std::lock_guard lock(leaders_mutex);
    return leaders.count(pid) > 0;
}

// Children of this process that ended and that nobody waits for (orphans reparented here): reaped, so they
// do not stay zombies.
void reap_orphans(const ProcessTable& table) {
    for (const pid_t pid : table.children_of(::getpid()))
        if (const auto* p = table.find(pid); p && p->state == 'Z' && reparented(*p) && !is_leader(pid))
            ::waitpid(pid, nullptr, WNOHANG);
}

double epoch_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class LocalScheduler final : public Scheduler {
  public:
    LocalScheduler(fs::path state_dir, LocalMemoryLimit memory) : dir_(std::move(state_dir)) {
        fs::create_directories(dir_);
        // Trials run as this user: a dumpable orchestrator would let them read its view of the files
        // (/proc/<pid>/root, /proc/<pid>/cwd) around the mount namespace that hides the campaign from them
        // (trial/isolation.hpp).
        ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        // A trial's processes whose parent ends come here, not to init: they stay part of their trial.
        ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        std::string why = "the watchdog was asked for";
        if (memory == LocalMemoryLimit::Auto) cgroups_ = MemoryCgroups::find(&why);
        description_ = cgroups_ ? fmt::format("local (memory limit: a cgroup v{} per trial under {})",
                                              cgroups_->version(), cgroups_->parent().string())
                                : fmt::format("local (memory limit: a watchdog over the resident memory of "
                                              "the trial's processes, sampled every 200 ms; no cgroup: {})",
                                              why);
    }

    ~LocalScheduler() override {
        // Tasks do not outlive the orchestrator that runs them (a restart runs them again).
        for (auto& [job, tasks] : running_)
            for (auto& [index, r] : tasks) {
                signal_task(r, SIGKILL);
                while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
                }
                {
                    std::lock_guard lock(leaders_mutex);
                    leaders.erase(r.pid);
                }
                kill_remaining(r);
                if (!r.cgroup.empty()) MemoryCgroups::remove(r.cgroup);
            }
    }

    std::string name() const override { return "local"; }
    std::string description() const override { return description_; }
    bool reachable(std::string*) const override { return true; }

    std::string submit_held(const ArrayJob& job) override {
        if (job.nodes > 1)
            throw Error(fmt::format("the local scheduler runs trials on this machine only, and the contract "
                                    "asks for {} nodes",
                                    job.nodes),
                        "--scheduler local", "resources.nodes = 1, or --scheduler slurm");
        if (job.tasks <= 0 || job.first_index < 0) throw Error("an array of no tasks", "local scheduler");
        // Not a Slurm job, but the job sees its resources and sbatch-option knobs as Slurm would show them.
        auto env = slurm_environment(job);
        for (const auto& [k, v] : job.env)
            env[k] = v;
        for (const auto& id : job_ids())
            if (auto j = read_json(dir_ / id / "job.json");
                j && j->value("name", "") == job.name && fs::exists(dir_ / id / "held"))
                cancel(id);
        const json j = {{"name", job.name},
                        {"script", job.script.string()},
                        {"workdir", job.workdir.string()},
                        {"output", job.output},
                        {"first_index", job.first_index},
                        {"tasks", job.tasks},
                        {"max_concurrent", std::max(1, job.max_concurrent)},
                        {"env", env},
                        {"mem", job.mem},
                        {"mem_bytes", job.mem_bytes},
                        {"time_limit", job.time_limit},
                        {"time_limit_s", job.time_limit_s}};
        for (long long next = max_job_id() + 1;; ++next) {
            const fs::path d = dir_ / std::to_string(next);
            std::error_code ec;
            if (!fs::create_directory(d, ec)) {
                if (ec) throw Error("cannot create the job's directory: " + ec.message(), d.string());
                continue; // taken meanwhile
            }
            write_file_atomically(d / "held", "");
            write_file_atomically(d / "job.json", j.dump(1) + "\n");
            return std::to_string(next);
        }
    }

    void release(const std::string& job_id) override {
        const fs::path d = job_dir(job_id);
        std::error_code ec;
        fs::remove(d / "held", ec);
    }

    std::vector<slurm::JobRecord> wait(const std::string& job_id, std::chrono::seconds timeout,
                                       std::chrono::milliseconds poll) override {
        const auto deadline = clock::now() + timeout;
        const auto step = std::min(poll, std::chrono::milliseconds(200));
        for (;;) {
            auto records = advance(job_id);
            const bool done = std::all_of(records.begin(), records.end(), [](const slurm::JobRecord& r) {
                return slurm::is_finished(r.state);
            });
            if (done || clock::now() >= deadline) return records;
            std::this_thread::sleep_for(step);
        }
    }

    void cancel(const std::string& job_id) override {
        const auto us = job_id.find('_');
        const std::string job = job_id.substr(0, us);
        const fs::path d = job_dir(job);
        if (us == std::string::npos) {
            write_file_atomically(d / "cancelled", "");
            for (auto& [index, r] : running_[job])
                kill_task(r, slurm::JobState::Cancelled);
        } else {
            const std::string task = job_id.substr(us + 1);
            if (task.empty() || task.size() > 9 || task.find_first_not_of("0123456789") != std::string::npos)
                throw Error("no such local task '" + job_id + "'", dir_.string(), "JOB or JOB_INDEX");
            const int index = std::stoi(task);
            if (auto it = running_[job].find(index); it != running_[job].end())
                kill_task(it->second, slurm::JobState::Cancelled);
            else if (!fs::exists(d / fmt::format("{}.json", index)))
                record_end(job, index, slurm::JobState::Cancelled, 0, 0, 0, 0, 0);
        }
        advance(job);
    }

  private:
    fs::path job_dir(const std::string& job) const {
        if (job.empty() || job.find_first_not_of("0123456789") != std::string::npos ||
            !fs::exists(dir_ / job))
            throw Error("no such local job '" + job + "'", dir_.string());
        return dir_ / job;
    }

    std::vector<std::string> job_ids() const {
        std::vector<std::string> ids;
        for (const auto& e : fs::directory_iterator(dir_)) {
            const auto n = e.path().filename().string();
            if (!n.empty() && n.find_first_not_of("0123456789") == std::string::npos) ids.push_back(n);
        }
        return ids;
    }
    long long max_job_id() const {
        long long m = 0;
        for (const auto& id : job_ids())
            m = std::max(m, std::stoll(id));
        return m;
    }

    static void signal_task(Running& r, int sig) {
        const ProcessTable table;
        for (const pid_t pid : task_processes(r, table))
            ::kill(pid, sig);
    }

    // After the leader ended: every process of the task still there is killed and, when it was reparented
    // here, reaped, until none is left (bounded: 5 s; a process in uninterruptible sleep dies when it wakes).
    void kill_remaining(Running& r) {
        for (int i = 0; i < 250; ++i) {
            const ProcessTable table;
            adopt_orphans(table); // the leader's children, reparented here when it ended
            const auto left = task_processes(r, table);
            reap_orphans(table);
            if (left.empty()) return;
            for (const pid_t pid : left)
                ::kill(pid, SIGKILL);
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }

    // Children of this process that no task knows yet (they left a task's tree between two polls, and their
    // parent ended): each joins the running task that started last before it. Only those outside this
    // process's session (reparented()): the children it starts itself are never a trial's.
    void adopt_orphans(const ProcessTable& table) {
        std::set<pid_t> claimed;
        std::vector<Running*> tasks;
        for (auto& [job, by_index] : running_)
            for (auto& [index, r] : by_index) {
                claimed.insert(r.pid);
                for (const auto& [pid, ticks] : r.known)
                    claimed.insert(pid);
                tasks.push_back(&r);
            }
        for (const pid_t pid : table.children_of(::getpid())) {
            const auto* p = table.find(pid);
            if (!p || claimed.count(pid) || p->state == 'Z' || !reparented(*p) || is_leader(pid)) continue;
            Running* owner = nullptr;
            for (Running* r : tasks)
                if (r->start_ticks <= p->start_ticks && (!owner || r->start_ticks > owner->start_ticks))
                    owner = r;
            if (owner) owner->known[pid] = p->start_ticks;
        }
    }

    void kill_task(Running& r, slurm::JobState reason) {
        if (r.kill_reason != slurm::JobState::Unknown) return;
        r.kill_reason = reason;
        if (reason == slurm::JobState::OutOfMemory) {
            signal_task(r, SIGKILL);
        } else {
            signal_task(r, SIGTERM);
            r.sigkill_at = clock::now() + std::chrono::seconds(2);
        }
    }

    void record_end(const std::string& job, int index, slurm::JobState state, int exit_code, int signal,
                    double elapsed, long long peak, double start, const Running* task = nullptr) {
        json rec = {{"state", slurm_name(state)},
                    {"exit_code", exit_code},
                    {"signal", signal},
                    {"elapsed_s", elapsed},
                    {"max_rss_bytes", peak},
                    {"node", host_name()},
                    {"start", start},
                    {"end", epoch_now()}};
        // What decides promotion, as it is when the task has ended: ingest refuses files that differ later
        // (a process that escaped the trial rewrote them).
        if (task && !task->result_path.empty() && !task->log_path.empty()) {
            rec["result_file"] = to_json(digest_file(task->result_path, trial::kMaxResultBytes));
            rec["log_file"] = to_json(digest_file(task->log_path, trial::kMaxDigestLogBytes));
        }
        const fs::path d = dir_ / job;
        // The parent's own copy, kept before the file exists: the trial runs as this user and could rewrite
        // the file; what this process returns for a task it ended is what it saw (the trial's evidence).
        ended_[job][index] = rec;
        write_file_atomically(d / fmt::format("{}.json", index), rec.dump() + "\n");
        std::error_code ec;
        fs::remove(d / fmt::format("{}.pid", index), ec);
    }

    // A task recorded as running by a process that is gone: stop what is left of it (its process group, if
    // the pid still names the same process), so it can run again.
    void stop_orphan(const fs::path& pid_file) {
        if (auto p = read_json(pid_file)) {
            const pid_t pid = p->value("pid", -1);
            const auto st = pid > 0 ? proc_stat(pid) : std::nullopt;
            if (st && st->start_ticks == p->value("start_ticks", 0ull)) {
                for (const pid_t below : descendants_of(pid))
                    ::kill(below, SIGKILL);
                signal_session(pid, SIGKILL);
            }
            // Only a cgroup under this scheduler's parent: the file is on disk, and disks can lie.
            if (const auto& cg = p->value("cgroup", json()); cg.is_string() && cgroups_) {
                const fs::path path = cg.get<std::string>();
                if (path.parent_path() == cgroups_->parent() &&
                    path.filename().string().rfind("infrarsi-", 0) == 0)
                    MemoryCgroups::remove(path);
            }
        }
        std::error_code ec;
        fs::remove(pid_file, ec);
    }

    // One round: reap, enforce the limits, start what may start; returns every task's record.
    std::vector<slurm::JobRecord> advance(const std::string& job) {
        const fs::path d = job_dir(job);
        const auto spec = read_json(d / "job.json");
        if (!spec) throw Error("unreadable job description", (d / "job.json").string());
        const std::string where = (d / "job.json").string();
        const int tasks = static_cast<int>(json_field<unsigned>(*spec, "tasks", where));
        const int first = spec->contains("first_index")
                              ? static_cast<int>(json_field<unsigned>(*spec, "first_index", where))
                              : 0; // a job an earlier release recorded
        const int max_concurrent =
            std::max(1, static_cast<int>(json_field<unsigned>(*spec, "max_concurrent", where)));
        const long long mem_bytes = json_field<long long>(*spec, "mem_bytes", where);
        const long long time_limit_s = json_field<long long>(*spec, "time_limit_s", where);
        auto& running = running_[job];

        // Reap and watch the running tasks.
        {
            const ProcessTable table;
            adopt_orphans(table);
            reap_orphans(table);
        }
        for (auto it = running.begin(); it != running.end();) {
            auto& [index, r] = *it;
            int status = 0;
            rusage ru{};
            const pid_t got = ::wait4(r.pid, &status, WNOHANG, &ru);
            if (got == r.pid) {
                // The leader ended; every process left of its task goes with it, before its end is recorded.
                kill_remaining(r);
                const double elapsed = std::chrono::duration<double>(clock::now() - r.started).count();
                long long peak = std::max(r.peak_rss, static_cast<long long>(ru.ru_maxrss) * 1024);
                const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
                const int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
                slurm::JobState state = r.kill_reason;
                if (!r.cgroup.empty()) {
                    // The kernel killed part of it at the limit: the trial is out of memory, as under Slurm.
                    const auto use = MemoryCgroups::usage(r.cgroup);
                    peak = std::max(peak, use.peak_bytes);
                    if (use.oom_kills > 0 && state == slurm::JobState::Unknown)
                        state = slurm::JobState::OutOfMemory;
                    MemoryCgroups::remove(r.cgroup);
                }
                if (state == slurm::JobState::Unknown)
                    state = code == 0 && sig == 0 ? slurm::JobState::Completed : slurm::JobState::Failed;
                record_end(job, index, state, code, sig, elapsed, peak, r.start_epoch, &r);
                {
                    std::lock_guard lock(leaders_mutex);
                    leaders.erase(r.pid);
                }
                it = running.erase(it);
                continue;
            }
            const ProcessTable table;
            const auto processes = task_processes(r, table); // also keeps r.known up to date
            if (r.cgroup.empty()) {
                r.peak_rss = std::max(r.peak_rss, rss_bytes(processes));
                if (mem_bytes > 0 && r.peak_rss > mem_bytes) kill_task(r, slurm::JobState::OutOfMemory);
            } else {
                const auto use = MemoryCgroups::usage(r.cgroup);
                r.peak_rss = std::max(r.peak_rss, use.peak_bytes);
                // The kernel killed one process at the limit: the trial is out of memory, all of it.
                if (use.oom_kills > 0) kill_task(r, slurm::JobState::OutOfMemory);
            }
            if (time_limit_s > 0 && clock::now() - r.started > std::chrono::seconds(time_limit_s))
                kill_task(r, slurm::JobState::Timeout);
            if (r.sigkill_at && clock::now() >= *r.sigkill_at) {
                signal_task(r, SIGKILL);
                r.sigkill_at.reset();
            }
            ++it;
        }

        const bool held = fs::exists(d / "held");
        const bool cancelled = fs::exists(d / "cancelled");
        std::vector<slurm::JobRecord> records;
        int active = static_cast<int>(running.size());
        for (int index = first; index < first + tasks; ++index) {
            const fs::path end = d / fmt::format("{}.json", index);
            std::optional<json> rec;
            if (auto e = ended_[job].find(index); e != ended_[job].end())
                rec = e->second;
            else
                rec =
                    read_json(end); // ended before this process ran it (a restart): the file is all there is
            // An end record that is not ours (torn, or foreign content) is no end: the task runs again.
            if (rec && !(rec->is_object() && rec->value("state", json()).is_string())) rec.reset();
            if (!rec && !running.count(index)) {
                const fs::path pid_file = d / fmt::format("{}.pid", index);
                if (fs::exists(pid_file)) stop_orphan(pid_file);
                if (cancelled) {
                    record_end(job, index, slurm::JobState::Cancelled, 0, 0, 0, 0, 0);
                    rec = ended_[job][index];
                } else if (!held && active < max_concurrent) {
                    start(job, *spec, index);
                    ++active;
                }
            }
            slurm::JobRecord r;
            r.array_job_id = job;
            r.array_task_id = index;
            r.job_id = fmt::format("{}_{}", job, index);
            if (rec) {
                const auto num = [&](const char* k) {
                    const auto& v = rec->value(k, json());
                    return v.is_number() ? v.get<double>() : 0.0;
                };
                r.raw_state = (*rec)["state"].get<std::string>();
                r.state = slurm::parse_job_state(r.raw_state);
                r.exit_code = static_cast<int>(num("exit_code"));
                r.exit_signal = static_cast<int>(num("signal"));
                r.elapsed_s = num("elapsed_s");
                // When it ran, as Slurm's record says it (local time, to the second): the report's timeline.
                if (const double t = num("start"); t > 0) r.start_time = slurm_stamp(t);
                if (const double t = num("end"); t > 0) r.end_time = slurm_stamp(t);
                if (const double m = num("max_rss_bytes"); m > 0) r.max_rss_bytes = static_cast<long long>(m);
                if (const auto& n = rec->value("node", json()); n.is_string())
                    r.node_list = n.get<std::string>();
                try {
                    if (rec->contains("result_file"))
                        r.result_file = file_digest_from_json((*rec)["result_file"], "result_file");
                    if (rec->contains("log_file"))
                        r.log_file = file_digest_from_json((*rec)["log_file"], "log_file");
                } catch (const Error&) {
                    r.result_file.reset(); // a record on disk that is not ours: no digests
                    r.log_file.reset();
                }
            } else if (running.count(index)) {
                r.state = slurm::JobState::Running;
                r.raw_state = "RUNNING";
                r.node_list = host_name();
            } else {
                r.state = slurm::JobState::Pending;
                r.raw_state = "PENDING";
                r.reason = held ? "JobHeldUser" : "None";
            }
            records.push_back(std::move(r));
        }
        return records;
    }

    void start(const std::string& job, const json& spec, int index) {
        const fs::path d = dir_ / job;
        const fs::path output = expand_output(spec.value("output", ""), job, index);
        std::map<std::string, std::string> env;
        for (const auto& [k, v] : spec.at("env").items())
            env[k] = v.get<std::string>();
        env["INFRARSI_TRIAL_INDEX"] = std::to_string(index);
        // Not a Slurm job, whatever the orchestrator runs in: the trial must not read another job's ids.
        const auto environment = merged_environment(env, {"SLURM_"});
        Running r;
        if (const auto files = trial_files(job, spec, index)) std::tie(r.result_path, r.log_path) = *files;
        r.started = clock::now();
        r.start_epoch = epoch_now();
        const long long mem_bytes = spec.value("mem_bytes", 0LL);
        try {
            if (!output.parent_path().empty()) fs::create_directories(output.parent_path());
            DetachedOptions o;
            o.env = environment;
            o.cwd = spec.value("workdir", "");
            o.output = output.string();
            if (cgroups_ && mem_bytes > 0) {
                r.cgroup =
                    cgroups_->create(fmt::format("infrarsi-{}-{}-{}", ::getpid(), job, index), mem_bytes);
                o.cgroup = r.cgroup.string();
            }
            r.pid = start_detached({"bash", spec.at("script").get<std::string>()}, o);
        } catch (const std::exception& e) {
            if (!r.cgroup.empty()) MemoryCgroups::remove(r.cgroup);
            std::ofstream(output, std::ios::app) << "infrarsi local scheduler: " << e.what() << "\n";
            record_end(job, index, slurm::JobState::Failed, 127, 0, 0, 0, r.start_epoch);
            return;
        }
        const auto st = proc_stat(r.pid);
        r.start_ticks = st ? st->start_ticks : 0;
        json pid_record = {{"pid", r.pid}, {"start_ticks", r.start_ticks}};
        if (!r.cgroup.empty()) pid_record["cgroup"] = r.cgroup.string();
        write_file_atomically(d / fmt::format("{}.pid", index), pid_record.dump() + "\n");
        {
            std::lock_guard lock(leaders_mutex);
            leaders.insert(r.pid);
        }
        running_[job][index] = r;
    }

    // A trial's result.json and log.txt, from its batch manifest (read once per job, before its tasks run).
    std::optional<std::pair<std::string, std::string>> trial_files(const std::string& job, const json& spec,
                                                                   int index) {
        auto [it, fresh] = manifests_.try_emplace(job);
        if (fresh) try {
                const auto& env = spec.at("env");
                if (env.contains("INFRARSI_MANIFEST"))
                    it->second = trial::read_manifest(env["INFRARSI_MANIFEST"].get<std::string>());
            } catch (const std::exception&) {
                // no manifest to read: the end record has no digests, ingest checks none
            }
        if (!it->second) return std::nullopt;
        try {
            const auto& task = it->second->task(static_cast<std::uint32_t>(index));
            return std::pair{task.result, task.log};
        } catch (const Error&) {
            return std::nullopt;
        }
    }

    fs::path dir_;
    std::optional<MemoryCgroups> cgroups_; // empty: the watchdog holds the memory limit
    std::string description_;
    std::map<std::string, std::map<int, Running>> running_; // by job, then task index
    std::map<std::string, std::map<int, json>> ended_;      // end records this process wrote, by job, index
    std::map<std::string, std::optional<trial::Manifest>> manifests_; // by job: where its trials' files are
};

} // namespace

std::unique_ptr<Scheduler> local_scheduler(const fs::path& state_dir, LocalMemoryLimit memory) {
    return std::make_unique<LocalScheduler>(state_dir, memory);
}

std::unique_ptr<Scheduler> make_scheduler(std::string_view which, const fs::path& local_state_dir,
                                          std::string* why) {
    if (which == "slurm") return slurm_scheduler();
    if (which == "local") return local_scheduler(local_state_dir);
    if (which != "auto")
        throw Error(fmt::format("unknown scheduler '{}'", which), "--scheduler", "slurm, local or auto");
    auto slurm = slurm_scheduler();
    std::string reason;
    if (slurm->reachable(&reason)) {
        if (why) *why = "Slurm answers";
        return slurm;
    }
    if (why) *why = "Slurm does not answer (" + (reason.empty() ? std::string("no scontrol") : reason) + ")";
    return local_scheduler(local_state_dir);
}

} // namespace infrarsi::scheduler
