#include "slurm/client.hpp"

#include "util/error.hpp"
#include "util/process.hpp"

#include "util/fd.hpp"
#include "util/number.hpp"
#include "util/text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

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

// Every number in Slurm's output is parsed whole and in range; a line with one that is not is skipped and
// counted by its parser (BadLine), never fatal: one odd job must not stop every campaign reading the queue.
struct BadLine {
    std::string why;
};

// Slurm's job, array job and task ids: uint32 (slurm.h), as decimal text.
bool valid_job_id(std::string_view s) {
    return parse_integer<uint32_t>(s).has_value();
}

int int_field(const std::string& text, const char* what) {
    auto v = parse_integer<int>(text);
    if (!v) throw BadLine{std::string("bad ") + what + " '" + text + "'"};
    return *v;
}

// "E:S" -> exit code and signal.
void parse_exit(const std::string& text, JobRecord& r) {
    auto colon = text.find(':');
    r.exit_code = int_field(text.substr(0, colon), "exit code");
    if (colon != std::string::npos) r.exit_signal = int_field(text.substr(colon + 1), "exit signal");
}

// squeue's %M / sacct's Elapsed: [D-][HH:]MM:SS
double parse_duration(const std::string& text) {
    if (text.empty() || text == "INVALID" || text == "N/A") return 0;
    double days = 0;
    std::string rest = text;
    if (auto dash = text.find('-'); dash != std::string::npos) {
        days = int_field(text.substr(0, dash), "duration");
        rest = text.substr(dash + 1);
    }
    double total = 0;
    auto parts = split(rest, ':');
    if (parts.size() > 3) throw BadLine{"bad duration '" + text + "'"};
    for (const auto& part : parts) {
        auto v = parse_finite(part, 0, 1e9);
        if (!v) throw BadLine{"bad duration '" + text + "'"};
        total = total * 60 + *v;
    }
    return total + days * 86400.0;
}

// "1234K", "12.5M", "3G", "1024" (plain numbers are KiB: sacct prints KiB without a suffix).
std::optional<long long> parse_rss(const std::string& text) {
    if (text.empty()) return std::nullopt;
    double mult = 1024;
    std::string number = text;
    switch (text.back()) {
    case 'K':
        mult = 1024;
        break;
    case 'M':
        mult = 1024.0 * 1024;
        break;
    case 'G':
        mult = 1024.0 * 1024 * 1024;
        break;
    case 'T':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
    default:
        break;
    }
    if (!std::isdigit(static_cast<unsigned char>(text.back()))) number.pop_back();
    // At most 1 EiB: anything larger is not a process's memory, and would not fit a long long.
    auto v = parse_finite(number, 0, 1024.0 * 1024 * 1024 * 1024 * 1024 * 1024 / mult);
    if (!v) throw BadLine{"bad memory size '" + text + "'"};
    return static_cast<long long>(*v * mult);
}

// "123_4" -> array job 123, task 4; "123" -> plain job; "123_[4-7]" (pending tasks) -> as is.
void set_ids(JobRecord& r, const std::string& id) {
    auto us = id.find('_');
    if (us == std::string::npos) {
        if (!valid_job_id(id)) throw BadLine{"bad job id '" + id + "'"};
        r.job_id = id;
        return;
    }
    const std::string array = id.substr(0, us), task = id.substr(us + 1);
    if (!valid_job_id(array)) throw BadLine{"bad job id '" + id + "'"};
    r.job_id = id;
    if (task.starts_with('[')) return;
    auto t = parse_integer<int>(task, 0);
    if (!t) throw BadLine{"bad array task id '" + id + "'"};
    r.array_job_id = array;
    r.array_task_id = *t;
}

// Slurm's "Key=Value Key=Value ..." lines (jobcomp/filetxt, scontrol show -o). Values may be empty and may
// contain spaces, and Slurm writes free text unescaped: the job's name (which a running job may change,
// `scontrol update JobName=`), its comment (the same), work dir, command and output paths. A name can hold
// " JobState=COMPLETED StartTime=... NodeList=n9 ..." or a whole forged record. So no key is trusted from
// inside free text, and none is guessed:
// - JobId is the line's first token, nothing else;
// - the array identity (ArrayJobId, ArrayTaskId) only from where Slurm alone writes it: jobcomp's tail,
//   after the last EligibleTime= (after every free-text field), or scontrol's head, before the name;
// - jobcomp (JobId UserId GroupId Name JobState Partition TimeLimit StartTime EndTime NodeList NodeCnt
// ProcCnt
//   WorkDir ... EligibleTime [ArrayJobId ArrayTaskId] DerivedExitCode ExitCode): the state, times and nodes
//   from the fixed run of keys that ends at the last WorkDir= (set at submission, before the job ran any
//   code), starting at the last JobState= before it; exit codes from the tail. A forged run inside the name
//   comes before the real one;
// - elsewhere (scontrol, whose name comes first and whose comment comes after the fields we read): a key we
//   read must occur once; a line where free text repeats one is ambiguous and skipped (BadLine), never read
//   by position (Client::query then asks squeue's JSON, which has no such ambiguity).
struct KeyValues {
    struct Key {
        std::string name, value;
    };
    std::vector<Key> keys; // in line order
    std::size_t count(std::string_view k) const {
        return static_cast<std::size_t>(
            std::count_if(keys.begin(), keys.end(), [&](const Key& x) { return x.name == k; }));
    }
    // Index of the last `k` in [from, to), or npos.
    std::size_t last(std::string_view k, std::size_t from = 0, std::size_t to = std::string::npos) const {
        for (std::size_t i = std::min(to, keys.size()); i > from; --i)
            if (keys[i - 1].name == k) return i - 1;
        return std::string::npos;
    }
};

KeyValues parse_key_values(const std::string& line) {
    struct At {
        std::string name;
        size_t start, value; // where " Key=" starts, where its value starts
    };
    std::vector<At> keys;
    // A key: start of line or after a blank, [A-Za-z][A-Za-z0-9_:/]*, then '='. A hand scan: std::regex
    // recurses per character and a long hostile line could exhaust the stack.
    for (size_t i = 0; i < line.size(); ++i) {
        if (i > 0 && line[i - 1] != ' ' && line[i - 1] != '\t') continue;
        if (!std::isalpha(static_cast<unsigned char>(line[i]))) continue;
        size_t j = i + 1;
        while (j < line.size() && (std::isalnum(static_cast<unsigned char>(line[j])) || line[j] == '_' ||
                                   line[j] == ':' || line[j] == '/'))
            ++j;
        if (j < line.size() && line[j] == '=') {
            keys.push_back({line.substr(i, j - i), i == 0 ? 0 : i - 1, j + 1});
            i = j;
        }
    }
    KeyValues kv;
    for (size_t i = 0; i < keys.size(); ++i) {
        size_t vend = i + 1 < keys.size() ? keys[i + 1].start : line.size();
        kv.keys.push_back(
            {keys[i].name, std::string(trim(line.substr(keys[i].value, vend - keys[i].value)))});
    }
    if (!keys.empty() && keys[0].start != 0) kv.keys.insert(kv.keys.begin(), {"", ""}); // no JobId first
    return kv;
}

// Where each field we read is taken from in one line (see KeyValues).
class FieldSource {
  public:
    explicit FieldSource(const KeyValues& kv) : kv_(kv) {
        constexpr auto npos = std::string::npos;
        const auto& k = kv.keys;
        for (std::size_t i = 0; i < k.size() && name_ == npos; ++i)
            if (k[i].name == "Name" || k[i].name == "JobName") name_ = i;
        if (name_ != npos && k[name_].name == "Name") {
            const auto workdir = kv.last("WorkDir");
            const auto state = workdir == npos ? npos : kv.last("JobState", name_ + 1, workdir);
            if (state != npos) {
                fixed_from_ = state;
                fixed_to_ = workdir;
                const auto eligible = kv.last("EligibleTime");
                tail_from_ = eligible != npos && eligible > workdir ? eligible + 1 : k.size();
            }
        }
    }
    // A field of the job's state: from jobcomp's fixed run or tail, else the one occurrence in the line.
    std::string get(const char* key) const {
        if (fixed_from_ != std::string::npos) {
            for (std::size_t i = fixed_from_; i < fixed_to_; ++i)
                if (kv_.keys[i].name == key) return kv_.keys[i].value;
            for (std::size_t i = tail_from_; i < kv_.keys.size(); ++i)
                if (kv_.keys[i].name == key) return kv_.keys[i].value;
            return {};
        }
        const auto n = kv_.count(key);
        if (n > 1)
            throw BadLine{std::string("the key ") + key +
                          "= occurs more than once (free text, a job's name or comment, repeats it): "
                          "ambiguous, not read"};
        return n == 1 ? kv_.keys[kv_.last(key)].value : std::string();
    }
    // The array identity: jobcomp's tail, or scontrol's head (before the name).
    std::string identity(const char* key) const {
        const auto& k = kv_.keys;
        if (fixed_from_ != std::string::npos) {
            for (std::size_t i = tail_from_; i < k.size(); ++i)
                if (k[i].name == key) return k[i].value;
            return {};
        }
        for (std::size_t i = 1; i < std::min(name_, k.size()); ++i)
            if (k[i].name == key) return k[i].value;
        return {};
    }

  private:
    const KeyValues& kv_;
    std::size_t name_ = std::string::npos;
    std::size_t fixed_from_ = std::string::npos, fixed_to_ = 0, tail_from_ = 0;
};

JobRecord record_from_key_values(const KeyValues& kv) {
    JobRecord r;
    const std::string id = !kv.keys.empty() && kv.keys[0].name == "JobId" ? kv.keys[0].value : std::string();
    if (!valid_job_id(id)) throw BadLine{"no JobId=N at the start of the line"};
    const FieldSource f(kv);
    std::string array_job = f.identity("ArrayJobId");
    std::string array_task = f.identity("ArrayTaskId");
    if (valid_job_id(array_job) && all_digits(array_task))
        set_ids(r, array_job + "_" + array_task);
    else
        set_ids(r, id);
    r.raw_state = f.get("JobState");
    r.state = parse_job_state(r.raw_state);
    if (auto e = f.get("ExitCode"); !e.empty()) parse_exit(e, r);
    // The highest exit of the job's steps (job completion file): 0:125 is a step's cgroup OOM kill.
    if (f.get("DerivedExitCode") == "0:125") r.step_oom_killed = true;
    r.node_list = f.get("NodeList");
    r.start_time = f.get("StartTime");
    r.end_time = f.get("EndTime");
    r.reason = f.get("Reason");
    if (auto rt = f.get("RunTime"); !rt.empty()) r.elapsed_s = parse_duration(rt);
    if (auto rs = parse_integer<int>(f.get("Restarts"), 0)) r.restarts = *rs;
    return r;
}

// Counts a skipped line in `stats` (when given), keeping the first reason.
void skip(ParseStats* stats, const std::string& where, const BadLine& bad) {
    if (!stats) return;
    if (stats->skipped++ == 0) stats->first_problem = where + ": " + bad.why;
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

std::vector<std::string> parse_sinfo_nodes(const std::string& out) {
    static const std::set<std::string> usable = {"idle", "mix", "alloc", "comp"};
    std::vector<std::string> nodes;
    std::set<std::string> seen;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        std::string node, state, extra;
        if (!(fields >> node >> state) || (fields >> extra)) continue; // not "NODE STATE": skipped
        if (usable.count(state) && seen.insert(node).second) nodes.push_back(node);
    }
    return nodes;
}

const char* squeue_format() {
    return "%i|%F|%K|%T|%r|%N|%M";
}
const char* sacct_format() {
    return "JobID,JobIDRaw,State,ExitCode,NodeList,ElapsedRaw,MaxRSS,Start,End";
}

std::string parse_sbatch_parsable(const std::string& out) {
    auto ls = lines(out);
    if (ls.empty()) throw Error("sbatch printed no job id", "sbatch --parsable", "a job id");
    const std::string id(trim(ls.back().substr(0, ls.back().find(';'))));
    if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
        throw Error("sbatch printed '" + ls.back() + "'", "sbatch --parsable", "a numeric job id");
    return id;
}

std::vector<JobRecord> parse_squeue(const std::string& out, ParseStats* stats) {
    std::vector<JobRecord> records;
    size_t n = 0;
    for (const auto& line : lines(out)) {
        ++n;
        try {
            auto f = split(line, '|');
            if (f.size() < 7) throw BadLine{std::string("fewer fields than ") + squeue_format()};
            JobRecord r;
            set_ids(r, f[0]);
            if (f[2] != "N/A" && r.array_job_id.empty() && f[0].find('[') == std::string::npos) {
                if (!valid_job_id(f[1])) throw BadLine{"bad array job id '" + f[1] + "'"};
                r.array_job_id = f[1];
                r.array_task_id = int_field(f[2], "array task id");
                r.job_id = f[1] + "_" + f[2];
            }
            r.raw_state = f[3];
            r.state = parse_job_state(f[3]);
            r.reason = f[4];
            r.node_list = f[5];
            r.elapsed_s = parse_duration(f[6]);
            records.push_back(std::move(r));
        } catch (const BadLine& bad) {
            skip(stats, "squeue line " + std::to_string(n), bad);
        }
    }
    return records;
}

namespace {

// A count in Slurm's JSON: a plain number (openapi v0.0.38, 22.05), or, from data_parser v0.0.40 on (23.11+),
// {"set": true, "infinite": false, "number": N}; unset, infinite or anything else is none.
std::optional<std::uint64_t> json_uint(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    if (it == j.end()) return std::nullopt;
    if (it->is_number_unsigned()) return it->get<std::uint64_t>();
    if (!it->is_object()) return std::nullopt;
    const auto set = it->find("set"), infinite = it->find("infinite"), number = it->find("number");
    if (set == it->end() || !set->is_boolean() || !set->get<bool>()) return std::nullopt;
    if (infinite != it->end() && (!infinite->is_boolean() || infinite->get<bool>())) return std::nullopt;
    if (number == it->end() || !number->is_number_unsigned()) return std::nullopt;
    return number->get<std::uint64_t>();
}

// job_state: a string (v0.0.38), or the base state and its flags (v0.0.40+: ["PENDING", "REQUEUED"]), read
// as squeue's text prints it (job_state_string: a flag in this order first, else the base state).
std::string json_job_state(const nlohmann::json& state) {
    if (state.is_string()) return state.get<std::string>();
    if (!state.is_array()) return {};
    static constexpr std::array<std::string_view, 12> kFlagsFirst = {
        "COMPLETING",   "STAGE_OUT",    "CONFIGURING", "RESIZING", "REQUEUED",      "REQUEUE_FED",
        "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED",     "REVOKED",  "RESV_DEL_HOLD", "SIGNALING"};
    std::vector<std::string> words;
    for (const auto& w : state)
        if (w.is_string()) words.push_back(w.get<std::string>());
    for (const auto flag : kFlagsFirst)
        if (std::find(words.begin(), words.end(), flag) != words.end()) return std::string(flag);
    for (const auto& w : words)
        if (parse_job_state(w) != JobState::Unknown) return w;
    return words.empty() ? std::string() : words.front();
}

struct JsonExit {
    int code = 0, signal = 0;
};
// exit_code / derived_exit_code: a wait status as the kernel gives it (v0.0.38: exit code in bits 8-15, else
// the signal in bits 0-6), or (v0.0.40+) {"status": [...], "return_code": N, "signal": {"id": N, "name": ""}}
// with N a count as json_uint reads it. Slurm's cgroup OOM mark 0:125 is signal 125 in both.
JsonExit json_exit(const nlohmann::json& e) {
    JsonExit out;
    if (e.is_number_unsigned()) {
        const auto status = e.get<std::uint64_t>();
        if (status > 0xffff) return out;
        if ((status & 0x7f) == 0)
            out.code = static_cast<int>(status >> 8);
        else
            out.signal = static_cast<int>(status & 0x7f);
        return out;
    }
    if (!e.is_object()) return out;
    if (const auto rc = json_uint(e, "return_code"); rc && *rc <= 255) out.code = static_cast<int>(*rc);
    if (const auto sig = e.find("signal"); sig != e.end() && sig->is_object())
        if (const auto id = json_uint(*sig, "id"); id && *id <= 255) out.signal = static_cast<int>(*id);
    return out;
}

// A pending array's task ids as Slurm writes them ("4-7%1", "0,3,8-9"; a step "0-9:2"), each; nullopt when
// the text is not that or names more than `max_tasks` (an array that large stays one record).
std::optional<std::vector<int>> pending_array_tasks(std::string text, long long max_tasks) {
    if (const auto pct = text.find('%'); pct != std::string::npos) text.resize(pct);
    std::vector<int> tasks;
    for (const auto& part : split(text, ',')) {
        const auto dash = part.find('-'), colon = part.find(':');
        const auto first = parse_integer<int>(part.substr(0, std::min(dash, colon)), 0);
        const auto last =
            dash == std::string::npos
                ? first
                : parse_integer<int>(part.substr(dash + 1, colon == std::string::npos ? std::string::npos
                                                                                      : colon - dash - 1),
                                     0);
        const auto step = colon == std::string::npos ? std::optional<int>(1)
                                                     : parse_integer<int>(part.substr(colon + 1), 1);
        if (!first || !last || !step || *last < *first ||
            static_cast<long long>(tasks.size()) + (*last - *first) / *step + 1 > max_tasks)
            return std::nullopt;
        for (long long t = *first; t <= *last; t += *step)
            tasks.push_back(static_cast<int>(t));
    }
    if (tasks.empty()) return std::nullopt;
    return tasks;
}

} // namespace

std::vector<JobRecord> parse_squeue_json(const std::string& out, ParseStats* stats) {
    std::vector<JobRecord> records;
    // Slurm's own JSON, but it carries every user's free text: bounded before anything recurses over it.
    constexpr std::size_t kMaxBytes = 256u << 20;
    constexpr int kMaxDepth = 32;
    if (out.size() > kMaxBytes) {
        skip(stats, "squeue --json", BadLine{fmt::format("{} bytes, more than {}", out.size(), kMaxBytes)});
        return records;
    }
    nlohmann::json doc;
    try {
        doc = nlohmann::json::parse(out, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
            if (depth > kMaxDepth) throw BadLine{fmt::format("nested deeper than {}", kMaxDepth)};
            return true;
        });
    } catch (const BadLine& bad) {
        skip(stats, "squeue --json", bad);
        return records;
    } catch (const nlohmann::json::exception& e) {
        skip(stats, "squeue --json", BadLine{e.what()});
        return records;
    }
    const auto jobs = doc.is_object() ? doc.find("jobs") : doc.end();
    if (!doc.is_object() || jobs == doc.end() || !jobs->is_array()) {
        skip(stats, "squeue --json",
             BadLine{"no \"jobs\" array (the layout of openapi v0.0.38 to data_parser v0.0.42)"});
        return records;
    }
    std::size_t n = 0;
    // Pending tasks listed one each, up to 100000 per array (MaxArraySize may be 4000001) and a million in
    // the whole answer (one user's jobs, --me); past that, an array stays one record.
    constexpr long long kMaxTasksPerArray = 100000;
    long long task_budget = 1000000;
    for (const auto& j : *jobs) {
        ++n;
        try {
            if (!j.is_object()) throw BadLine{"a job that is not an object"};
            const auto uint = [&](const char* key) { return json_uint(j, key); };
            const auto text = [&](const char* key) {
                const auto it = j.find(key);
                return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
            };
            const auto id = uint("job_id");
            if (!id || *id > UINT32_MAX) throw BadLine{"no job_id"};
            JobRecord r;
            std::optional<std::vector<int>> tasks; // a pending array's tasks, each to be listed
            const auto array_job = uint("array_job_id");
            const auto array_task = uint("array_task_id");
            if (array_job && *array_job > 0 && *array_job <= UINT32_MAX && array_task &&
                *array_task <= INT32_MAX)
                set_ids(r, fmt::format("{}_{}", *array_job, *array_task));
            else if (const auto pending = text("array_task_string");
                     array_job && *array_job > 0 && *array_job <= UINT32_MAX && !pending.empty()) {
                // Tasks not split off yet: one record each, as squeue -r lists them.
                tasks = pending_array_tasks(pending, std::min(kMaxTasksPerArray, task_budget));
                if (tasks) task_budget -= static_cast<long long>(tasks->size());
                if (!tasks) set_ids(r, fmt::format("{}_[{}]", *array_job, pending)); // too many: as squeue
            } else
                set_ids(r, std::to_string(*id));
            if (const auto it = j.find("job_state"); it != j.end()) r.raw_state = json_job_state(*it);
            r.state = parse_job_state(r.raw_state);
            r.node_list = text("nodes");
            r.reason = text("state_reason");
            if (const auto it = j.find("exit_code"); it != j.end()) {
                const auto e = json_exit(*it);
                r.exit_code = e.code;
                r.exit_signal = e.signal;
            }
            if (const auto it = j.find("derived_exit_code"); it != j.end() && json_exit(*it).signal == 125)
                r.step_oom_killed = true;
            if (const auto rc = uint("restart_cnt"); rc && *rc <= INT32_MAX)
                r.restarts = static_cast<int>(*rc);
            const auto start = uint("start_time"), end = uint("end_time");
            const auto stamp = [](std::uint64_t t) {
                const std::time_t tt = static_cast<std::time_t>(t);
                std::tm tm{};
                char buf[32] = {};
                if (t > 0 && ::localtime_r(&tt, &tm))
                    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
                return std::string(buf);
            };
            if (start) r.start_time = stamp(*start);
            if (end && is_finished(r.state)) r.end_time = stamp(*end);
            if (start && end && *start > 0 && *end >= *start && is_finished(r.state))
                r.elapsed_s = static_cast<double>(*end - *start);
            else if (start && *start > 0 && r.state == JobState::Running) // as squeue's %M: now - start
                r.elapsed_s =
                    std::max(0.0, std::difftime(std::time(nullptr), static_cast<std::time_t>(*start)));
            if (tasks) {
                for (const int t : *tasks) {
                    JobRecord task = r;
                    set_ids(task, fmt::format("{}_{}", *array_job, t));
                    records.push_back(std::move(task));
                }
                continue;
            }
            records.push_back(std::move(r));
        } catch (const BadLine& bad) {
            skip(stats, "squeue --json job " + std::to_string(n), bad);
        }
    }
    return records;
}

std::vector<JobRecord> parse_sacct(const std::string& out, ParseStats* stats) {
    std::vector<JobRecord> records;
    std::map<std::string, size_t> index;
    size_t n = 0;
    for (const auto& line : lines(out)) {
        ++n;
        try {
            auto f = split(line, '|');
            if (f.size() < 9) throw BadLine{std::string("fewer fields than ") + sacct_format()};
            const std::string& id = f[0];
            if (auto dot = id.find('.'); dot != std::string::npos) {
                // A step ("123_4.batch"): its MaxRSS belongs to the job; the job's peak is the largest
                // step's. A step OOM-killed (an srun step of a multi-node job, which ends the job FAILED)
                // marks the job.
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
            if (!f[5].empty()) {
                auto elapsed = parse_integer<long long>(f[5], 0);
                if (!elapsed) throw BadLine{"bad ElapsedRaw '" + f[5] + "'"};
                r.elapsed_s = static_cast<double>(*elapsed);
            }
            r.max_rss_bytes = parse_rss(f[6]);
            r.start_time = f[7];
            r.end_time = f[8];
            index[r.job_id] = records.size();
            records.push_back(std::move(r));
        } catch (const BadLine& bad) {
            skip(stats, "sacct line " + std::to_string(n), bad);
        }
    }
    return records;
}

namespace {
// Folds one completion line into `records`/`index` (the file is appended in completion order; a requeued job
// appears again, and its last line wins). False when the line is unreadable.
bool fold_jobcomp_line(const std::string& line, std::vector<JobRecord>& records,
                       std::map<std::string, size_t>& index,
                       const std::function<bool(const JobRecord&)>& keep, ParseStats* stats, size_t n) {
    JobRecord r;
    try {
        r = record_from_key_values(parse_key_values(line));
    } catch (const BadLine& bad) {
        skip(stats, "jobcomp line " + std::to_string(n), bad);
        return false;
    }
    if (keep && !keep(r)) return true;
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
    return true;
}
} // namespace

std::vector<JobRecord> parse_jobcomp(const std::string& text, ParseStats* stats) {
    std::vector<JobRecord> records;
    std::map<std::string, size_t> index;
    size_t n = 0;
    for (const auto& line : lines(text))
        fold_jobcomp_line(line, records, index, {}, stats, ++n);
    return records;
}

std::uint64_t job_number(const JobRecord& r) {
    const std::string& id = r.array_job_id.empty() ? r.job_id : r.array_job_id;
    return parse_integer<std::uint64_t>(id.substr(0, id.find('_'))).value_or(0);
}

void JobCompletionFile::read_new(std::uint64_t from_job, ParseStats* stats) {
    UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (!fd) return; // not there yet: no job has completed
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return;
    // Rotated or truncated (a new file, or a shorter one), or asked for older jobs than kept: from the start.
    const bool restart =
        st.st_ino != inode_ || static_cast<std::uint64_t>(st.st_size) < offset_ || from_job < from_job_;
    if (restart) {
        offset_ = 0;
        lines_ = 0;
        partial_.clear();
        records_.clear();
        index_.clear();
        inode_ = st.st_ino;
        from_job_ = from_job;
    }
    std::string chunk;
    char buf[1 << 16];
    while (true) {
        const ssize_t n = ::pread(fd.get(), buf, sizeof buf, static_cast<off_t>(offset_ + chunk.size()));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        chunk.append(buf, static_cast<size_t>(n));
    }
    offset_ += chunk.size();
    chunk.insert(0, partial_);
    // Only whole lines: Slurm may be writing the last one now.
    const auto last_newline = chunk.rfind('\n');
    partial_ = last_newline == std::string::npos ? chunk : chunk.substr(last_newline + 1);
    if (last_newline == std::string::npos) return;
    const std::string whole = chunk.substr(0, last_newline + 1);
    const std::uint64_t keep_from = from_job_;
    auto keep = [keep_from](const JobRecord& r) { return job_number(r) >= keep_from; };
    for (const auto& line : lines(whole))
        fold_jobcomp_line(line, records_, index_, keep, stats, ++lines_);
}

std::map<std::string, std::string> parse_scontrol_config(const std::string& out) {
    std::map<std::string, std::string> config;
    for (const auto& line : lines(out)) {
        auto eq = line.find(" = ");
        if (eq == std::string::npos) continue;
        config[std::string(trim(line.substr(0, eq)))] = std::string(trim(line.substr(eq + 3)));
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
        throw Error("sbatch refused the job: " + std::string(trim(r.err.empty() ? r.out : r.err)),
                    describe_command(argv));
    return parse_sbatch_parsable(r.out);
}

bool Client::accounting_works() const {
    if (!accounting_) {
        accounting_ = accounting_configured(config());
    }
    return *accounting_;
}

const std::map<std::string, std::string>& Client::config() const {
    if (config_.empty()) {
        auto r = run_slurm({"scontrol", "show", "config"});
        if (!r.ok())
            throw Error("cannot read Slurm's configuration: " + std::string(trim(r.err)),
                        "scontrol show config");
        config_ = parse_scontrol_config(r.out);
    }
    return config_;
}

bool accounting_configured(const std::map<std::string, std::string>& config) {
    // No accounting: 22.05 says accounting_storage/none, 24.11 "(null)".
    const auto it = config.find("AccountingStorageType");
    return it != config.end() && !it->second.empty() && it->second != "(null)" &&
           it->second != "accounting_storage/none";
}

std::optional<std::string> pinned_data_parser(const std::string& version) {
    // "slurm 24.11.5" or "24.11.5": the release's year and month.
    std::string v(trim(version));
    if (const auto sp = v.rfind(' '); sp != std::string::npos) v = v.substr(sp + 1);
    const auto parts = split(v, '.');
    if (parts.size() < 2) return std::nullopt;
    const auto year = parse_integer<int>(parts[0], 0), month = parse_integer<int>(parts[1], 0);
    if (!year || !month) return std::nullopt;
    const int release = *year * 100 + *month;
    // Each data_parser lives three releases: v0.0.41 came with 24.05 and goes after 25.05.
    if (release >= 2405 && release <= 2505) return "v0.0.41";
    if (release == 2511) return "v0.0.42";
    return std::nullopt; // 22.05's squeue --json takes no parser; 23.02 and 23.11 were not tested here
}

std::optional<std::string> Client::squeue_data_parser() const {
    if (!squeue_parser_) {
        auto r = run_slurm({"squeue", "--version"});
        squeue_parser_ = r.ok() ? pinned_data_parser(r.out).value_or("") : std::string();
    }
    if (squeue_parser_->empty()) return std::nullopt;
    return squeue_parser_;
}

std::vector<JobRecord> Client::query(const std::vector<std::string>& job_ids) const {
    std::set<std::string> ids(job_ids.begin(), job_ids.end());
    // Active jobs: this user's (--me), filtered here, because squeue -j fails outright on a purged id. Not
    // every user's: an operator does not want each campaign listing the whole queue at every poll.
    // Slurm's JSON with a pinned data_parser where this Slurm has one (its fields named, free text apart),
    // else the parsable text; a JSON answer Slurm refuses turns to the text for good.
    std::map<std::string, JobRecord> by_id;
    ParseStats stats;
    std::optional<std::vector<JobRecord>> active;
    if (const auto parser = squeue_data_parser()) {
        auto js = run_slurm({"squeue", "--me", "--json=" + *parser});
        if (js.ok()) {
            active = parse_squeue_json(js.out, &stats);
        } else {
            std::fprintf(stderr, "infrarsi: squeue --json=%s failed (%s): reading squeue's text instead\n",
                         parser->c_str(), std::string(trim(js.err)).c_str());
            squeue_parser_ = std::string();
        }
    }
    if (!active) {
        auto sq = run_slurm({"squeue", "--me", "-h", "-r", "-o", squeue_format()});
        if (!sq.ok())
            throw Error("squeue failed: " + std::string(trim(sq.err)), "squeue", "a reachable slurmctld");
        active = parse_squeue(sq.out, &stats);
    }
    for (auto& r : *active)
        if (matches(r, ids)) by_id[r.job_id] = std::move(r);

    std::vector<JobRecord> finished;
    if (accounting_works()) {
        std::string list;
        for (const auto& id : ids)
            list += (list.empty() ? "" : ",") + id;
        auto sa = run_slurm({"sacct", "-P", "-n", "-j", list, "-o", sacct_format()});
        if (!sa.ok()) throw Error("sacct failed: " + std::string(trim(sa.err)), "sacct");
        finished = parse_sacct(sa.out, &stats);
    } else if (auto it = config().find("JobCompLoc");
               it != config().end() && config().at("JobCompType") == "jobcomp/filetxt") {
        // Read incrementally: only what was appended since the last query, keeping the records of jobs
        // from the oldest one asked about (the file holds every job ever run on the cluster).
        if (!jobcomp_ || jobcomp_->path() != it->second) jobcomp_.emplace(it->second);
        std::uint64_t oldest = UINT64_MAX;
        for (const auto& id : ids)
            oldest = std::min(oldest, parse_integer<std::uint64_t>(id.substr(0, id.find('_'))).value_or(0));
        jobcomp_->read_new(oldest, &stats);
        finished = jobcomp_->records();
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
        ParseStats sc_stats;
        for (auto& r : parse_jobcomp(sc.out, &sc_stats))
            by_id[r.job_id] = std::move(r);
        if (sc_stats.skipped == 0) continue;
        // A line scontrol's text cannot tell (a name or comment repeating Slurm's keys): squeue's JSON, where
        // every field is its own (22.05: openapi v0.0.38; it lists every job slurmctld knows, whatever -j
        // says, so it is asked only here; 24.11: the pinned data_parser, every state).
        skip(&stats, "scontrol", BadLine{sc_stats.first_problem});
        // 24.11's JSON keeps squeue's filters, whose default is active jobs only: --states=all.
        const auto parser = squeue_data_parser();
        auto js = parser ? run_slurm({"squeue", "--states=all", "--json=" + *parser})
                         : run_slurm({"squeue", "--json"});
        if (!js.ok()) continue;
        for (auto& r : parse_squeue_json(js.out, &stats))
            if (matches(r, {id})) by_id[r.job_id] = std::move(r);
    }
    // Said once per new problem, not at every poll.
    if (stats.skipped && stats.first_problem != last_skip_report_) {
        std::fprintf(stderr, "infrarsi: skipped %zu unreadable line(s) of Slurm output (first: %s)\n",
                     stats.skipped, stats.first_problem.c_str());
        last_skip_report_ = stats.first_problem;
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
    // The last StdOut= of the line: scontrol prints it near the end, after the job's name, command and
    // working directory, which a user may fill with text that looks like keys.
    for (const auto& line : lines(out)) {
        const auto at = line.rfind(" StdOut=");
        if (at == std::string::npos) continue;
        std::string value = line.substr(at + 8);
        // Up to the next " Key=".
        for (std::size_t i = value.find(' '); i != std::string::npos; i = value.find(' ', i + 1)) {
            std::size_t j = i + 1;
            if (j >= value.size() || !std::isalpha(static_cast<unsigned char>(value[j]))) continue;
            while (j < value.size() && (std::isalnum(static_cast<unsigned char>(value[j])) ||
                                        value[j] == '_' || value[j] == ':' || value[j] == '/'))
                ++j;
            if (j < value.size() && value[j] == '=') {
                value.resize(i);
                break;
            }
        }
        value = std::string(trim(value));
        if (!value.empty()) return value;
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
    if (!r.ok()) throw Error("scancel failed: " + std::string(trim(r.err)), "scancel " + job_id);
}

void Client::release(const std::string& job_id) const {
    auto r = run_slurm({"scontrol", "release", job_id});
    if (r.ok()) return;
    const std::string msg(trim(r.err.empty() ? r.out : r.err));
    // Slurm 22.05 refuses a finished job with "Job has already finished"; there is nothing left to release.
    if (msg.find("already finished") != std::string::npos) return;
    throw Error("cannot release job " + job_id + ": " + (msg.empty() ? "scontrol failed" : msg),
                "scontrol release " + job_id, "a job submitted held (sbatch --hold) that Slurm still knows");
}

std::chrono::milliseconds next_poll_interval(std::chrono::milliseconds current,
                                             std::chrono::milliseconds poll, bool changed) {
    if (changed) return poll;
    return std::min(std::max(current * 2, poll), std::max(poll, kMaxPollInterval));
}

std::vector<JobRecord> Client::wait(const std::string& job_id, std::chrono::seconds timeout,
                                    std::chrono::milliseconds poll) const {
    using Clock = std::chrono::steady_clock;
    auto deadline = Clock::now() + timeout;
    auto last_complaint = Clock::time_point{};
    // The back-off outlives this call: a caller that waits in short slices does not reset it.
    auto& ps = polls_[job_id];
    if (ps.interval.count() == 0) ps.interval = poll;
    std::vector<JobRecord>& records = ps.records;
    while (true) {
        if (const auto next = ps.last + ps.interval; Clock::now() < next) {
            std::this_thread::sleep_until(std::min(next, deadline));
            if (Clock::now() < next) return records; // the last answer stands until the next poll is due
        }
        try {
            ps.last = Clock::now();
            records = query({job_id});
            std::string states;
            for (const auto& r : records)
                states += r.job_id + "=" + r.raw_state + ";";
            ps.interval = next_poll_interval(ps.interval, poll, states != ps.states);
            ps.states = std::move(states);
            bool done = !records.empty() && std::all_of(records.begin(), records.end(),
                                                        [](auto& r) { return is_finished(r.state); });
            if (done) {
                auto out = std::move(records);
                polls_.erase(job_id);
                return out;
            }
        } catch (const Error& e) {
            // Slurm unreachable for a while is waited out, with a message now and then.
            auto now = std::chrono::steady_clock::now();
            if (now - last_complaint > std::chrono::seconds(30)) {
                std::fprintf(stderr, "infrarsi: waiting for Slurm: %s\n", e.what());
                last_complaint = now;
            }
        }
        if (Clock::now() > deadline) return records;
    }
}

bool Client::reachable(std::string* why) const {
    // A SLURM_CONF that names no file: scontrol would first look for a configless controller (DNS SRV
    // records), which took 59 s to fail on a test host, at every look. No configuration is said at once.
    if (const char* conf = std::getenv("SLURM_CONF"); conf && *conf) {
        std::error_code ec;
        if (!std::filesystem::exists(conf, ec)) {
            if (why) *why = std::string("SLURM_CONF names no file (") + conf + ")";
            return false;
        }
    }
    ProcessResult r;
    try {
        r = run_slurm({"scontrol", "ping"});
    } catch (const Error& e) { // no scontrol here: no Slurm to reach
        if (why) *why = e.what();
        return false;
    }
    bool up = r.ok() && r.out.find("UP") != std::string::npos;
    if (!up && why) *why = std::string(trim(r.err.empty() ? r.out : r.err));
    return up;
}

} // namespace infrarsi::slurm
