#include "bank/similarity.hpp"

#include "patch/hash.hpp"
#include "util/error.hpp"

#include <cmath>
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <set>

namespace infrarsi::bank {

nlohmann::json to_json(const HardwareKey& k) {
    nlohmann::json j = {{"topology", node::to_json(k.topology)},
                        {"accelerator_memory_bytes", k.accelerator_memory_bytes},
                        {"stack",
                         {{"compiler", k.stack.compiler},
                          {"mpi", k.stack.mpi},
                          {"nccl", k.stack.nccl},
                          {"workload", k.stack.workload}}}};
    // Only when known: a key without them keeps the fingerprint it had before they existed.
    if (!k.gpu_model.empty()) j["gpu_model"] = k.gpu_model;
    if (!k.gpu_interconnect.empty()) j["gpu_interconnect"] = k.gpu_interconnect;
    return j;
}

std::string gpu_model_of(const node::TopologyFeatures& t) {
    std::set<std::pair<uint16_t, uint16_t>> ids;
    for (const auto& g : t.gpus)
        if (g.pci_vendor || g.pci_device) ids.insert({g.pci_vendor, g.pci_device});
    if (ids.empty()) return {};
    if (ids.size() > 1) return "mixed";
    return fmt::format("pci {:04x}:{:04x}", ids.begin()->first, ids.begin()->second);
}

std::string node_interconnect(const node::TopologyFeatures& t) {
    bool network = false;
    for (const auto& n : t.nics) {
        if (n.kind == "openfabrics") return "rdma";
        network = network || n.kind == "network";
    }
    return network ? "ethernet" : "none";
}

HardwareKey hardware_key_from_json(const nlohmann::json& j) {
    try {
        HardwareKey k;
        k.topology = node::topology_from_json(j.at("topology"));
        k.accelerator_memory_bytes = j.at("accelerator_memory_bytes").get<double>();
        const auto& s = j.at("stack");
        k.stack = {s.at("compiler").get<std::string>(), s.at("mpi").get<std::string>(),
                   s.at("nccl").get<std::string>(), s.at("workload").get<std::string>()};
        k.gpu_model = j.value("gpu_model", std::string());
        k.gpu_interconnect = j.value("gpu_interconnect", std::string());
        if (k.accelerator_memory_bytes < 0 || !std::isfinite(k.accelerator_memory_bytes))
            throw Error("bad hardware key: accelerator_memory_bytes is negative or not finite",
                        "experience bank", "the memory of one GPU in bytes, 0 when unknown");
        return k;
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("bad hardware key: ") + e.what(), "experience bank",
                    "topology, accelerator_memory_bytes and stack{compiler,mpi,nccl,workload}");
    }
}

std::string fingerprint(const HardwareKey& k) {
    auto j = to_json(k);
    j["topology"].erase("source"); // where the topology was read from is not what it is
    return patch::hash_text(j.dump()).substr(0, 16);
}

double similarity(const HardwareKey& a, const HardwareKey& b) {
    auto va = node::feature_vector(a.topology), vb = node::feature_vector(b.topology);
    va.push_back(std::log2(1 + a.accelerator_memory_bytes / (1024.0 * 1024 * 1024)));
    vb.push_back(std::log2(1 + b.accelerator_memory_bytes / (1024.0 * 1024 * 1024)));
    double d2 = 0;
    for (size_t i = 0; i < va.size(); ++i)
        d2 += (va[i] - vb[i]) * (va[i] - vb[i]);
    const auto model = [](const HardwareKey& k) {
        return k.gpu_model.empty() ? gpu_model_of(k.topology) : k.gpu_model;
    };
    const std::string ma = model(a), mb = model(b);
    if (!ma.empty() && !mb.empty() && ma != mb)
        d2 += 2;
    else if (ma.empty() != mb.empty())
        d2 += 0.5;
    if (node_interconnect(a.topology) != node_interconnect(b.topology)) d2 += 1;
    if (!a.gpu_interconnect.empty() && !b.gpu_interconnect.empty() &&
        a.gpu_interconnect != b.gpu_interconnect)
        d2 += 1;
    double s = std::exp(-0.5 * d2);
    for (bool differs : {a.stack.compiler != b.stack.compiler, a.stack.mpi != b.stack.mpi,
                         a.stack.nccl != b.stack.nccl, a.stack.workload != b.stack.workload})
        if (differs) s *= 0.9;
    return s;
}

} // namespace infrarsi::bank
