#include "store/agent_call_detail.hpp"

#include "store/record_json.hpp"

#include <algorithm>
#include <initializer_list>

namespace infrarsi::store {

using nlohmann::json;

namespace {

using internal::put;

// Takes `key` out of `j` into `v` when it is there and reads as T; otherwise it stays in `j` (the record's
// `other`).
template <class T> void take(json& j, const char* key, std::optional<T>& v) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    try {
        v = it->get<T>();
    } catch (const json::exception&) {
        return;
    }
    j.erase(it);
}

// The same for a list, each item read by `read` (nullopt, or a json::exception, for one it cannot read whole:
// then the list stays in `j` as it was).
template <class T, class Read>
void take_list(json& j, const char* key, std::optional<std::vector<T>>& v, Read read) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_array()) return;
    std::vector<T> items;
    try {
        for (const auto& x : *it) {
            auto item = read(x);
            if (!item) return;
            items.push_back(std::move(*item));
        }
    } catch (const json::exception&) {
        return;
    }
    v = std::move(items);
    j.erase(it);
}

// Whether `x` is an object of these keys, `required` among them: an item as this build writes it.
bool has_keys(const json& x, std::initializer_list<const char*> known,
              std::initializer_list<const char*> required) {
    if (!x.is_object()) return false;
    for (const auto& item : x.items())
        if (std::none_of(known.begin(), known.end(), [&](const char* n) { return item.key() == n; }))
            return false;
    return std::all_of(required.begin(), required.end(), [&](const char* r) { return x.contains(r); });
}

json refusal_json(const AgentRefusal& r) {
    json j = {{"index", r.index}, {"reason", r.reason}};
    put(j, "name", r.name);
    return j;
}

std::optional<AgentRefusal> refusal_from_json(const json& x) {
    if (!has_keys(x, {"index", "name", "reason"}, {"index", "reason"}) || !x["index"].is_number_integer())
        return std::nullopt;
    AgentRefusal r;
    r.index = x["index"].get<int>();
    if (x.contains("name")) r.name = x["name"].get<std::string>();
    r.reason = x["reason"].get<std::string>();
    return r;
}

std::optional<AgentKnobPrior> knob_prior_from_json(const json& x) {
    if (!has_keys(x, {"knob", "value", "claim"}, {"knob", "value", "claim"})) return std::nullopt;
    const auto& claim = x["claim"];
    if (!has_keys(claim, {"speedup", "memory_factor", "confidence"},
                  {"speedup", "memory_factor", "confidence"}))
        return std::nullopt;
    for (const auto& item : claim.items())
        if (!item.value().is_number()) return std::nullopt;
    return AgentKnobPrior{x["knob"].get<std::string>(), x["value"].get<std::string>(),
                          agent_claim_from_json(claim)};
}

template <class T, class Write> json list(const std::vector<T>& items, Write write) {
    json a = json::array();
    for (const auto& x : items)
        a.push_back(write(x));
    return a;
}

json knob_prior_json(const AgentKnobPrior& k) {
    return {{"knob", k.knob}, {"value", k.value}, {"claim", to_json(k.claim)}};
}

} // namespace

json to_json(const AgentClaim& c) {
    return {{"speedup", c.speedup}, {"memory_factor", c.memory_factor}, {"confidence", c.confidence}};
}

AgentClaim agent_claim_from_json(const json& j) {
    AgentClaim c;
    c.speedup = j.value("speedup", c.speedup);
    c.memory_factor = j.value("memory_factor", c.memory_factor);
    c.confidence = j.value("confidence", c.confidence);
    return c;
}

json to_json(const AgentCallDetail& d) {
    json j = d.other.is_object() ? d.other : json::object();
    put(j, "search_batches", d.search_batches);
    put(j, "seconds", d.seconds);
    put(j, "isolated", d.isolated);
    put(j, "isolation", d.isolation);
    put(j, "leftovers", d.leftovers);
    put(j, "stderr_tail", d.stderr_tail);
    if (d.refused_while_reading) j["refused_while_reading"] = list(*d.refused_while_reading, refusal_json);
    if (d.knob_priors) j["knob_priors"] = list(*d.knob_priors, knob_prior_json);
    if (d.refused_priors) j["refused_priors"] = list(*d.refused_priors, refusal_json);
    return j;
}

AgentCallDetail agent_call_detail_from_json(const json& from) {
    AgentCallDetail d;
    if (!from.is_object()) return d;
    json j = from;
    if (const auto it = j.find("search_batches"); it != j.end() && it->is_number_integer()) {
        d.search_batches = it->get<int>();
        j.erase(it);
    }
    if (const auto it = j.find("seconds"); it != j.end() && it->is_number()) {
        d.seconds = it->get<double>();
        j.erase(it);
    }
    take(j, "isolated", d.isolated);
    take(j, "isolation", d.isolation);
    if (const auto it = j.find("leftovers"); it != j.end() && it->is_number_integer()) {
        d.leftovers = it->get<int>();
        j.erase(it);
    }
    if (const auto it = j.find("stderr_tail"); it != j.end()) {
        d.stderr_tail = *it;
        j.erase(it);
    }
    take_list(j, "refused_while_reading", d.refused_while_reading, refusal_from_json);
    take_list(j, "knob_priors", d.knob_priors, knob_prior_from_json);
    take_list(j, "refused_priors", d.refused_priors, refusal_from_json);
    d.other = std::move(j);
    return d;
}

} // namespace infrarsi::store
