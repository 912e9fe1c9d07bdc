#include "report/node_report.hpp"

#include "node/gpu_peaks.hpp"
#include "report/format.hpp"

#include <fmt/format.h>

namespace infrarsi::report {

nlohmann::json describe_node(const node::TopologyFeatures& topology, const node::Calibration& calibration,
                             const std::optional<node::GpuCalibration>& gpu,
                             const std::optional<node::NcclAllreduce>& allreduce) {
    nlohmann::json j = {{"format", format_json(kNodeFormat)},
                        {"topology", node::to_json(topology)},
                        {"calibration", node::to_json(calibration)}};
    if (gpu) {
        j["gpu"] = node::to_json(*gpu);
        nlohmann::json peaks = nlohmann::json::array();
        for (const auto& g : gpu->gpus) {
            const auto p = node::gpu_peak(g, "bf16");
            peaks.push_back(
                p ? nlohmann::json{{"index", g.index}, {"bf16_tflops", p->tflops}, {"source", p->source}}
                  : nlohmann::json{{"index", g.index}, {"bf16_tflops", nullptr}, {"source", "unknown"}});
        }
        j["gpu_peaks"] = peaks;
    }
    if (allreduce) j["nccl_allreduce"] = node::to_json(*allreduce);
    return j;
}

std::string render_node(const nlohmann::json& j) {
    std::string out;
    const auto& t = j.at("topology");
    out += fmt::format(
        "node: {} packages, {} NUMA nodes, {} cores, {} PUs, {:.1f} GiB memory, {} GPUs, {} NICs\n",
        t.value("packages", 0), t.value("numa_nodes", 0), t.value("cores", 0), t.value("pus", 0),
        t.value("memory_bytes", 0.0) / double(1ull << 30), t.at("gpus").size(), t.at("nics").size());
    // GPU-NIC paths from the topology (hwloc's PCIe tree): what GPUDirect RDMA and NCCL_NET_GDR_LEVEL depend
    // on.
    if (t.contains("gpu_nic_links"))
        for (const auto& l : t.at("gpu_nic_links"))
            out += fmt::format("  link gpu {} - nic {}: {}\n", l.value("gpu", std::string()),
                               l.value("nic", std::string()), l.value("kind", std::string()));
    const auto& c = j.at("calibration");
    out += fmt::format("cpu: {:.2f} GFLOP/s per core (cv {:.3f}), {:.2f} GB/s triad (cv {:.3f}), timer "
                       "overshoot {:.0f} us\n",
                       c.at("compute_gflops").value("median", 0.0), c.at("compute_gflops").value("cv", 0.0),
                       c.at("memory_gbs").value("median", 0.0), c.at("memory_gbs").value("cv", 0.0),
                       c.at("timer_overshoot_us").value("median", 0.0));
    if (c.contains("vector_gflops"))
        out += fmt::format("cpu vector ({}): {:.2f} single-precision GFLOP/s per core (cv {:.3f})\n",
                           c.value("vector_isa", std::string()), c.at("vector_gflops").value("median", 0.0),
                           c.at("vector_gflops").value("cv", 0.0));
    if (j.contains("nccl_allreduce")) out += render_nccl_allreduce(j.at("nccl_allreduce"));
    if (!j.contains("gpu")) return out;
    const auto& g = j.at("gpu");
    out += fmt::format("gpu probe: {} in {:.0f} ms of {:.0f}", g.at("status").get<std::string>(),
                       g.value("elapsed_ms", 0.0), g.value("budget_ms", 0.0));
    if (!g.value("driver", std::string()).empty())
        out += fmt::format(", driver {}, CUDA {}.{}", g.at("driver").get<std::string>(),
                           g.value("cuda_driver", 0) / 1000, g.value("cuda_driver", 0) % 1000 / 10);
    out += "\n";
    if (!g.value("detail", std::string()).empty()) out += "  " + g.at("detail").get<std::string>() + "\n";
    const auto& peaks = j.at("gpu_peaks");
    for (size_t i = 0; i < g.at("gpus").size(); ++i) {
        const auto& d = g.at("gpus")[i];
        out += fmt::format(
            "  gpu {}: {} ({:.1f} GiB, sm_{}, {} SMs, {} MHz), bf16 GEMM {:.1f} TFLOP/s (cv {:.3f}), "
            "copy {:.0f} GB/s (cv {:.3f}), {} NVLinks\n",
            d.value("index", 0), d.value("model", std::string("unknown model")),
            d.value("memory_bytes", 0.0) / double(1ull << 30), d.value("compute_capability", 0),
            d.value("multiprocessors", 0), d.value("sm_clock_max_mhz", 0),
            d.at("gemm_tflops").value("median", 0.0), d.at("gemm_tflops").value("cv", 0.0),
            d.at("memory_gbs").value("median", 0.0), d.at("memory_gbs").value("cv", 0.0),
            d.value("nvlinks_active", 0));
        if (i < peaks.size()) {
            const auto& p = peaks[i];
            out += p.at("bf16_tflops").is_number()
                       ? fmt::format("    MFU denominator: {:.1f} TFLOP/s bf16 ({})\n",
                                     p.at("bf16_tflops").get<double>(), p.at("source").get<std::string>())
                       : std::string("    MFU denominator: unknown (no datasheet entry, no probe)\n");
        }
    }
    for (const auto& l : g.at("links"))
        out += fmt::format("  link gpu {} - gpu {}: {}\n", l.value("a", 0), l.value("b", 0),
                           l.value("kind", std::string()));
    for (const auto& s : g.at("slow"))
        out += fmt::format("  SLOW: gpu {} is more than {}x slower than this node's median\n", s.get<int>(),
                           node::kSlowFactor);
    return out;
}

std::string render_nccl_allreduce(const nlohmann::json& j) {
    std::string out =
        fmt::format("nccl all-reduce: {} in {:.0f} ms of {:.0f}", j.value("status", std::string()),
                    j.value("elapsed_ms", 0.0), j.value("budget_ms", 0.0));
    const int version = j.value("version", 0);
    if (version > 0)
        out += fmt::format(", NCCL {}.{}.{}", version / 10000, version / 100 % 100, version % 100);
    if (j.value("status", std::string()) == "ok")
        out += fmt::format(", {} ranks, {:.0f} MiB: bus bandwidth {:.1f} GB/s (cv {:.3f})",
                           j.value("ranks", 0), j.value("bytes", 0.0) / double(1u << 20),
                           j.at("bus_gbs").value("median", 0.0), j.at("bus_gbs").value("cv", 0.0));
    out += "\n";
    if (!j.value("detail", std::string()).empty()) out += "  " + j.at("detail").get<std::string>() + "\n";
    return out;
}

} // namespace infrarsi::report
