#include "node/allocation_record.hpp"

#include "node/gpu_peaks.hpp"

#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"
#include "util/printable.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi::node {
namespace {

template <class T> T field(const nlohmann::json& j, const char* name) {
    return json_field<T>(j, name, "allocation record");
}

uint32_t id_field(const nlohmann::json& j, const char* name) {
    return json_field<uint32_t>(j, name, "allocation record");
}

} // namespace

nlohmann::json to_json(const AllocationRecord& r) {
    nlohmann::json j = {{"format", kAllocationRecordFormat},
                        {"job_id", r.job_id},
                        {"array_job_id", r.array_job_id},
                        {"array_task_id", r.array_task_id},
                        {"step_id", r.step_id},
                        {"node", r.node},
                        {"time", r.time},
                        {"mode", r.mode},
                        {"plugin_version", r.plugin_version},
                        {"record_ms", r.record_ms},
                        {"topology", to_json(r.topology)},
                        {"calibration", to_json(r.calibration)}};
    if (r.gpu) j["gpu"] = to_json(*r.gpu);
    if (r.nccl_allreduce) j["nccl_allreduce"] = to_json(*r.nccl_allreduce);
    return j;
}

std::string to_json_line(const AllocationRecord& r) {
    // dump() without indent escapes control characters, so the line has no raw newline inside.
    return to_json(r).dump() + "\n";
}

AllocationRecord record_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw Error("a record must be a JSON object", "allocation record");
    auto format = field<std::string>(j, "format");
    if (format != kAllocationRecordFormat)
        throw Error("unknown format '" + format + "'", "allocation record", kAllocationRecordFormat);
    AllocationRecord r;
    r.job_id = id_field(j, "job_id");
    r.array_job_id = id_field(j, "array_job_id");
    r.array_task_id = id_field(j, "array_task_id");
    r.step_id = id_field(j, "step_id");
    r.node = field<std::string>(j, "node");
    r.time = field<std::string>(j, "time");
    r.mode = field<std::string>(j, "mode");
    r.plugin_version = field<std::string>(j, "plugin_version");
    r.record_ms = field<double>(j, "record_ms");
    if (!(r.record_ms >= 0)) throw Error("record_ms must be >= 0", "allocation record");
    if (r.job_id == 0) throw Error("job_id must be > 0", "allocation record");
    if (r.node.empty() || r.node.size() > 256 || !printable(r.node))
        throw Error("node must be a non-empty printable name", "allocation record");
    if (r.time.size() != 20 || r.time[10] != 'T' || r.time.back() != 'Z')
        throw Error("time '" + r.time + "' is not UTC ISO 8601", "allocation record", "YYYY-MM-DDTHH:MM:SSZ");
    if (r.mode != "record" && r.mode != "trial" && r.mode != "tune")
        throw Error("mode '" + r.mode + "' is not record, trial or tune", "allocation record");
    r.topology = topology_from_json(field<nlohmann::json>(j, "topology"));
    r.calibration = calibration_from_json(field<nlohmann::json>(j, "calibration"));
    if (j.contains("gpu")) r.gpu = gpu_calibration_from_json(j.at("gpu"));
    if (j.contains("nccl_allreduce")) r.nccl_allreduce = nccl_allreduce_from_json(j.at("nccl_allreduce"));
    return r;
}

AllocationRecord parse_record_line(const std::string& line) {
    // A record comes from another host's plugin, possibly another build: bounded like any outside JSON.
    return record_from_json(parse_bounded_json(line, "allocation record", "one JSON record per line",
                                               {.max_bytes = kMaxRecordLineBytes}));
}

namespace {

// Opens a file root may write in the spool: never a FIFO or device (O_NONBLOCK: a FIFO with no reader fails
// with ENXIO instead of blocking), never through a symlink, only a regular file with one link owned by root
// (or by this process, for unprivileged runs and tests).
UniqueFd open_own_regular(const std::string& path, int flags, unsigned mode) {
    UniqueFd f(::open(path.c_str(), flags | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode));
    if (!f) throw Error(std::string("cannot open: ") + std::strerror(errno), path, "a regular file");
    struct stat st {};
    if (::fstat(f.get(), &st) != 0) throw Error(std::string("fstat: ") + std::strerror(errno), path);
    if (!S_ISREG(st.st_mode))
        throw Error("is not a regular file; refusing to write it", path, "a regular file");
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
        throw Error("is owned by uid " + std::to_string(st.st_uid) + "; refusing to write it", path,
                    "owned by root");
    if (st.st_nlink != 1) throw Error("has several hard links; refusing to write it", path, "a single link");
    return f;
}

} // namespace

void append_record(const std::string& path, const AllocationRecord& r, unsigned mode,
                   std::chrono::milliseconds lock_wait) {
    const std::string line = to_json_line(r);
    // Writers serialise on a lock file only its owner can open (0600 in a directory only root writes), never
    // on the records file everyone may read: a user's flock on that file must not stall a job's start. And
    // never an unbounded wait: a busy lock past `lock_wait` skips this record.
    const std::string lock_path = path + ".lock";
    UniqueFd lock = open_own_regular(lock_path, O_RDONLY, 0600);
    ::fchmod(lock.get(), 0600);
    const auto deadline = std::chrono::steady_clock::now() + lock_wait;
    while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR)
            throw Error(std::string("flock: ") + std::strerror(errno), lock_path);
        if (std::chrono::steady_clock::now() >= deadline)
            throw Error("the lock is busy; record not written", lock_path,
                        "released within " + std::to_string(lock_wait.count()) + " ms");
        ::usleep(5000);
    }
    UniqueFd f = open_own_regular(path, O_WRONLY | O_APPEND, mode);
    write_all(f.get(), line, path);
}

RecordReadResult read_records(const std::string& path) {
    RecordReadResult out;
    // Line by line in bounded chunks (the file grows with every allocation), never blocking on a FIFO.
    for_each_line(path, kMaxRecordLineBytes, [&](std::size_t no, std::string_view line, bool cut) {
        if (line.empty() && !cut) return;
        try {
            if (cut)
                throw Error("a line longer than " + std::to_string(kMaxRecordLineBytes) + " bytes",
                            "allocation record");
            out.records.push_back(parse_record_line(std::string(line)));
        } catch (const Error& e) {
            out.errors.push_back(path + ":" + std::to_string(no) + ": " + e.what());
        }
    });
    return out;
}

std::string utc_now_iso8601() {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::vector<std::string> slow_gpu_nodes(const std::vector<AllocationRecord>& records) {
    std::map<std::string, const AllocationRecord*> latest;
    for (const auto& r : records) {
        if (!r.gpu || r.gpu->status != GpuProbeStatus::ok || r.gpu->gpus.empty()) continue;
        auto& slot = latest[r.node];
        if (!slot || slot->time <= r.time) slot = &r;
    }
    std::vector<std::string> names;
    std::vector<double> figures;
    for (const auto& [node, r] : latest) {
        double sum = 0;
        for (const auto& g : r->gpu->gpus)
            sum += g.gemm_tflops.median;
        names.push_back(node);
        figures.push_back(sum / static_cast<double>(r->gpu->gpus.size()));
    }
    std::vector<std::string> slow;
    for (int i : slower_than_median(figures))
        slow.push_back(names[static_cast<size_t>(i)]);
    return slow;
}

std::vector<AllocationRecord> records_of_jobs(const std::vector<AllocationRecord>& records,
                                              const std::set<std::string>& jobs) {
    std::vector<AllocationRecord> out;
    for (const auto& r : records) {
        const auto job = r.array_job_id
                             ? std::to_string(r.array_job_id) + "_" + std::to_string(r.array_task_id)
                             : std::to_string(r.job_id);
        if (jobs.count(job)) out.push_back(r);
    }
    return out;
}

std::optional<double> calibration_peak_flops(const AllocationRecord& r) {
    // The vector FMA probe where the record has it (the peak a GEMM can reach), else the scalar one (an older
    // plugin's record: far below what a vectorized training step achieves).
    const auto& v = r.calibration.vector_gflops;
    const auto& g = !v.samples.empty() && v.max > 0 ? v : r.calibration.compute_gflops;
    if (g.samples.empty() || !(g.max > 0) || r.topology.cores == 0) return std::nullopt;
    return g.max * 1e9 * r.topology.cores;
}

std::optional<NodePeak> node_peak_flops(const AllocationRecord& r) {
    if (r.gpu && r.gpu->status == GpuProbeStatus::ok && !r.gpu->gpus.empty()) {
        double tflops = 0;
        std::set<std::string> sources;
        for (const auto& g : r.gpu->gpus) {
            const auto p = gpu_peak(g, "bf16");
            if (!p) return std::nullopt;
            tflops += p->tflops;
            sources.insert(p->source);
        }
        std::string source;
        for (const auto& s : sources)
            source += (source.empty() ? "" : "; ") + s;
        return NodePeak{tflops * 1e12, std::to_string(r.gpu->gpus.size()) + " GPU(s), " + source, true};
    }
    if (const auto p = calibration_peak_flops(r))
        return NodePeak{*p,
                        r.calibration.vector_gflops.samples.empty()
                            ? "CPU calibration (the fastest scalar FMA sample x cores)"
                            : "CPU calibration (the fastest " + r.calibration.vector_isa +
                                  " single-precision FMA sample x cores)",
                        false};
    return std::nullopt;
}

} // namespace infrarsi::node
