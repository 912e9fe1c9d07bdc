// The doctor's NCCL transport check (trial/nccl_fallback.hpp): each baseline run's NCCL INFO output (the
// doctor runs it with NCCL_DEBUG=INFO) against what the nodes have (the plugin's allocation records in the
// spool, else this host's topology). A fallback stops the campaign before it tunes a baseline that runs on
// it.
#include "campaign/doctor_stage.hpp"

#include "node/allocation_record.hpp"
#include "node/topology.hpp"
#include "trial/nccl_fallback.hpp"
#include "trial/nccl_log.hpp"
#include "trial/result.hpp"
#include "util/error.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

namespace infrarsi::campaign {

namespace fs = std::filesystem;

namespace {

// A trial's log: the job writes it, so it is read bounded and without blocking (trial::read_trial_output).
std::string read_whole(const fs::path& file) {
    return trial::read_trial_output(file).text;
}

// The topologies of the nodes the runs used, from the plugin's records (all the records' nodes when none
// names one of them); this host's own where the spool has none (the local backend's trials run here).
std::vector<node::TopologyFeatures> run_topologies(const std::string& spool,
                                                   const std::set<std::string>& nodes) {
    std::vector<node::TopologyFeatures> mine, all;
    if (!spool.empty()) {
        const auto path = fs::path(spool) / "allocations.jsonl";
        if (fs::exists(path))
            for (const auto& r : node::read_records(path.string()).records) {
                all.push_back(r.topology);
                if (nodes.count(r.node)) mine.push_back(r.topology);
            }
    }
    if (!mine.empty()) return mine;
    if (!all.empty()) return all;
    try {
        return {node::topology_from_live(std::chrono::milliseconds(20000))};
    } catch (const Error&) {
        return {}; // no topology: no NICs known, so no sockets fallback can be told
    }
}

} // namespace

void DoctorStage::check_nccl_transport(const std::vector<store::TrialRow>& runs) {
    std::set<std::string> nodes;
    for (const auto& t : runs)
        if (!t.node.empty()) nodes.insert(t.node);
    const auto hardware =
        trial::nccl_hardware(run_topologies(c_.batches.evidence().spool, nodes), c_.contract.resources.nodes);
    nlohmann::json record = nlohmann::json::array();
    std::vector<std::string> problems;
    int with_lines = 0;
    for (const auto& t : runs) {
        const fs::path log = fs::path(t.result_path).parent_path() / "log.txt";
        const auto nccl = trial::read_nccl_log(read_whole(log));
        if (nccl.empty()) continue;
        ++with_lines;
        nlohmann::json fallbacks = nlohmann::json::array();
        for (const auto& f : trial::nccl_fallbacks(nccl, hardware)) {
            fallbacks.push_back(trial::to_json(f));
            if (problems.size() < 3) problems.push_back(fmt::format("trial {}: {}", t.id, f.message()));
        }
        record.push_back({{"trial", t.id}, {"nccl", trial::to_json(nccl)}, {"fallbacks", fallbacks}});
    }
    c_.store.set_meta(
        "nccl_transport",
        nlohmann::json({{"rdma_nics", hardware.rdma_nics}, {"nodes", hardware.nodes}, {"runs", record}})
            .dump());
    if (with_lines == 0) {
        c_.store.log(
            "doctor: the contract says the job uses NCCL, and no baseline run printed an NCCL INFO line "
            "(NCCL_DEBUG=INFO was set; a job script that sets NCCL_DEBUG itself, or a job that never "
            "made a communicator, prints none): the transport check had nothing to read");
        return;
    }
    if (problems.empty()) {
        c_.store.log(fmt::format("doctor: NCCL transports of {} baseline runs checked: no fallback{}",
                                 with_lines,
                                 hardware.rdma_nics.empty() ? " (no InfiniBand/RoCE NIC on the nodes)" : ""));
        return;
    }
    std::string all;
    for (const auto& p : problems)
        all += (all.empty() ? "" : "; ") + p;
    if (!c_.contract.nccl.stop_on_fallback) {
        c_.store.log("doctor: warning: NCCL fell back to a slower transport ([nccl] fallback = \"warn\"): " +
                     all);
        return;
    }
    throw Error(
        "the baseline's NCCL fell back to a slower transport than the nodes have: " + all, c_.dir.string(),
        "a baseline on the nodes' fastest transport (fix the job's NCCL setup and start a new campaign), "
        "or [nccl] fallback = \"warn\" in the contract to tune it as it is");
}

} // namespace infrarsi::campaign
