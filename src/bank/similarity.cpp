#include "bank/similarity.hpp"

#include "patch/hash.hpp"
#include "util/error.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

namespace infrarsi::bank {

nlohmann::json to_json(const HardwareKey& k) {
    return {{"topology", node::to_json(k.topology)},
            {"accelerator_memory_bytes", k.accelerator_memory_bytes},
            {"stack",
             {{"compiler", k.stack.compiler},
              {"mpi", k.stack.mpi},
              {"nccl", k.stack.nccl},
              {"workload", k.stack.workload}}}};
}

HardwareKey hardware_key_from_json(const nlohmann::json& j) {
    try {
        HardwareKey k;
        k.topology = node::topology_from_json(j.at("topology"));
        k.accelerator_memory_bytes = j.at("accelerator_memory_bytes").get<double>();
        const auto& s = j.at("stack");
        k.stack = {s.at("compiler").get<std::string>(), s.at("mpi").get<std::string>(),
                   s.at("nccl").get<std::string>(), s.at("workload").get<std::string>()};
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
    double s = std::exp(-0.5 * d2);
    for (bool differs : {a.stack.compiler != b.stack.compiler, a.stack.mpi != b.stack.mpi,
                         a.stack.nccl != b.stack.nccl, a.stack.workload != b.stack.workload})
        if (differs) s *= 0.9;
    return s;
}

} // namespace infrarsi::bank
