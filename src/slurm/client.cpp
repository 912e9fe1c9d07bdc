#include "slurm/client.hpp"

#include "util/error.hpp"
#include "util/process.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

namespace infrarsi::slurm {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::string cur;
    std::istringstream in(s);
    while (std::getline(in, cur, sep))
        out.push_back(cur);
    if (!s.empty() && s.back() == sep) out.emplace_back();
    return out;
}

std::vector<std::string> lines(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) out.push_back(line);
    }
    return out;
}

std::string trim(const std::string& s) {
    auto b = s.find_first_not_of(" \t\n");
    if (b == std::string::npos) return {};
    auto e = s.find_last_not_of(" \t\n");
    return s.substr(b, e - b + 1);
}

// "E:S" -> exit code and signal.
void parse_exit(const std::string& text, JobRecord& r) {
    auto colon = text.find(':');
    try {
        r.exit_code = std::stoi(text.substr(0, colon));
        if (colon != std::string::npos) r.exit_signal = std::stoi(text.substr(colon + 1));
    } catch (const std::exception&) {
        throw Error("bad exit code '" + text + "'", "Slurm output", "E:S, e.g. 0:125");
    }
}

// squeue's %M / sacct's Elapsed: [D-][HH:]MM:SS
double parse_duration(const std::string& text) {
    if (text.empty() || text == "INVALID" || text == "N/A") return 0;
    int days = 0;
    std::string rest = text;
    if (auto dash = text.find('-'); dash != std::string::npos) {
        days = std::stoi(text.substr(0, dash));
        rest = text.substr(dash + 1);
    }
    double total = 0;
    for (const auto& part : split(rest, ':'))
        total = total * 60 + std::stod(part);
    return total + days * 86400.0;
}

// "1234K", "12.5M", "3G", "1024" (bytes when unsuffixed is not used by Slurm: plain numbers are KiB).
std::optional<long long> parse_rss(const std::string& text) {
    if (text.empty()) return std::nullopt;
    double v = std::stod(text);
    char unit = text.back();
    double mult = 1024; // sacct prints KiB without a suffix
    if (unit == 'K') mult = 1024;
    if (unit == 'M') mult = 1024.0 * 1024;
    if (unit == 'G') mult = 1024.0 * 1024 * 1024;
    if (unit == 'T') mult = 1024.0 * 1024 * 1024 * 1024;
    return static_cast<long long>(v * mult);
}

// "123_4" -> array job 123, task 4; "123" -> plain job.
void set_ids(JobRecord& r, const std::string& id) {
    r.job_id = id;
    auto us = id.find('_');
    if (us != std::string::npos && id.find('[') == std::string::npos) {
        r.array_job_id = id.substr(0, us);
        r.array_task_id = std::stoi(id.substr(us + 1));
    }
}

// Slurm's "Key=Value Key=Value ..." lines (jobcomp/filetxt, scontrol show -o). Values may be empty and may
// contain spaces (job names), so a value runs until the next " Key=".
std::map<std::string, std::string> parse_key_values(const std::string& line) {
    static const std::regex key(R"((?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=)");
    std::map<std::string, std::string> kv;
    std::vector<std::pair<std::string, std::pair<size_t, size_t>>> keys; // name, (match start, value start)
    for (auto it = std::sregex_iterator(line.begin(), line.end(), key); it != std::sregex_iterator(); ++it)
        keys.push_back(
            {(*it)[1].str(),
             {static_cast<size_t>(it->position(0)), static_cast<size_t>(it->position(0) + it->length(0))}});
    for (size_t i = 0; i < keys.size(); ++i) {
        size_t vstart = keys[i].second.second;
        size_t vend = i + 1 < keys.size() ? keys[i + 1].second.first : line.size();
        kv[keys[i].first] = trim(line.substr(vstart, vend - vstart));
    }
    return kv;
}

JobRecord record_from_key_values(const std::map<std::string, std::string>& kv, const std::string& where) {
    auto get = [&](const char* k) -> std::string {
        auto it = kv.find(k);
        return it == kv.end() ? std::string() : it->second;
    };
    JobRecord r;
    std::string id = get("JobId");
    if (id.empty()) throw Error("record without JobId", where, "JobId=N ...");
    std::string array_job = get("ArrayJobId");
    std::string array_task = get("ArrayTaskId");
    if (!array_job.empty() && !array_task.empty() && array_task != "N/A" &&
        array_task.find_first_not_of("0123456789") == std::string::npos)
        set_ids(r, array_job + "_" + array_task);
    else
        set_ids(r, id);
    r.raw_state = get("JobState");
    r.state = parse_job_state(r.raw_state);
    if (auto e = get("ExitCode"); !e.empty()) parse_exit(e, r);
    // The highest exit of the job's steps (job completion file): 0:125 is a step's cgroup OOM kill.
    if (get("DerivedExitCode") == "0:125") r.step_oom_killed = true;
    r.node_list = get("NodeList");
    r.start_time = get("StartTime");
    r.end_time = get("EndTime");
    r.reason = get("Reason");
    if (auto rt = get("RunTime"); !rt.empty()) r.elapsed_s = parse_duration(rt);
    if (auto rs = get("Restarts"); !rs.empty() && rs.find_first_not_of("0123456789") == std::string::npos)
        r.restarts = std::stoi(rs);
    return r;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) return {};
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Seconds between two Slurm timestamps (YYYY-MM-DDTHH:MM:SS), local time.
double seconds_between(const std::string& a, const std::string& b) {
    auto parse = [](const std::string& t) -> std::optional<std::time_t> {
        std::tm tm{};
        if (t.size() < 19 || !strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return std::nullopt;
        tm.tm_isdst = -1;
        return std::mktime(&tm);
    };
    auto ta = parse(a), tb = parse(b);
    if (!ta || !tb) return 0;
    return std::difftime(*tb, *ta);
}

ProcessResult run_slurm(const std::vector<std::string>& argv) {
    ProcessOptions o;
    o.timeout = std::chrono::seconds(60);
    return run_process(argv, o);
}

bool matches(const JobRecord& r, const std::set<std::string>& ids) {
    return ids.count(r.job_id) || (!r.array_job_id.empty() && ids.count(r.array_job_id));
}

} // namespace

const char* squeue_format() {
    return "%i|%F|%K|%T|%r|%N|%M";
}
const char* sacct_format() {
    return "JobID,JobIDRaw,State,ExitCode,NodeList,ElapsedRaw,MaxRSS,Start,End";
}

std::string parse_sbatch_parsable(const std::string& out) {
    auto ls = lines(out);
    if (ls.empty()) throw Error("sbatch printed no job id", "sbatch --parsable", "a job id");
    std::string id = trim(ls.back().substr(0, ls.back().find(';')));
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
        throw Error("sbatch printed '" + ls.back() + "'", "sbatch --parsable", "a numeric job id");
    return id;
}

std::vector<JobRecord> parse_squeue(const std::string& out) {
    std::vector<JobRecord> records;
    for (const auto& line : lines(out)) {
        auto f = split(line, '|');
        if (f.size() < 7)
            throw Error("squeue line '" + line + "'", "squeue", std::string("fields ") + squeue_format());
        JobRecord r;
        set_ids(r, f[0]);
        if (f[2] != "N/A" && r.array_job_id.empty() && f[0].find('[') == std::string::npos) {
            r.array_job_id = f[1];
            r.array_task_id = std::stoi(f[2]);
            r.job_id = f[1] + "_" + f[2];
        }
        r.raw_state = f[3];
        r.state = parse_job_state(f[3]);
        r.reason = f[4];
        r.node_list = f[5];
        r.elapsed_s = parse_duration(f[6]);
        records.push_back(std::move(r));
    }
    return records;
}

std::vector<JobRecord> parse_sacct(const std::string& out) {
    std::vector<JobRecord> records;
    std::map<std::string, size_t> index;
    for (const auto& line : lines(out)) {
        auto f = split(line, '|');
        if (f.size() < 9)
            throw Error("sacct line '" + line + "'", "sacct -P", std::string("fields ") + sacct_format());
        const std::string& id = f[0];
        if (auto dot = id.find('.'); dot != std::string::npos) {
            // A step ("123_4.batch"): its MaxRSS belongs to the job; the job's peak is the largest step's.
            // A step OOM-killed (an srun step of a multi-node job, which ends the job FAILED) marks the job.
            auto it = index.find(id.substr(0, dot));
            if (it != index.end()) {
                auto rss = parse_rss(f[6]);
                auto& job = records[it->second];
                if (rss && (!job.max_rss_bytes || *rss > *job.max_rss_bytes)) job.max_rss_bytes = rss;
                if (parse_job_state(f[2]) == JobState::OutOfMemory || f[3] == "0:125")
                    job.step_oom_killed = true;
            }
            continue;
        }
        JobRecord r;
        set_ids(r, id);
        r.raw_state = f[2];
        r.state = parse_job_state(f[2]);
        parse_exit(f[3], r);
        r.node_list = f[4];
        r.elapsed_s = f[5].empty() ? 0 : std::stod(f[5]);
        r.max_rss_bytes = parse_rss(f[6]);
        r.start_time = f[7];
        r.end_time = f[8];
        index[r.job_id] = records.size();
        records.push_back(std::move(r));
    }
    return records;
}

std::vector<JobRecord> parse_jobcomp(const std::string& text) {
    // The file is appended in completion order; a requeued job appears again, and its last line wins.
    std::vector<JobRecord> records;
    std::map<std::string, size_t> index;
    int n = 0;
    for (const auto& line : lines(text)) {
        ++n;
        auto r = record_from_key_values(parse_key_values(line), "jobcomp line " + std::to_string(n));
        r.elapsed_s = seconds_between(r.start_time, r.end_time);
        if (auto it = index.find(r.job_id); it != index.end()) {
            // Each run Slurm requeued left a record of how it ended (NODE_FAIL, FAILED on a failed launch);
            // a requeue hold leaves a PENDING one, which is not a run.
            const auto& before = records[it->second];
            r.restarts = before.restarts + (is_finished(before.state) ? 1 : 0);
            records[it->second] = std::move(r);
        } else {
            index[r.job_id] = records.size();
            records.push_back(std::move(r));
        }
    }
    return records;
}

std::map<std::string, std::string> parse_scontrol_config(const std::string& out) {
    std::map<std::string, std::string> config;
    for (const auto& line : lines(out)) {
        auto eq = line.find(" = ");
        if (eq == std::string::npos) continue;
        config[trim(line.substr(0, eq))] = trim(line.substr(eq + 3));
    }
    return config;
}

Client::Client() = default;

std::string Client::submit(const SubmitRequest& q) const {
    std::vector<std::string> argv{"sbatch", "--parsable"};
    auto opt = [&](const std::string& flag, const std::string& value) {
        if (!value.empty()) argv.push_back(flag + "=" + value);
    };
    opt("--job-name", q.job_name);
    opt("--partition", q.partition);
    argv.push_back("--nodes=" + std::to_string(q.nodes));
    if (q.ntasks_per_node) argv.push_back("--ntasks-per-node=" + std::to_string(*q.ntasks_per_node));
    if (q.cpus_per_task) argv.push_back("--cpus-per-task=" + std::to_string(*q.cpus_per_task));
    opt("--mem", q.mem);
    opt("--time", q.time_limit);
    if (q.array) opt("--array", *q.array);
    opt("--output", q.output);
    opt("--error", q.error);
    opt("--chdir", q.workdir);
    if (q.hold) argv.push_back("--hold");
    if (q.requeue) argv.push_back(*q.requeue ? "--requeue" : "--no-requeue");
    for (const auto& a : q.extra_args)
        argv.push_back(a);
    argv.push_back(q.script);
    for (const auto& a : q.script_args)
        argv.push_back(a);

    ProcessOptions o;
    o.timeout = std::chrono::seconds(60);
    // The job inherits sbatch's environment (Slurm's default --export=ALL): the knob settings go there.
    o.env = q.env;
    auto r = run_process(argv, o);
    if (!r.ok())
        throw Error("sbatch refused the job: " + trim(r.err.empty() ? r.out : r.err), describe_command(argv));
    return parse_sbatch_parsable(r.out);
}

bool Client::accounting_works() const {
    if (!accounting_) {
        auto it = config().find("AccountingStorageType");
        accounting_ = it != config().end() && it->second != "accounting_storage/none";
    }
    return *accounting_;
}

const std::map<std::string, std::string>& Client::config() const {
    if (config_.empty()) {
        auto r = run_slurm({"scontrol", "show", "config"});
        if (!r.ok()) throw Error("cannot read Slurm's configuration: " + trim(r.err), "scontrol show config");
        config_ = parse_scontrol_config(r.out);
    }
    return config_;
}

std::vector<JobRecord> Client::query(const std::vector<std::string>& job_ids) const {
    std::set<std::string> ids(job_ids.begin(), job_ids.end());
    // Active jobs: all of squeue, filtered here, because squeue -j fails outright on a purged id.
    auto sq = run_slurm({"squeue", "-h", "-r", "-o", squeue_format()});
    if (!sq.ok()) throw Error("squeue failed: " + trim(sq.err), "squeue", "a reachable slurmctld");
    std::map<std::string, JobRecord> by_id;
    for (auto& r : parse_squeue(sq.out))
        if (matches(r, ids)) by_id[r.job_id] = std::move(r);

    std::vector<JobRecord> finished;
    if (accounting_works()) {
        std::string list;
        for (const auto& id : ids)
            list += (list.empty() ? "" : ",") + id;
        auto sa = run_slurm({"sacct", "-P", "-n", "-j", list, "-o", sacct_format()});
        if (!sa.ok()) throw Error("sacct failed: " + trim(sa.err), "sacct");
        finished = parse_sacct(sa.out);
    } else if (auto it = config().find("JobCompLoc");
               it != config().end() && config().at("JobCompType") == "jobcomp/filetxt") {
        finished = parse_jobcomp(read_file(it->second));
    }
    for (auto& r : finished) {
        if (!matches(r, ids) || !is_finished(r.state)) continue;
        auto it = by_id.find(r.job_id);
        // A live state wins (a requeued job runs again), except COMPLETING, whose final state is known.
        if (it == by_id.end() || it->second.state == JobState::Completing || is_finished(it->second.state))
            by_id[r.job_id] = std::move(r);
    }
    // Without accounting or a completion file, scontrol still knows jobs finished in the last MinJobAge.
    for (const auto& id : ids) {
        bool known =
            std::any_of(by_id.begin(), by_id.end(), [&](auto& kv) { return matches(kv.second, {id}); });
        if (known) continue;
        auto sc = run_slurm({"scontrol", "-o", "show", "job", id});
        if (!sc.ok()) continue;
        for (const auto& line : lines(sc.out)) {
            auto r = record_from_key_values(parse_key_values(line), "scontrol show job " + id);
            by_id[r.job_id] = std::move(r);
        }
    }
    std::vector<JobRecord> out;
    for (auto& [_, r] : by_id)
        out.push_back(std::move(r));
    std::sort(out.begin(), out.end(), [](const JobRecord& a, const JobRecord& b) {
        if (a.array_job_id != b.array_job_id) return a.job_id < b.job_id;
        return a.array_task_id.value_or(-1) < b.array_task_id.value_or(-1);
    });
    return out;
}

std::optional<std::string> parse_scontrol_stdout(const std::string& out) {
    for (const auto& line : lines(out)) {
        const auto kv = parse_key_values(line);
        if (auto it = kv.find("StdOut"); it != kv.end() && !it->second.empty()) return it->second;
    }
    return std::nullopt;
}

std::optional<std::string> Client::output_file(const std::string& job_id) const {
    auto r = run_slurm({"scontrol", "-o", "show", "job", job_id});
    if (!r.ok()) return std::nullopt;
    return parse_scontrol_stdout(r.out);
}

void Client::cancel(const std::string& job_id) const {
    auto r = run_slurm({"scancel", job_id});
    if (!r.ok()) throw Error("scancel failed: " + trim(r.err), "scancel " + job_id);
}

void Client::release(const std::string& job_id) const {
    auto r = run_slurm({"scontrol", "release", job_id});
    if (r.ok()) return;
    const std::string msg = trim(r.err.empty() ? r.out : r.err);
    // Slurm 22.05 refuses a finished job with "Job has already finished"; there is nothing left to release.
    if (msg.find("already finished") != std::string::npos) return;
    throw Error("cannot release job " + job_id + ": " + (msg.empty() ? "scontrol failed" : msg),
                "scontrol release " + job_id, "a job submitted held (sbatch --hold) that Slurm still knows");
}

std::vector<JobRecord> Client::wait(const std::string& job_id, std::chrono::seconds timeout,
                                    std::chrono::milliseconds poll) const {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto last_complaint = std::chrono::steady_clock::time_point{};
    std::vector<JobRecord> records;
    while (true) {
        try {
            records = query({job_id});
            bool done = !records.empty() && std::all_of(records.begin(), records.end(),
                                                        [](auto& r) { return is_finished(r.state); });
            if (done) return records;
        } catch (const Error& e) {
            // Slurm unreachable for a while is waited out, with a message now and then.
            auto now = std::chrono::steady_clock::now();
            if (now - last_complaint > std::chrono::seconds(30)) {
                std::fprintf(stderr, "infrarsi: waiting for Slurm: %s\n", e.what());
                last_complaint = now;
            }
        }
        if (std::chrono::steady_clock::now() > deadline) return records;
        std::this_thread::sleep_for(poll);
    }
}

bool Client::reachable(std::string* why) const {
    ProcessResult r;
    try {
        r = run_slurm({"scontrol", "ping"});
    } catch (const Error& e) { // no scontrol here: no Slurm to reach
        if (why) *why = e.what();
        return false;
    }
    bool up = r.ok() && r.out.find("UP") != std::string::npos;
    if (!up && why) *why = trim(r.err.empty() ? r.out : r.err);
    return up;
}

} // namespace infrarsi::slurm
