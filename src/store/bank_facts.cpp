#include "store/bank_facts.hpp"

#include "store/record_json.hpp"
#include "util/error.hpp"
#include "util/json_field.hpp"

namespace infrarsi::store {

using internal::to_json_array;
using nlohmann::json;

json to_json(const BankSeed& s) {
    json j = s.other.is_object() ? s.other : json::object();
    j["candidate"] = s.candidate;
    j["reason"] = s.reason;
    j["weight"] = s.weight;
    j["hypothesis"] = s.hypothesis;
    j["provenance"] = s.provenance;
    return j;
}

json to_json(const std::vector<BankSeed>& seeds) {
    return to_json_array(seeds);
}

std::vector<BankSeed> bank_seeds_from_json(const json& j) {
    if (!j.is_array()) throw Error("the bank's seeds are not a list", "campaign.db, campaign_run.bank_seeds");
    std::vector<BankSeed> out;
    for (const auto& item : j) {
        if (!item.is_object())
            throw Error("a bank seed is not an object: " + item.dump(),
                        "campaign.db, campaign_run.bank_seeds");
        BankSeed s;
        json rest = item;
        // A key of another shape than this build writes stays in `other`, as it was.
        const auto take = [&rest](const char* key, auto is, auto& field) {
            if (const auto it = rest.find(key); it != rest.end() && ((*it).*is)()) {
                it->get_to(field);
                rest.erase(it);
            }
        };
        take("candidate", &json::is_object, s.candidate);
        take("reason", &json::is_string, s.reason);
        take("weight", &json::is_number, s.weight);
        take("hypothesis", &json::is_boolean, s.hypothesis);
        take("provenance", &json::is_object, s.provenance);
        s.other = std::move(rest);
        out.push_back(std::move(s));
    }
    return out;
}

json to_json(const AgentBankPairs& p) {
    const auto pair = [](const MeasuredClaim& c) -> json {
        return {{"claimed", c.claimed}, {"measured", c.measured}};
    };
    return {{"speedup", to_json_array(p.speedup, pair)}, {"memory", to_json_array(p.memory, pair)}};
}

AgentBankPairs agent_bank_pairs_from_json(const json& j) {
    AgentBankPairs p;
    const auto read = [&j](const char* key, std::vector<MeasuredClaim>& into) {
        if (!j.is_object() || !j.contains(key) || !j[key].is_array()) return;
        for (const auto& c : j[key])
            into.push_back({json_number_or(c, "claimed", 1.0), json_number_or(c, "measured", 1.0)});
    };
    read("speedup", p.speedup);
    read("memory", p.memory);
    return p;
}

} // namespace infrarsi::store
