// The experience-bank stage: seeds for the search from what the bank knows of this hardware, once the doctor
// has re-baselined here; and, when the campaign is done, its verified findings recorded into the bank.
#include "campaign/campaign.hpp"

#include "bank/experience_bank.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace infrarsi::campaign {

using nlohmann::json;

CampaignView Campaign::experience_view() {
    CampaignView v;
    v.contract = &contract_;
    v.store = store_.get();
    v.id = store_->meta("id").value_or(dir_.string());
    v.memory_estimate = [this](const space::Candidate& c) { return memory_estimate(c); };
    if (!store_->agent_calls().empty()) {
        const auto pairs = agent_->own_pairs();
        v.agent_speed_pairs = pairs.speed;
        v.agent_memory_pairs = pairs.memory;
    }
    return v;
}

void Campaign::seed_from_bank(const RunOptions& o) {
    // The bank's seeds are looked up once, after the doctor has re-baselined on this hardware, and kept
    // in the store so a restarted campaign proposes the same ones.
    if (!o.bank.empty() && !store_->campaign_run().bank_seeds) {
        bank::ExperienceBank b(o.bank);
        const auto here = campaign_hardware(experience_view(), plugin_spool(scheduler(o), o));
        const auto known = b.match_hardware(here); // with or without findings for this workload
        store_->set_bank_hardware(known);
        auto seeds = seeds_from_bank(b, experience_view(), here);
        std::vector<store::BankSeed> kept;
        for (const auto& sd : seeds) {
            kept.push_back({.candidate = sd.candidate.to_json(),
                            .reason = sd.reason,
                            .weight = sd.weight,
                            .hypothesis = sd.hypothesis,
                            .provenance = sd.provenance});
            say(o, "seed: " + sd.candidate.describe() + ": " + sd.reason);
        }
        store_->set_bank_seeds(kept);
        if (contract_.agent.enabled()) {
            // The agent's claims on hardware like this, measured by earlier campaigns: its first call's
            // claims are discounted by them (AgentStage::calibration).
            const auto known_pairs = agent_pairs_from_bank(b, contract_.agent.name, here);
            store::AgentBankPairs pairs;
            for (const auto& p : known_pairs.speed)
                pairs.speedup.push_back({p.claimed, p.measured});
            for (const auto& p : known_pairs.memory)
                pairs.memory.push_back({p.claimed, p.measured});
            store_->set_agent_bank_pairs(pairs);
            if (known_pairs.findings > 0)
                say(o,
                    fmt::format("experience bank: agent {}: {} claims measured before on hardware like this",
                                contract_.agent.name, known_pairs.speed.size()));
        }
        store_->set_bank_path(o.bank);
        say(o, fmt::format("experience bank {}: {}; {} seeds for this hardware", o.bank,
                           bank::describe_match(known), seeds.size()));
    }
}

void Campaign::record_in_bank(const RunOptions& o) {
    // Once when the campaign is done; a campaign searched without verification (`run --no-verify`) records
    // what it has then (searched), and the rest, its verified settings, when `verify` finishes it (a finding
    // recorded before is known by its uid and not added twice).
    using store::BankIngested;
    const auto recorded = store_->campaign_run().bank_ingested;
    const auto now = finished() ? BankIngested::Done : BankIngested::Searched;
    if (!o.bank.empty() && recorded != BankIngested::Done && recorded != now) {
        bank::ExperienceBank b(o.bank);
        auto r = ingest_into_bank(b, experience_view(), plugin_spool(scheduler(o), o));
        store_->set_bank_ingested(now);
        say(o,
            fmt::format("experience bank {}: {} findings added, {} already known", o.bank, r.added, r.known));
    }
}

} // namespace infrarsi::campaign
