#pragma once
// A campaign and the experience bank: what a finished campaign teaches the bank, and what the bank gives a
// new campaign to start from. Only verified findings become seeds; a seed from unseen hardware is a
// hypothesis that goes through the same trials and verification as any other candidate.
#include "bank/experience_bank.hpp"
#include "campaign/campaign.hpp"

#include <string>
#include <vector>

namespace infrarsi::campaign {

// The campaign's hardware as the bank keys it: the topology of the node its trials run on, from the
// plugin's allocation records in `spool_dir` when there are any (the first node's), else this host's own
// (the local cluster's nodes are this host); software stack with the baseline tree's hash as the workload
// version.
bank::HardwareKey campaign_hardware(Campaign& c, const std::string& spool_dir = "");

// What a campaign found (see docs/bank.md for the kinds): promoted candidates and their patches (verified),
// the memory model's correction and the noise calibration (verified), OOM thresholds (evidence only).
std::vector<bank::Finding> campaign_findings(Campaign& c);

struct BankIngest {
    int added = 0, known = 0;
};
BankIngest ingest_into_bank(bank::ExperienceBank& bank, Campaign& c, const bank::HardwareKey& hardware);

struct Seed {
    space::Candidate candidate;
    std::string reason; // for the audit: where it came from, and how it was adapted
    double weight = 0;
    bool hypothesis = false;
};
// Up to max_seeds first candidates from verified findings of the same workload on similar hardware. A
// capacity-dependent setting is carried as its memory ratio (verified peak / limit): when the inherited
// candidate's estimated peak would exceed that ratio of this campaign's limit, the nearest candidate that
// keeps it is taken instead.
std::vector<Seed> seeds_from_bank(bank::ExperienceBank& bank, Campaign& c, const bank::HardwareKey& hardware,
                                  int max_seeds = 4);

} // namespace infrarsi::campaign
