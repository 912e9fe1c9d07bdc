#pragma once
// The search space of a campaign: knobs (integer, power of two, choice, boolean), constants, constraints
// between them, and the candidate patches. A Candidate is one point: a knob setting plus a patch set.
// Encoding to features (for models): log2 for powers of two, scaled integers, one-hot for choices,
// 0/1 for booleans and one indicator per patch.
#include "util/enum_names.hpp"

#include <Eigen/Dense>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace infrarsi::space {

enum class KnobKind { Integer, Pow2, Choice, Bool };
// The contract's names of the kinds ("integer", "pow2", "choice", "bool"), printed and parsed from one table.
inline constexpr util::EnumNames<KnobKind, 4> knob_kind_names{{{
    {KnobKind::Integer, "integer"},
    {KnobKind::Pow2, "pow2"},
    {KnobKind::Choice, "choice"},
    {KnobKind::Bool, "bool"},
}}};
const char* to_string(KnobKind k);

// Integer and Pow2 knobs hold a long long, Choice a string, Bool a bool.
using Value = std::variant<long long, std::string, bool>;
std::string to_string(const Value& v); // "4", "selective", "true"
std::string env_value(const Value& v); // "4", "selective", "1"/"0"
nlohmann::json to_json(const Value& v);

// How a knob's value reaches the job; exactly one per knob (docs/contract.md, [knobs.NAME]).
enum class Delivery { Env, Arg, SbatchOption };

struct Knob {
    std::string name;
    KnobKind kind = KnobKind::Integer;
    long long min = 0, max = 0, step = 1; // Integer: min..max by step; Pow2: powers of two in [min, max]
    std::vector<std::string> choices;     // Choice
    Delivery delivery = Delivery::Env;
    std::string env; // Env: the environment variable that carries the value
    // Arg: the argv elements, "{}" in each replaced by the value: {"--batch_size={}"}, or {"-b", "{}"} for a
    // program that takes an option's value as the next word (llm.c)
    std::vector<std::string> arg;
    std::string sbatch_option; // SbatchOption: a long sbatch option of the trial ("--cpus-per-task")
    Value baseline;            // the user's current setting
    // Env delivery of a Choice knob: the choice that leaves the variable out of the trial's environment (the
    // job's own setting, or the library's default, applies). Empty: every choice sets the variable.
    std::string unset_choice;
    // The domain is computed, never stored: an integer knob 1 MiB..64 MiB by 1 has 64M values. size() and
    // at() in O(1) (Pow2: O(63)), saturating at UINT64_MAX; values ascend for Integer and Pow2.
    std::uint64_t size() const;
    Value at(std::uint64_t i) const;                             // i < size()
    std::optional<std::uint64_t> index_of(const Value& v) const; // nullopt: not in the domain
    bool allows(const Value& v) const { return index_of(v).has_value(); }
    // Every value, listed: for domains of at most kMaxListedValues (throws Error beyond).
    static constexpr std::uint64_t kMaxListedValues = 1u << 16;
    std::vector<Value> domain() const;
};

// product(factors) == rhs, or product(factors) <= rhs; rhs is a number or the name of a knob or constant.
struct Constraint {
    enum class Kind { ProductEquals, ProductAtMost };
    Kind kind = Kind::ProductEquals;
    std::vector<std::string> factors;
    std::string rhs_name; // empty: rhs_value
    long long rhs_value = 0;
    std::string text; // as written, for messages
};

using Config = std::map<std::string, Value>;

struct Candidate {
    Config knobs;
    std::vector<std::string> patches; // patch ids, sorted, distinct
    std::string key() const;          // canonical text, equal for equal candidates
    std::string describe() const;     // "micro_batch=4 recompute=none +fused_adam"
    nlohmann::json to_json() const;
    static Candidate from_json(const nlohmann::json& j);
    bool operator==(const Candidate& o) const { return key() == o.key(); }
};

class Space {
  public:
    std::vector<Knob> knobs;
    std::map<std::string, long long> constants;
    std::vector<Constraint> constraints;
    std::vector<std::string> patches; // patch ids a candidate may include (scope-checked before)

    const Knob* knob(const std::string& name) const;
    // Empty when feasible, else the first violated constraint's text.
    std::string violation(const Config& c) const;
    bool feasible(const Candidate& c) const { return violation(c.knobs).empty(); }
    Candidate baseline() const;
    // Every feasible candidate when there are at most `limit`; otherwise a uniform sample of `limit` of
    // them (deterministic in seed).
    std::vector<Candidate> enumerate(std::size_t limit = 100000, std::uint64_t seed = 1) const;
    // Feasible candidates one step away: one knob moved to an adjacent value, or one patch toggled. Where a
    // product constraint ties knobs, a move of one knob with a compensating move of another is included;
    // where no single compensation makes the move feasible, a compensating move of two knobs that share a
    // constraint with it (two ranks at a fixed global batch and core budget: accumulation and threads).
    std::vector<Candidate> neighbours(const Candidate& c) const;
    // The same, each with what was moved: a knob's name, or "+" and a patch's id for a patch toggled.
    struct Move {
        std::string what;
        Candidate to;
    };
    std::vector<Move> moves(const Candidate& c) const;
    Eigen::VectorXd encode(const Candidate& c) const;
    std::vector<std::string> feature_names() const;
    // The environment knobs' variables (KNOB_ENV=value) for a candidate; a knob at its unset_choice is left
    // out.
    std::map<std::string, std::string> environment(const Candidate& c) const;
    // The argument knobs' argv elements for a candidate, in knob declaration order. A bool knob whose
    // template has no "{}" is a flag: present when true, absent when false.
    std::vector<std::string> arguments(const Candidate& c) const;
    // The sbatch-option knobs' options for a candidate, in knob declaration order, as sbatch takes them:
    // "--cpus-per-task=2"; a bool knob is a flag ("--exclusive" when true, nothing when false).
    std::vector<std::string> sbatch_options(const Candidate& c) const;
    // Throws infrarsi::Error when a candidate names unknown knobs or patches or values out of range.
    void check(const Candidate& c) const;
    std::size_t cardinality() const; // size of the unconstrained product, saturating
};

} // namespace infrarsi::space
