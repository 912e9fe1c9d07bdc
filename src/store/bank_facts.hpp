#pragma once
// What the experience bank gave a campaign and what the campaign gave it (campaign/bank_stage.cpp), columns
// of the run's row (schema 9; they were meta 'bank_seeds', 'agent_bank_pairs' and 'bank_ingested'): the seeds
// its search starts from, the agent's claims the bank saw measured on hardware like this, and whether its
// findings were recorded. The seeds and the pairs are each one JSON document of the shape the meta values
// had (to_json), read and written by the store alone.
#include "util/enum_names.hpp"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace infrarsi::store {

// A first candidate of the search from a verified finding of the bank (campaign/experience.hpp's Seed).
struct BankSeed {
    nlohmann::json candidate = nlohmann::json::object(); // space::Candidate::to_json()
    std::string reason;                                  // for the audit: where from, how adapted
    double weight = 0;
    bool hypothesis = false;
    nlohmann::json provenance = nlohmann::json::object(); // finding uid, campaign, trials, similarity, ...
    nlohmann::json other = nlohmann::json::object();      // keys of an older record this build does not know
};
nlohmann::json to_json(const BankSeed& s);
nlohmann::json to_json(const std::vector<BankSeed>& seeds); // the list, as the report shows it
// A list of seeds; an item that is not an object, or a list that is not one, is an Error.
std::vector<BankSeed> bank_seeds_from_json(const nlohmann::json& j);

// The agent's claims (claimed, measured factor) that earlier campaigns measured on hardware like this: its
// first call's claims are discounted by them (campaign/agent_stage.cpp, AgentStage::calibration).
struct MeasuredClaim {
    double claimed = 1;
    double measured = 1;
};
struct AgentBankPairs {
    std::vector<MeasuredClaim> speedup, memory;
};
nlohmann::json to_json(const AgentBankPairs& p);
// What it can read: a list that is not one, or a pair's factor that is not a number (1), reads as nothing.
AgentBankPairs agent_bank_pairs_from_json(const nlohmann::json& j);

// The campaign's findings recorded in the bank: what it had after a search run without verification
// (`run --no-verify`), or everything once it is done (a finding recorded before is not added twice).
enum class BankIngested { Searched, Done };
inline constexpr util::EnumNames<BankIngested, 2> bank_ingested_names{
    {{{BankIngested::Searched, "searched"}, {BankIngested::Done, "done"}}}};

} // namespace infrarsi::store
