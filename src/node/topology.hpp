#pragma once
// Hardware topology features of one node, read with hwloc: the key the experience bank files findings under
// and what the orchestrator uses to tell nodes apart. The same features come from the live machine, from a
// saved hwloc XML file or from a synthetic description, so tests and other clusters need no hardware.
#include <chrono>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::node {

// An OS device hwloc found below a PCI device (a GPU, a NIC, an InfiniBand HCA...).
struct OsDevice {
    std::string name;           // hwloc's OS name: "eth0", "mlx5_0", "cuda0", "nvidia0"
    std::string kind;           // "gpu", "coproc", "network", "openfabrics"
    std::string subtype;        // hwloc subtype where given: "CUDA", "NVML", "OpenCL"; else empty
    std::string pci_busid;      // "0000:3b:00.0", empty when hwloc found no PCI parent
    uint16_t pci_vendor = 0;    // PCI vendor id, 0 when unknown
    uint16_t pci_device = 0;    // PCI device id, 0 when unknown
    double pci_link_gbps = 0.0; // PCI link speed in GB/s as hwloc reports it, 0 when unknown
    bool operator==(const OsDevice&) const = default;
};

// How close a GPU and a NIC of the node are on the PCIe tree, in the words NVML uses between two GPUs
// (GpuLink): "pcie-switch" (at most one PCIe switch between them: GPUDirect RDMA's best case),
// "pcie-switches" (several switches, no host bridge), "host-bridge", "numa-node" (different host bridges of
// one NUMA node), "system" (across NUMA nodes or sockets).
inline constexpr std::string_view kNicLinkKinds[] = {"pcie-switch", "pcie-switches", "host-bridge",
                                                     "numa-node", "system"};
struct NicLink {
    std::string gpu; // the GPU's PCI bus id, else its OS name
    std::string nic; // the NIC's OS name: "mlx5_0", "ib0", "eth0"
    std::string kind;
    bool operator==(const NicLink&) const = default;
};

struct TopologyFeatures {
    unsigned packages = 0;
    unsigned numa_nodes = 0;
    unsigned cores = 0;
    unsigned pus = 0;
    // Size of one cache of each level in bytes (the first one hwloc lists; levels are uniform on the
    // machines this targets), 0 when the level is absent or its size unknown (synthetic topologies).
    uint64_t l1d_bytes = 0;
    uint64_t l2_bytes = 0;
    uint64_t l3_bytes = 0;
    unsigned l3_count = 0;              // how many L3 caches: cores sharing one L3 matters for placement
    uint64_t memory_bytes = 0;          // total memory of all NUMA nodes
    std::vector<OsDevice> gpus;         // one per physical GPU (PCI device), however many OS names it has
    std::vector<OsDevice> nics;         // network and openfabrics devices
    std::vector<NicLink> gpu_nic_links; // each GPU with each NIC, where hwloc placed both on the PCIe tree
    std::string source;                 // "live", "xml:<path>", "synthetic:<description>"
    bool operator==(const TopologyFeatures&) const = default;
};

// hwloc components never loaded for the live machine (slow or hanging: GPU vendors' ICDs, X servers).
inline constexpr const char* kExcludedHwlocComponents[] = {"opencl", "gl"};

// Reads the machine this runs on, including PCI and OS devices (GPUs, NICs). Throws infrarsi::Error.
TopologyFeatures topology_from_live();
// The same, bounded in time: the load runs in a child process, killed when `budget` passes (then Error). For
// callers that must not stall, such as the plugin in a job's slurmstepd.
TopologyFeatures topology_from_live(std::chrono::milliseconds budget);
// Reads a topology exported with `lstopo --of xml` or hwloc-gather-topology. Throws infrarsi::Error.
TopologyFeatures topology_from_xml(const std::string& path);
// Builds a synthetic topology such as "pack:2 numa:1 l3:1 core:8 pu:2" (sizes only where the description
// gives them, e.g. "l3:1(size=32MB)"). Throws infrarsi::Error for a description hwloc refuses.
TopologyFeatures topology_from_synthetic(const std::string& description);

nlohmann::json to_json(const TopologyFeatures& t);
// Validates as it reads: every field present with its type. Throws infrarsi::Error naming the field.
TopologyFeatures topology_from_json(const nlohmann::json& j);

// A fixed-length numeric description for similarity between nodes (the bank's nearest-topology lookup):
// log2(1 + x) of every count, size and PCI link speed, so that 16 vs 32 cores is as far as 32 vs 64 and a
// PCIe generation (twice the GB/s) is one unit like any other doubling; PUs per core as a plain ratio; and
// per-core quantities so that node size and node shape are separate coordinates. Names in feature_names(),
// same order (docs/bank.md lists them).
std::vector<double> feature_vector(const TopologyFeatures& t);
const std::vector<std::string>& feature_names();

} // namespace infrarsi::node
