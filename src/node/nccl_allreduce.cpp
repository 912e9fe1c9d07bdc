#include "node/nccl_allreduce.hpp"

#include "node/cuda_call.hpp"
#include "node/gpu_libraries.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"
#include "util/number.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <thread>
#include <unistd.h>

namespace infrarsi::node {
namespace {

using Clock = std::chrono::steady_clock;
namespace abi = cuda_abi;
namespace fs = std::filesystem;

void check_nccl(const Nccl& nccl, abi::Status s, const char* call) {
    if (s == 0) return;
    const char* words = nccl.get_error_string ? nccl.get_error_string(s) : nullptr;
    throw CudaFailure{std::string(call) + ": " + (words ? words : "error " + std::to_string(s))};
}

// A stream and a buffer on one device, and the communicator that reduces it; released on every path out.
class RankState {
  public:
    RankState(const Cuda& cuda, const Nccl& nccl, int device, std::uint64_t bytes)
        : cuda_(cuda), nccl_(nccl), device_(device) {
        cuda.check(cuda.rt().set_device(device), "cudaSetDevice");
        buffer_.emplace(cuda, bytes);
        cuda.check(cuda.rt().memset(buffer_->get(), 0, bytes), "cudaMemset");
        cuda.check(cuda.rt().stream_create(&stream_), "cudaStreamCreate");
    }
    RankState(const RankState&) = delete;
    RankState& operator=(const RankState&) = delete;
    ~RankState() {
        if (comm_) nccl_.comm_destroy(comm_);
        if (stream_) cuda_.rt().stream_destroy(stream_);
    }
    abi::NcclComm* comm_slot() { return &comm_; }
    void all_reduce(std::uint64_t bytes) const {
        check_nccl(nccl_,
                   nccl_.all_reduce(buffer_->get(), buffer_->get(), bytes / sizeof(float), abi::kNcclFloat32,
                                    abi::kNcclSum, comm_, stream_),
                   "ncclAllReduce");
    }
    void synchronize() const {
        cuda_.check(cuda_.rt().set_device(device_), "cudaSetDevice");
        cuda_.check(cuda_.rt().stream_synchronize(stream_), "cudaStreamSynchronize");
    }

  private:
    const Cuda& cuda_;
    const Nccl& nccl_;
    int device_;
    std::optional<DeviceBuffer> buffer_;
    abi::Stream stream_ = nullptr;
    abi::NcclComm comm_ = nullptr;
};

// The largest all-reduce of at most `wanted` bytes (a multiple of 4, at least 1 MiB) that fits a quarter of
// the free memory of each of `devices`.
std::uint64_t fitting_bytes(const Cuda& cuda, const std::vector<int>& devices, std::uint64_t wanted) {
    std::uint64_t bytes = std::max<std::uint64_t>(wanted, 1u << 20) & ~std::uint64_t(3);
    for (int d : devices) {
        cuda.check(cuda.rt().set_device(d), "cudaSetDevice");
        size_t free = 0, total = 0;
        cuda.check(cuda.rt().mem_get_info(&free, &total), "cudaMemGetInfo");
        while (bytes > (1u << 20) && double(bytes) > double(free) / 4.0)
            bytes /= 2;
    }
    return bytes;
}

// One warm-up all-reduce (NCCL connects its channels then), one to size a sample, then `repeats` samples of
// k all-reduces each, by the wall clock after every stream is synchronized.
ProbeStats timed_allreduces(const std::function<void()>& once, unsigned repeats, double per_sample_ms,
                            std::uint64_t bytes, int ranks) {
    once();
    auto t = Clock::now();
    once();
    const double one = std::max(ms_since(t), 1e-3);
    const int k = static_cast<int>(std::clamp(per_sample_ms / one, 1.0, 50.0));
    std::vector<double> samples;
    for (unsigned r = 0; r < repeats; ++r) {
        t = Clock::now();
        for (int i = 0; i < k; ++i)
            once();
        const double ms = ms_since(t);
        if (ms > 0) samples.push_back(allreduce_bus_gbs(double(bytes), ms / 1e3 / k, ranks));
    }
    return summarize(std::move(samples));
}

std::string missing_libraries(const GpuLibraries& libs) {
    std::string why;
    for (const auto& m : libs.missing())
        why += (why.empty() ? "" : "; ") + m;
    return why;
}

// The probe `body` (which fills the record and may throw CudaFailure) with the common start: libraries,
// NCCL's version, the budget's clock.
NcclAllreduce
run_probe(const NcclProbeOptions& options,
          const std::function<void(NcclAllreduce&, const GpuLibraries&, Clock::time_point)>& body) {
    const auto t0 = Clock::now();
    NcclAllreduce r;
    r.budget_ms = static_cast<double>(options.budget.count());
    GpuLibraries libs(options.library_dirs, options.loader_path, /*with_nccl=*/true);
    if (!libs.has_runtime() || !libs.has_nccl()) {
        r.status = GpuProbeStatus::no_library;
        r.detail = missing_libraries(libs);
    } else {
        libs.nccl().get_version(&r.version);
        try {
            r.status = GpuProbeStatus::ok;
            body(r, libs, t0);
        } catch (const CudaFailure& f) {
            r.status = GpuProbeStatus::failed;
            r.detail = f.what;
        } catch (const Error& e) {
            r.status = GpuProbeStatus::failed;
            r.detail = e.what();
        }
    }
    r.elapsed_ms = ms_since(t0);
    return r;
}

// What is left of the budget for each timed sample: 60% of the rest, over the samples and the two sizing
// calls.
double per_sample_ms(const NcclProbeOptions& options, Clock::time_point t0) {
    const double left = std::max(0.0, double(options.budget.count()) - ms_since(t0));
    return left * 0.6 / (options.repeats + 2);
}

NcclAllreduce node_probe(const NcclProbeOptions& options) {
    return run_probe(options, [&](NcclAllreduce& r, const GpuLibraries& libs, Clock::time_point t0) {
        const Cuda cuda(libs.runtime());
        const Nccl& nccl = libs.nccl();
        int count = 0;
        if (const abi::Status s = libs.runtime().get_device_count(&count); s != 0 || count < 2) {
            r.status = GpuProbeStatus::no_gpu;
            r.detail = s != 0 ? fmt::format("cudaGetDeviceCount: {}", libs.runtime().get_error_string(s))
                              : fmt::format("an all-reduce needs two GPUs; this process sees {}", count);
            return;
        }
        std::vector<int> devices(static_cast<size_t>(count));
        for (int i = 0; i < count; ++i)
            devices[size_t(i)] = i;
        r.ranks = count;
        r.bytes = fitting_bytes(cuda, devices, options.bytes);
        std::vector<std::unique_ptr<RankState>> ranks;
        for (int d : devices)
            ranks.push_back(std::make_unique<RankState>(cuda, nccl, d, r.bytes));
        std::vector<abi::NcclComm> comms(devices.size(), nullptr);
        check_nccl(nccl, nccl.comm_init_all(comms.data(), count, devices.data()), "ncclCommInitAll");
        for (size_t i = 0; i < comms.size(); ++i)
            *ranks[i]->comm_slot() = comms[i];
        // Several devices from one thread: one group, so NCCL launches them together.
        auto once = [&] {
            check_nccl(nccl, nccl.group_start(), "ncclGroupStart");
            for (const auto& rank : ranks)
                rank->all_reduce(r.bytes);
            check_nccl(nccl, nccl.group_end(), "ncclGroupEnd");
            for (const auto& rank : ranks)
                rank->synchronize();
        };
        r.bus_gbs = timed_allreduces(once, options.repeats, per_sample_ms(options, t0), r.bytes, count);
    });
}

NcclAllreduce rank_probe(const NcclProbeOptions& options, const RankPlace& place,
                         const fs::path& rendezvous) {
    return run_probe(options, [&](NcclAllreduce& r, const GpuLibraries& libs, Clock::time_point t0) {
        if (place.ranks < 2 || place.rank < 0 || place.rank >= place.ranks || place.device < 0) {
            r.status = GpuProbeStatus::no_gpu;
            r.detail = fmt::format("an all-reduce needs two ranks; rank {} of {} (device {})", place.rank,
                                   place.ranks, place.device);
            return;
        }
        const Cuda cuda(libs.runtime());
        const Nccl& nccl = libs.nccl();
        r.ranks = place.ranks;
        int count = 0;
        if (const abi::Status st = libs.runtime().get_device_count(&count);
            st != 0 || place.device >= count) {
            r.status = GpuProbeStatus::no_gpu;
            r.detail = st != 0 ? fmt::format("cudaGetDeviceCount: {}", libs.runtime().get_error_string(st))
                               : fmt::format("rank {} wants device {}; this process sees {}", place.rank,
                                             place.device, count);
            return;
        }
        abi::NcclUniqueId id{};
        // Rank 0's id file goes when it leaves, whatever happened: once every rank has joined (or never
        // will), it has served its purpose, and no later run may find it.
        struct Unpublish {
            const fs::path* path = nullptr;
            ~Unpublish() {
                std::error_code ec;
                if (path) fs::remove(*path, ec);
            }
        } unpublish;
        if (place.rank == 0) {
            check_nccl(nccl, nccl.get_unique_id(&id), "ncclGetUniqueId");
            publish_unique_id(rendezvous, id);
            unpublish.path = &rendezvous;
        } else {
            const auto got = await_unique_id(rendezvous, t0 + options.budget);
            if (!got) {
                r.status = GpuProbeStatus::timed_out;
                r.detail = fmt::format("rank 0's NCCL id never appeared in {} within the budget",
                                       rendezvous.string());
                return;
            }
            id = *got;
        }
        // Every rank must reduce the same count, so none shrinks it by its own free memory: the option's
        // size, and a rank without room for it fails at cudaMalloc, which its record says.
        r.bytes = std::max<std::uint64_t>(options.bytes, 1u << 20) & ~std::uint64_t(3);
        RankState state(cuda, nccl, place.device, r.bytes);
        check_nccl(nccl, nccl.comm_init_rank(state.comm_slot(), place.ranks, id, place.rank),
                   "ncclCommInitRank");
        auto once = [&] {
            state.all_reduce(r.bytes);
            state.synchronize();
        };
        r.bus_gbs = timed_allreduces(once, options.repeats, per_sample_ms(options, t0), r.bytes, place.ranks);
    });
}

template <class T> T field(const nlohmann::json& j, const char* name) {
    return json_field<T>(j, name, "nccl all-reduce");
}

} // namespace

double allreduce_bus_gbs(double bytes, double seconds, int ranks) {
    if (seconds <= 0 || ranks < 1) return 0;
    return bytes / seconds / 1e9 * 2.0 * (ranks - 1) / ranks;
}

NcclAllreduce probe_nccl_allreduce_node(const NcclProbeOptions& options) {
    return run_bounded_probe<NcclAllreduce>(
        options.budget, [&] { return node_probe(options); }, nccl_allreduce_from_json,
        "NCCL all-reduce probe", "a hung driver");
}

NcclAllreduce probe_nccl_allreduce_rank(const NcclProbeOptions& options, const RankPlace& place,
                                        const fs::path& rendezvous) {
    return run_bounded_probe<NcclAllreduce>(
        options.budget, [&] { return rank_probe(options, place, rendezvous); }, nccl_allreduce_from_json,
        "NCCL all-reduce probe", "a rank that never joined, a hung driver");
}

SlurmRank slurm_rank(const std::function<const char*(const char*)>& env) {
    auto number = [&](const char* name, int lo) {
        const char* v = env(name);
        if (!v)
            throw Error(fmt::format("{} is not set", name), "nccl-probe",
                        "run it as the tasks of an srun step");
        const auto n = parse_integer<int>(v, lo, 1 << 20);
        if (!n) throw Error(fmt::format("{}={} is not a number of at least {}", name, v, lo), "nccl-probe");
        return *n;
    };
    SlurmRank r;
    r.place.rank = number("SLURM_PROCID", 0);
    r.place.ranks = number("SLURM_NTASKS", 1);
    if (r.place.rank >= r.place.ranks)
        throw Error(fmt::format("SLURM_PROCID {} is not below SLURM_NTASKS {}", r.place.rank, r.place.ranks),
                    "nccl-probe");
    const char* visible = env("CUDA_VISIBLE_DEVICES");
    const bool one_gpu = visible && *visible && std::string_view(visible).find(',') == std::string_view::npos;
    r.place.device = one_gpu ? 0 : number("SLURM_LOCALID", 0);
    r.rendezvous_name = fmt::format("nccl-id.{}.{}", number("SLURM_JOB_ID", 0), number("SLURM_STEP_ID", 0));
    return r;
}

std::string encode_unique_id(const abi::NcclUniqueId& id) {
    std::string out;
    out.reserve(2 * sizeof id.internal + 1);
    for (char c : id.internal)
        out += fmt::format("{:02x}", static_cast<unsigned char>(c));
    return out + "\n";
}

std::optional<abi::NcclUniqueId> decode_unique_id(std::string_view text) {
    if (text.size() != 2 * sizeof(abi::NcclUniqueId::internal) + 1 || text.back() != '\n')
        return std::nullopt;
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    abi::NcclUniqueId id{};
    for (size_t i = 0; i < sizeof id.internal; ++i) {
        const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        id.internal[i] = static_cast<char>(hi * 16 + lo);
    }
    return id;
}

void publish_unique_id(const fs::path& rendezvous, const abi::NcclUniqueId& id) {
    const fs::path tmp = rendezvous.string() + fmt::format(".{}.tmp", ::getpid());
    {
        UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!fd)
            throw Error(fmt::format("cannot create {}: {}", tmp.string(), std::strerror(errno)),
                        "nccl rendezvous");
        write_all(fd.get(), encode_unique_id(id), tmp.string());
        if (::fsync(fd.get()) != 0 || fd.close() != 0) {
            const std::string why = std::strerror(errno);
            ::unlink(tmp.c_str());
            throw Error(fmt::format("cannot write {}: {}", tmp.string(), why), "nccl rendezvous");
        }
    }
    // link() fails when the name exists: a stale id is never overwritten for ranks that may have read it.
    const int linked = ::link(tmp.c_str(), rendezvous.c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    if (linked != 0)
        throw Error(
            fmt::format("cannot publish {}: {}", rendezvous.string(), std::strerror(err)), "nccl rendezvous",
            err == EEXIST ? "a name no earlier run used (the job and step id); a stale file is never replaced"
                          : "");
}

std::optional<abi::NcclUniqueId> await_unique_id(const fs::path& rendezvous, Clock::time_point deadline) {
    for (;;) {
        std::error_code ec;
        if (fs::exists(fs::symlink_status(rendezvous, ec))) {
            // Published whole by link(): what is there is the id, or not an id at all.
            const std::string text = read_regular_file(
                rendezvous.string(), ReadLimits{.max_bytes = 1024, .follow_symlink = false});
            if (auto id = decode_unique_id(text)) return id;
            throw Error(rendezvous.string() + " is not an NCCL unique id", "nccl rendezvous");
        }
        if (Clock::now() >= deadline) return std::nullopt;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

nlohmann::json to_json(const NcclAllreduce& n) {
    return {{"status", to_string(n.status)},
            {"detail", n.detail},
            {"version", n.version},
            {"ranks", n.ranks},
            {"bytes", n.bytes},
            {"bus_gbs", to_json(n.bus_gbs)},
            {"elapsed_ms", n.elapsed_ms},
            {"budget_ms", n.budget_ms}};
}

NcclAllreduce nccl_allreduce_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw Error("an NCCL all-reduce record must be a JSON object", "nccl all-reduce");
    NcclAllreduce n;
    const auto status = gpu_probe_status_from_string(field<std::string>(j, "status"));
    if (!status)
        throw Error("field 'status' is not one of ok, no_gpu, no_library, failed, timed_out",
                    "nccl all-reduce");
    n.status = *status;
    n.detail = field<std::string>(j, "detail");
    n.version = field<int>(j, "version");
    n.ranks = field<int>(j, "ranks");
    n.bytes = field<std::uint64_t>(j, "bytes");
    n.bus_gbs = probe_stats_from_json(j, "bus_gbs", "nccl all-reduce");
    n.elapsed_ms = field<double>(j, "elapsed_ms");
    n.budget_ms = field<double>(j, "budget_ms");
    if (n.ranks < 0 || n.elapsed_ms < 0 || n.budget_ms < 0)
        throw Error("negative ranks, elapsed_ms or budget_ms", "nccl all-reduce");
    return n;
}

} // namespace infrarsi::node
