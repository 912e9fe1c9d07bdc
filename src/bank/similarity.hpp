#pragma once
// How alike two machines are, for the experience bank's nearest-hardware lookup. A finding from a machine
// counts for another in proportion to this, so it must be 1 for the same machine, fall smoothly as
// topology and software drift apart, and be near 0 for a different class of machine.
#include "node/topology.hpp"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace infrarsi::bank {

// The software a finding was measured under. A different MPI or workload version weakens a finding; it does
// not void it.
struct SoftwareStack {
    std::string compiler; // "g++ 12.2.0"
    std::string mpi;      // "Open MPI 4.1.4"
    std::string nccl;     // "2.18.3", empty without NCCL
    std::string workload; // workload name and version (e.g. hash of the baseline tree)
    bool operator==(const SoftwareStack&) const = default;
};

// What a bank entry is keyed by: one node's topology, its GPUs (model, memory of one GPU, how they are
// joined: hwloc does not always know these), and the software stack. The GPU fields are optional: a key
// without them (a CPU node, or a record with no GPU calibration) is written and fingerprinted as before they
// existed.
struct HardwareKey {
    node::TopologyFeatures topology;
    double accelerator_memory_bytes = 0; // memory of one GPU (accelerator), 0 without or unknown
    SoftwareStack stack;
    // The GPU model's name where a GPU calibration gave it ("NVIDIA H100 80GB HBM3"); empty otherwise, and
    // comparisons then use the topology's PCI ids (gpu_model_of).
    std::string gpu_model = {};
    std::string gpu_interconnect = {}; // between the GPUs of a node: "nvlink", "pcie"; empty when unknown
};

// "pci 10de:2330" when the topology's GPUs are all one PCI device id; "mixed" for several; empty without
// GPUs or PCI ids.
std::string gpu_model_of(const node::TopologyFeatures& t);
// How the node reaches other nodes, from its NICs: "rdma" (InfiniBand/RoCE: an openfabrics device),
// "ethernet" (network devices only), "none".
std::string node_interconnect(const node::TopologyFeatures& t);

nlohmann::json to_json(const HardwareKey& k);
HardwareKey hardware_key_from_json(const nlohmann::json& j); // validates; throws infrarsi::Error

// A stable hex digest of the key's content: the same hardware gets the same entry on every cluster.
std::string fingerprint(const HardwareKey& k);

// Similarity in (0, 1]: a Gaussian kernel over node::feature_vector() (log2 coordinates, so doubling the
// cores is one unit whatever the size) plus log2 of accelerator memory, with length scale 1 (one doubling of
// one feature gives exp(-1/2) = 0.61), plus categorical distances: another GPU model (both known) counts 2
// (x0.37: an A100's findings say little of an H100's speed), a GPU model known on one side only 0.5, another
// node interconnect (rdma/ethernet/none) 1 and another GPU interconnect (both known) 1; times 0.9 for each
// software component that differs.
double similarity(const HardwareKey& a, const HardwareKey& b);

// Below this, hardware counts as unseen: inherited candidates are hypotheses to re-verify on a fresh
// baseline.
inline constexpr double kSeenHardwareSimilarity = 0.5;

} // namespace infrarsi::bank
