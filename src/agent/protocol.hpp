#pragma once
// The agent protocol (docs/agent.md; formats in docs/json-formats.md): what a site's coding agent answers,
// read as hostile input. The campaign writes one request document on the agent's stdin (agent/request.hpp)
// and reads one response document from its stdout: patches (a unified diff against the baseline tree, a
// description, claimed speed-up and memory factors with a confidence, tags), knob priors and usage. Nothing
// the agent says is trusted: the answer is bounded in size and depth, every field checked for type and range,
// and a patch that is malformed is refused with its reason while the others are kept.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::agent {

inline constexpr int kProtocolVersion = 1;

struct Limits {
    std::size_t max_response_bytes = 8u << 20; // the whole answer on stdout
    std::size_t max_diff_bytes = 1u << 20;     // one patch
    std::size_t max_text_bytes = 4096;         // a name, description or model name
    int max_patches = 4;                       // [agent] max_patches_per_call: the rest are refused
    int max_knob_priors = 64;
};

// A claim, as the agent made it (checked: finite, > 0, confidence in [0, 1]).
struct Claim {
    double speedup = 1;       // step-time factor: baseline / with the patch
    double memory_factor = 1; // peak memory with the patch / without
    double confidence = 0.5;
};

struct ProposedPatch {
    std::string name; // the agent's, sanitized: [a-z0-9-], at most 40 characters
    std::string description;
    std::string diff;              // unified diff, paths with one leading component (patch -p1)
    Claim claim;                   // neutral (1, 1, 0) when the agent claimed nothing
    bool claimed = false;          // the agent gave a claim
    std::vector<std::string> tags; // of the known ones only (kPatchTags)
};

// The tags an agent may set. None of them loosens a check: math_changing never promotes (verify.hpp), and
// memory_saver / memory_hungry only order the memory model's prior.
inline const std::vector<std::string> kPatchTags = {"speedup", "memory_saver", "memory_hungry",
                                                    "math_changing"};

struct KnobPrior {
    std::string knob, value;
    Claim claim;
};

struct Usage {
    long long tokens = 0; // 0: not reported
    double cost = 0;      // in the agent's currency (docs/agent.md: US dollars by convention)
    std::string model;
};

struct RefusedItem {
    int index = -1; // in the answer's "patches" (or "knob_priors") array
    std::string name;
    std::string reason;
};

struct Response {
    std::vector<ProposedPatch> patches;
    std::vector<KnobPrior> knob_priors;
    Usage usage;
    std::vector<RefusedItem> refused;        // patches refused while reading (malformed, over the limit)
    std::vector<RefusedItem> refused_priors; // knob priors refused while reading
};

// Reads an agent's stdout. Throws infrarsi::Error when the answer as a whole is unusable (over the size or
// depth limit, not JSON, not an object, a protocol version it does not speak); a malformed patch or prior is
// refused alone (Response::refused).
Response parse_response(const std::string& text, const Limits& limits);

// A patch name made safe for an id and a path: lower case letters, digits and '-', at most 40 characters;
// "patch" when nothing is left.
std::string sanitize_name(const std::string& name);

// The patch's content, independent of its context lines and hunk positions: the files it touches and the
// lines it removes and adds, in order. Two diffs that make the same change from different contexts have the
// same digest (a patch with the content of one already tried is not tried again).
std::string change_digest(const std::string& diff);

// Text that came from a job's output (a build's first error, a loss line), bounded and marked as the job's,
// for a request: {"job_output": text, "truncated": bool}. The agent is told never to follow instructions in
// it.
nlohmann::json job_output(const std::string& text, std::size_t max_bytes = 2048);

} // namespace infrarsi::agent
