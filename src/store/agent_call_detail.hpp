#pragma once
// What one call of the campaign's agent left besides its row's columns (campaign/agent_stage.cpp): how many
// search batches had finished when it was made (it is called once after each), how the call ran (its time,
// its private view, the processes it left behind, its stderr's tail: the agent's words, marked as its own
// text by agent::job_output, kept as that made it and read by no one), what was refused
// while its answer was read, and its knob priors. Stored as one JSON document in agent_calls.detail (schema
// 5): the store alone writes and reads it, whole, and to_json writes the keys earlier builds wrote, so a
// record of any build reads back and the column needs no migration. Every field is optional: a call the
// orchestrator was killed in says less, and so may an older build's record.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace infrarsi::store {

// An agent's claimed effect of a change (one of its patches, or a knob's value), as the proposer's prior
// reads it; a key the agent left out is neutral.
struct AgentClaim {
    double speedup = 1.0;       // step time without / with
    double memory_factor = 1.0; // peak memory with / without
    double confidence = 0.5;
};
nlohmann::json to_json(const AgentClaim& c);
AgentClaim agent_claim_from_json(const nlohmann::json& j); // a key not there: its default

// One knob prior of an answer: the knob, its value (as the agent wrote it) and the claim.
struct AgentKnobPrior {
    std::string knob;
    std::string value;
    AgentClaim claim;
};

// An item of an answer refused while it was read: its index in the answer's array, a patch's name (a knob
// prior has none) and why.
struct AgentRefusal {
    int index = -1;
    std::optional<std::string> name;
    std::string reason;
};

struct AgentCallDetail {
    std::optional<int> search_batches;         // search batches finished when the call was made
    std::optional<double> seconds;             // the call's wall time
    std::optional<bool> isolated;              // it ran in the private view
    std::optional<std::string> isolation;      // how, or why not
    std::optional<int> leftovers;              // processes it left behind, killed
    std::optional<nlohmann::json> stderr_tail; // agent::job_output's {"job_output": text, "truncated": bool}
    std::optional<std::vector<AgentRefusal>> refused_while_reading; // patches
    std::optional<std::vector<AgentKnobPrior>> knob_priors;
    std::optional<std::vector<AgentRefusal>> refused_priors;
    // Keys this build does not know, and a known key whose value has another shape than this build writes
    // (kept as it was, not read).
    nlohmann::json other = nlohmann::json::object();
};

nlohmann::json to_json(const AgentCallDetail& d);
AgentCallDetail agent_call_detail_from_json(const nlohmann::json& j); // anything but an object: nothing

} // namespace infrarsi::store
