#include "agent/protocol.hpp"

#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/sha256.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

namespace infrarsi::agent {

using nlohmann::json;

namespace {

// A string field, bounded; nullopt when absent; throws Error when present but not a string or too long.
std::optional<std::string> text_field(const json& j, const char* name, std::size_t max_bytes) {
    const auto it = j.find(name);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) throw Error(fmt::format("'{}' is not a string", name));
    auto s = it->get<std::string>();
    if (s.size() > max_bytes) throw Error(fmt::format("'{}' is longer than {} bytes", name, max_bytes));
    return s;
}

// A positive finite factor (speed-up, memory factor), within what any change could do: [1/100, 100].
double factor_field(const json& j, const char* name) {
    const auto it = j.find(name);
    if (it == j.end() || it->is_null()) return 1.0;
    if (!it->is_number()) throw Error(fmt::format("claim '{}' is not a number", name));
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0.01 || v > 100)
        throw Error(fmt::format("claim '{}' is {} (a factor in [0.01, 100])", name, v));
    return v;
}

Claim read_claim(const json& j) {
    if (!j.is_object()) throw Error("'claim' is not an object");
    Claim c;
    c.speedup = factor_field(j, "speedup");
    c.memory_factor = factor_field(j, "memory_factor");
    if (const auto it = j.find("confidence"); it != j.end() && !it->is_null()) {
        if (!it->is_number()) throw Error("claim 'confidence' is not a number");
        c.confidence = it->get<double>();
        if (!std::isfinite(c.confidence) || c.confidence < 0 || c.confidence > 1)
            throw Error(fmt::format("claim 'confidence' is {} (in [0, 1])", c.confidence));
    }
    return c;
}

ProposedPatch read_patch(const json& j, const Limits& limits) {
    if (!j.is_object()) throw Error("not an object");
    ProposedPatch p;
    p.name = sanitize_name(text_field(j, "name", limits.max_text_bytes).value_or(""));
    p.description = text_field(j, "description", 4 * limits.max_text_bytes).value_or("");
    auto diff = text_field(j, "diff", limits.max_diff_bytes);
    if (!diff || diff->empty()) throw Error("no 'diff'");
    p.diff = std::move(*diff);
    if (p.diff.find('\0') != std::string::npos) throw Error("the diff holds a NUL byte");
    if (const auto it = j.find("claim"); it != j.end() && !it->is_null()) {
        p.claim = read_claim(*it);
        p.claimed = true;
    } else {
        p.claim.confidence = 0;
    }
    if (const auto it = j.find("tags"); it != j.end() && !it->is_null()) {
        if (!it->is_array() || it->size() > 16) throw Error("'tags' is not an array of at most 16 strings");
        for (const auto& t : *it) {
            if (!t.is_string()) throw Error("a tag is not a string");
            const auto tag = t.get<std::string>();
            if (std::find(kPatchTags.begin(), kPatchTags.end(), tag) == kPatchTags.end())
                throw Error(fmt::format("unknown tag '{}'", tag.substr(0, 64)));
            if (std::find(p.tags.begin(), p.tags.end(), tag) == p.tags.end()) p.tags.push_back(tag);
        }
    }
    return p;
}

} // namespace

Response parse_response(const std::string& text, const Limits& limits) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
        throw Error("the agent printed nothing", "agent stdout", "one JSON response document");
    const json j = parse_bounded_json(text, "agent stdout", "one JSON response document (docs/agent.md)",
                                      {.max_bytes = limits.max_response_bytes, .max_depth = 16});
    if (!j.is_object())
        throw Error("the response is not a JSON object", "agent stdout", "one JSON response document");
    if (const auto it = j.find("protocol"); it != j.end()) {
        if (!it->is_number_integer() || it->get<long long>() != kProtocolVersion)
            throw Error("the response is of another protocol version", "agent stdout",
                        fmt::format("\"protocol\": {}", kProtocolVersion));
    }
    Response r;
    if (const auto it = j.find("patches"); it != j.end() && !it->is_null()) {
        if (!it->is_array()) throw Error("'patches' is not an array", "agent stdout", "an array of patches");
        int i = 0;
        for (const auto& e : *it) {
            const std::string name =
                e.is_object() && e.contains("name") && e["name"].is_string()
                    ? sanitize_name(e["name"].get<std::string>().substr(0, limits.max_text_bytes))
                    : "";
            if (static_cast<int>(r.patches.size()) >= limits.max_patches) {
                r.refused.push_back(
                    {i, name, fmt::format("over max_patches_per_call ({})", limits.max_patches)});
            } else {
                try {
                    r.patches.push_back(read_patch(e, limits));
                } catch (const Error& err) {
                    r.refused.push_back({i, name, "malformed: " + err.problem()});
                }
            }
            ++i;
        }
    }
    if (const auto it = j.find("knob_priors"); it != j.end() && !it->is_null()) {
        if (!it->is_array()) throw Error("'knob_priors' is not an array", "agent stdout", "an array");
        int i = 0;
        for (const auto& e : *it) {
            try {
                if (static_cast<int>(r.knob_priors.size()) >= limits.max_knob_priors)
                    throw Error(fmt::format("over {} knob priors", limits.max_knob_priors));
                if (!e.is_object()) throw Error("not an object");
                KnobPrior k;
                k.knob = text_field(e, "knob", 128).value_or("");
                const auto v = e.find("value");
                if (v == e.end()) throw Error("no 'value'");
                k.value = v->is_string() ? v->get<std::string>() : v->dump();
                if (k.knob.empty() || k.value.size() > 128)
                    throw Error("no 'knob', or a value over 128 bytes");
                k.claim = read_claim(e);
                r.knob_priors.push_back(std::move(k));
            } catch (const Error& err) {
                r.refused_priors.push_back({i, "", "malformed: " + err.problem()});
            }
            ++i;
        }
    }
    if (const auto it = j.find("usage"); it != j.end() && it->is_object()) {
        const auto& u = *it;
        if (const auto t = u.find("tokens");
            t != u.end() && t->is_number() && t->get<double>() >= 0 && t->get<double>() < 1e15)
            r.usage.tokens = static_cast<long long>(t->get<double>());
        if (const auto c = u.find("cost");
            c != u.end() && c->is_number() && std::isfinite(c->get<double>()) && c->get<double>() >= 0)
            r.usage.cost = c->get<double>();
        if (const auto m = u.find("model"); m != u.end() && m->is_string())
            r.usage.model = m->get<std::string>().substr(0, limits.max_text_bytes);
    }
    return r;
}

std::string sanitize_name(const std::string& name) {
    std::string out;
    for (const char ch : name) {
        const auto c = static_cast<unsigned char>(ch);
        if (std::isalnum(c))
            out += static_cast<char>(std::tolower(c));
        else if (!out.empty() && out.back() != '-')
            out += '-';
        if (out.size() >= 40) break;
    }
    while (!out.empty() && out.back() == '-')
        out.pop_back();
    return out.empty() ? "patch" : out;
}

std::string change_digest(const std::string& diff) {
    std::istringstream in(diff);
    std::string line, canon;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("+++ ", 0) == 0 || line.rfind("--- ", 0) == 0) {
            // The path without its timestamp; the a/ or b/ component stays (it is part of what patch reads).
            const auto tab = line.find('\t');
            canon += line.substr(0, tab) + "\n";
        } else if (line.rfind("@@", 0) == 0 || line.rfind("diff ", 0) == 0 || line.rfind("index ", 0) == 0) {
            continue; // positions and headers: not the change
        } else if (!line.empty() && (line[0] == '+' || line[0] == '-')) {
            canon += line + "\n";
        } else if (line.rfind("new file mode", 0) == 0 || line.rfind("deleted file mode", 0) == 0 ||
                   line.rfind("rename ", 0) == 0 || line.rfind("old mode", 0) == 0 ||
                   line.rfind("new mode", 0) == 0) {
            canon += line + "\n";
        }
    }
    return sha256_hex(canon);
}

json job_output(const std::string& text, std::size_t max_bytes) {
    const bool cut = text.size() > max_bytes;
    std::string kept = cut ? text.substr(0, max_bytes) : text;
    // Valid UTF-8 for the JSON writer: anything else becomes '?'.
    for (auto& ch : kept)
        if (static_cast<unsigned char>(ch) >= 0x80 ||
            (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t'))
            ch = '?';
    return {{"job_output", kept}, {"truncated", cut}};
}

} // namespace infrarsi::agent
