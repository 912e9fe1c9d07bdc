#pragma once
// A campaign and the experience bank: what a finished campaign teaches the bank, and what the bank gives a
// new campaign to start from. Only verified findings become seeds; a seed from unseen hardware is a
// hypothesis that goes through the same trials and verification as any other candidate.
// It sees a campaign through CampaignView (its contract, store and memory estimate), not the Campaign class:
// the campaign depends on this file, never the other way round.
#include "bank/experience_bank.hpp"
#include "contract/contract.hpp"
#include "model/claim_calibration.hpp"
#include "space/space.hpp"
#include "store/campaign_store.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::campaign {

// What the bank needs of a campaign (Campaign::experience_view() makes one).
struct CampaignView {
    const contract::Contract* contract = nullptr;
    store::CampaignStore* store = nullptr;
    std::string id; // the campaign's id, for the findings' provenance
    // The contract's peak-memory estimate of a candidate (Campaign::memory_estimate); empty: none.
    std::function<std::optional<double>(const space::Candidate&)> memory_estimate;
    // The agent's claims against what trials measured (AgentStage::calibration's pairs): the bank keeps
    // them as an agent_calibration finding under the workload "agent:<name>".
    std::vector<model::ClaimPair> agent_speed_pairs{}, agent_memory_pairs{};
};

// The bank's workload name for an agent's calibration findings.
std::string agent_bank_workload(const std::string& agent_name);
// What the bank knows of an agent's claims on hardware like `here`: the pairs of its calibration findings,
// most similar hardware first, at most `max_pairs`.
struct AgentBankPairs {
    std::vector<model::ClaimPair> speed, memory;
    int findings = 0;
};
AgentBankPairs agent_pairs_from_bank(bank::ExperienceBank& bank, const std::string& agent_name,
                                     const bank::HardwareKey& here, std::size_t max_pairs = 32);

// The campaign's hardware as the bank keys it: the topology of the node its trials run on, from the
// plugin's allocation records in `spool_dir` when there are any (the first node's), else this host's own
// (the local cluster's nodes are this host); software stack with the baseline tree's hash as the workload
// version.
bank::HardwareKey campaign_hardware(const CampaignView& c, const std::string& spool_dir = "");

// What a campaign found (see docs/bank.md for the kinds): promoted candidates and their patches (verified),
// the memory model's correction and the noise calibration (verified), OOM thresholds (evidence only).
std::vector<bank::Finding> campaign_findings(const CampaignView& c);

struct BankIngest {
    int added = 0, known = 0;
};
// Records a campaign in the bank under campaign_hardware(c, spool_dir): the plugin's allocation records in
// spool_dir when there are any (the nodes they name, their noise calibrations), else this host as the node;
// then the campaign's findings.
BankIngest ingest_into_bank(bank::ExperienceBank& bank, const CampaignView& c,
                            const std::string& spool_dir = "");

struct Seed {
    space::Candidate candidate;
    std::string reason; // for the audit: where it came from, and how it was adapted
    double weight = 0;
    bool hypothesis = false;
    // Where it came from, machine-readable: finding uid, campaign, trials, origin cluster, similarity of
    // its hardware to this campaign's, its verified speed-up there, and the capacity rule applied (if any).
    nlohmann::json provenance = nlohmann::json::object();
};
// Up to max_seeds first candidates from verified findings of the same workload on similar hardware. A
// capacity-dependent setting is carried as a rule relative to memory, not as a raw value:
//   - with the contract's memory estimate: when the inherited candidate's estimated peak (times the
//     finding's estimate_factor) would exceed its memory ratio (verified peak / limit, at least 0.5) of this
//     campaign's limit, the largest neighbour that keeps it is taken instead;
//   - without one: when this campaign's memory limit differs from the finding's limit_bytes, the capacity
//     settings are scaled by the ratio of the limits (space::scale_capacity).
// A finding from hardware less similar than bank::kSeenHardwareSimilarity is a hypothesis (Seed::hypothesis,
// and the reason says so): it runs as a search trial after the doctor's re-baseline and is promoted only
// through the same verification as any other candidate.
std::vector<Seed> seeds_from_bank(bank::ExperienceBank& bank, const CampaignView& c,
                                  const bank::HardwareKey& hardware, int max_seeds = 4);

} // namespace infrarsi::campaign
