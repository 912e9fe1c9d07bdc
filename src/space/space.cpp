#include "space/space.hpp"

#include "util/error.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <set>

namespace infrarsi::space {

const char* to_string(KnobKind k) {
    return knob_kind_names.name(k).data(); // a literal of the table: NUL-terminated
}

std::string to_string(const Value& v) {
    if (auto i = std::get_if<long long>(&v)) return std::to_string(*i);
    if (auto s = std::get_if<std::string>(&v)) return *s;
    return std::get<bool>(v) ? "true" : "false";
}

std::string env_value(const Value& v) {
    if (auto b = std::get_if<bool>(&v)) return *b ? "1" : "0";
    return to_string(v);
}

nlohmann::json to_json(const Value& v) {
    if (auto i = std::get_if<long long>(&v)) return *i;
    if (auto s = std::get_if<std::string>(&v)) return *s;
    return std::get<bool>(v);
}

namespace {
// The powers of two in [min, max] (min at least 1): 2^first .. 2^(first + count - 1).
std::pair<int, int> pow2_range(long long min, long long max) {
    int first = -1, count = 0;
    for (int b = 0; b < 63; ++b) {
        const long long x = 1LL << b;
        if (x < min || x > max) continue;
        if (first < 0) first = b;
        ++count;
    }
    return {first, count};
}
} // namespace

std::uint64_t Knob::size() const {
    switch (kind) {
    case KnobKind::Integer: {
        if (max < min) return 0;
        // In unsigned arithmetic, where max - min cannot overflow.
        const std::uint64_t span = static_cast<std::uint64_t>(max) - static_cast<std::uint64_t>(min);
        const std::uint64_t n = span / static_cast<std::uint64_t>(std::max(1LL, step));
        return n == std::numeric_limits<std::uint64_t>::max() ? n : n + 1;
    }
    case KnobKind::Pow2:
        return static_cast<std::uint64_t>(pow2_range(min, max).second);
    case KnobKind::Choice:
        return choices.size();
    case KnobKind::Bool:
        return 2;
    }
    return 0;
}

Value Knob::at(std::uint64_t i) const {
    switch (kind) {
    case KnobKind::Integer:
        return static_cast<long long>(static_cast<std::uint64_t>(min) +
                                      i * static_cast<std::uint64_t>(std::max(1LL, step)));
    case KnobKind::Pow2:
        return 1LL << (pow2_range(min, max).first + static_cast<int>(i));
    case KnobKind::Choice:
        return choices.at(i);
    case KnobKind::Bool:
        return i != 0;
    }
    return 0LL;
}

std::optional<std::uint64_t> Knob::index_of(const Value& v) const {
    switch (kind) {
    case KnobKind::Integer: {
        const auto* x = std::get_if<long long>(&v);
        if (!x || *x < min || *x > max) return std::nullopt;
        const std::uint64_t off = static_cast<std::uint64_t>(*x) - static_cast<std::uint64_t>(min);
        const auto st = static_cast<std::uint64_t>(std::max(1LL, step));
        if (off % st) return std::nullopt;
        return off / st;
    }
    case KnobKind::Pow2: {
        const auto* x = std::get_if<long long>(&v);
        if (!x || *x < 1 || *x < min || *x > max || (*x & (*x - 1))) return std::nullopt;
        return static_cast<std::uint64_t>(std::countr_zero(static_cast<std::uint64_t>(*x)) -
                                          pow2_range(min, max).first);
    }
    case KnobKind::Choice: {
        const auto* x = std::get_if<std::string>(&v);
        if (!x) return std::nullopt;
        auto it = std::find(choices.begin(), choices.end(), *x);
        if (it == choices.end()) return std::nullopt;
        return static_cast<std::uint64_t>(it - choices.begin());
    }
    case KnobKind::Bool: {
        const auto* x = std::get_if<bool>(&v);
        if (!x) return std::nullopt;
        return *x ? 1 : 0;
    }
    }
    return std::nullopt;
}

std::vector<Value> Knob::domain() const {
    const std::uint64_t n = size();
    if (n > kMaxListedValues)
        throw Error(fmt::format("knob '{}' has {} values, too many to list", name, n), "search space",
                    "size() and at() for a large domain");
    std::vector<Value> d;
    d.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i)
        d.push_back(at(i));
    return d;
}

std::string Candidate::key() const {
    std::string k;
    for (const auto& [name, v] : knobs)
        k += name + "=" + to_string(v) + ";";
    k += "|";
    for (const auto& p : patches)
        k += p + ";";
    return k;
}

std::string Candidate::describe() const {
    std::string s;
    for (const auto& [name, v] : knobs)
        s += (s.empty() ? "" : " ") + name + "=" + to_string(v);
    for (const auto& p : patches)
        s += (s.empty() ? "+" : " +") + p;
    return s;
}

nlohmann::json Candidate::to_json() const {
    nlohmann::json j;
    j["knobs"] = nlohmann::json::object();
    for (const auto& [name, v] : knobs)
        j["knobs"][name] = space::to_json(v);
    j["patches"] = patches;
    return j;
}

Candidate Candidate::from_json(const nlohmann::json& j) {
    Candidate c;
    for (const auto& [name, v] : j.at("knobs").items()) {
        if (v.is_boolean())
            c.knobs[name] = v.get<bool>();
        else if (v.is_number_integer())
            c.knobs[name] = v.get<long long>();
        else
            c.knobs[name] = v.get<std::string>();
    }
    c.patches = j.at("patches").get<std::vector<std::string>>();
    std::sort(c.patches.begin(), c.patches.end());
    return c;
}

const Knob* Space::knob(const std::string& name) const {
    for (const auto& k : knobs)
        if (k.name == name) return &k;
    return nullptr;
}

namespace {
std::optional<long long> numeric(const Space& s, const Config& c, const std::string& name) {
    if (auto it = c.find(name); it != c.end()) {
        if (auto i = std::get_if<long long>(&it->second)) return *i;
        if (auto b = std::get_if<bool>(&it->second)) return *b ? 1 : 0;
        return std::nullopt;
    }
    if (auto it = s.constants.find(name); it != s.constants.end()) return it->second;
    return std::nullopt;
}
} // namespace

std::string Space::violation(const Config& c) const {
    for (const auto& con : constraints) {
        long double product = 1;
        bool ok = true;
        for (const auto& f : con.factors) {
            auto v = numeric(*this, c, f);
            if (!v) {
                ok = false;
                break;
            }
            product *= *v;
        }
        long long rhs = con.rhs_value;
        if (!con.rhs_name.empty()) {
            auto v = numeric(*this, c, con.rhs_name);
            if (!v)
                ok = false;
            else
                rhs = *v;
        }
        if (!ok) return con.text + " (a name in it is not a numeric knob or constant)";
        if (con.kind == Constraint::Kind::ProductEquals && product != rhs) return con.text;
        if (con.kind == Constraint::Kind::ProductAtMost && product > rhs) return con.text;
    }
    return {};
}

Candidate Space::baseline() const {
    Candidate c;
    for (const auto& k : knobs)
        c.knobs[k.name] = k.baseline;
    return c;
}

std::size_t Space::cardinality() const {
    std::size_t n = 1;
    const std::size_t cap = std::numeric_limits<std::size_t>::max() / 1024;
    for (const auto& k : knobs) {
        const std::uint64_t m = std::max<std::uint64_t>(1, k.size());
        if (m > cap / n) return cap;
        n *= m;
    }
    for (std::size_t i = 0; i < patches.size(); ++i) {
        n *= 2;
        if (n > cap) return cap;
    }
    return n;
}

std::vector<Candidate> Space::enumerate(std::size_t limit, std::uint64_t seed) const {
    const std::size_t total = cardinality();
    auto decode = [&](std::size_t index) {
        Candidate c;
        for (const auto& k : knobs) {
            const std::uint64_t n = std::max<std::uint64_t>(1, k.size());
            c.knobs[k.name] = k.at(index % n);
            index /= n;
        }
        for (std::size_t p = 0; p < patches.size(); ++p) {
            if (index % 2) c.patches.push_back(patches[p]);
            index /= 2;
        }
        std::sort(c.patches.begin(), c.patches.end());
        return c;
    };
    std::vector<Candidate> out;
    if (total <= 4 * limit) {
        for (std::size_t i = 0; i < total; ++i) {
            auto c = decode(i);
            if (feasible(c)) out.push_back(std::move(c));
        }
        if (out.size() <= limit) return out;
        std::mt19937_64 rng(seed);
        std::shuffle(out.begin(), out.end(), rng);
        out.resize(limit);
        return out;
    }
    // Too many to list: sample indices; constraints may reject most, so bound the attempts.
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::size_t> pick(0, total - 1);
    std::set<std::string> seen;
    for (std::size_t attempt = 0; attempt < 50 * limit && out.size() < limit; ++attempt) {
        auto c = decode(pick(rng));
        if (feasible(c) && seen.insert(c.key()).second) out.push_back(std::move(c));
    }
    return out;
}

std::vector<Candidate> Space::neighbours(const Candidate& c) const {
    std::vector<Candidate> out;
    for (auto& m : moves(c))
        out.push_back(std::move(m.to));
    return out;
}

std::vector<Space::Move> Space::moves(const Candidate& c) const {
    std::vector<Move> out;
    std::set<std::string> seen{c.key()};
    std::string what; // the knob or patch being moved
    auto add = [&](Candidate n) {
        std::sort(n.patches.begin(), n.patches.end());
        if (feasible(n) && seen.insert(n.key()).second) out.push_back({what, std::move(n)});
    };
    // The values next to v: every other choice, or the neighbours in order.
    auto adjacent = [&](const Knob& k, const Value& v) {
        std::vector<Value> adj;
        const auto i = k.index_of(v);
        if (!i) return adj;
        if (k.kind == KnobKind::Choice || k.kind == KnobKind::Bool) {
            for (std::uint64_t j = 0; j < k.size(); ++j)
                if (j != *i) adj.push_back(k.at(j));
        } else {
            if (*i > 0) adj.push_back(k.at(*i - 1));
            if (*i + 1 < k.size()) adj.push_back(k.at(*i + 1));
        }
        return adj;
    };
    // A compensating knob tries its whole domain when small, else its neighbours.
    auto compensations = [&](const Knob& k, const Value& v) {
        return k.size() <= 64 ? k.domain() : adjacent(k, v);
    };
    for (const auto& k : knobs) {
        auto cur = c.knobs.find(k.name);
        if (cur == c.knobs.end()) continue;
        what = k.name;
        for (const auto& v : adjacent(k, cur->second)) {
            Candidate n = c;
            n.knobs[k.name] = v;
            if (feasible(n)) {
                add(n);
                continue;
            }
            // Compensate through a second knob (micro_batch x2 with accumulation /2 keeps the global batch).
            const std::size_t before = out.size();
            std::vector<const Knob*> others;
            for (const auto& k2 : knobs) {
                if (k2.name == k.name) continue;
                auto cur2 = n.knobs.find(k2.name);
                if (cur2 == n.knobs.end()) continue;
                others.push_back(&k2);
                for (const auto& v2 : compensations(k2, cur2->second)) {
                    if (v2 == cur2->second) continue;
                    Candidate m = n;
                    m.knobs[k2.name] = v2;
                    add(m);
                }
            }
            if (out.size() > before) continue;
            // Else through two (ranks x2 under a fixed global batch and a core budget: accumulation /2 and
            // threads /2), only between knobs the move's constraints name.
            std::vector<const Knob*> tied;
            for (const Knob* k2 : others)
                for (const auto& con : constraints)
                    if (std::count(con.factors.begin(), con.factors.end(), k.name) &&
                        std::count(con.factors.begin(), con.factors.end(), k2->name)) {
                        tied.push_back(k2);
                        break;
                    }
            for (std::size_t a = 0; a < tied.size(); ++a)
                for (std::size_t b = a + 1; b < tied.size(); ++b) {
                    const Value va0 = n.knobs.at(tied[a]->name), vb0 = n.knobs.at(tied[b]->name);
                    for (const auto& va : compensations(*tied[a], va0))
                        for (const auto& vb : compensations(*tied[b], vb0)) {
                            if (va == va0 || vb == vb0) continue;
                            Candidate m = n;
                            m.knobs[tied[a]->name] = va;
                            m.knobs[tied[b]->name] = vb;
                            add(m);
                        }
                }
        }
    }
    for (const auto& p : patches) {
        what = "+" + p;
        Candidate n = c;
        auto it = std::find(n.patches.begin(), n.patches.end(), p);
        if (it == n.patches.end())
            n.patches.push_back(p);
        else
            n.patches.erase(it);
        add(n);
    }
    return out;
}

std::vector<std::string> Space::feature_names() const {
    std::vector<std::string> names;
    for (const auto& k : knobs) {
        switch (k.kind) {
        case KnobKind::Integer:
            names.push_back(k.name);
            break;
        case KnobKind::Pow2:
            names.push_back("log2(" + k.name + ")");
            break;
        case KnobKind::Choice:
            for (const auto& ch : k.choices)
                names.push_back(k.name + "=" + ch);
            break;
        case KnobKind::Bool:
            names.push_back(k.name);
            break;
        }
    }
    for (const auto& p : patches)
        names.push_back("patch:" + p);
    return names;
}

Eigen::VectorXd Space::encode(const Candidate& c) const {
    std::vector<double> f;
    for (const auto& k : knobs) {
        auto it = c.knobs.find(k.name);
        const Value v = it == c.knobs.end() ? k.baseline : it->second;
        switch (k.kind) {
        case KnobKind::Integer: {
            // Scaled to [0, 1] so that distances weigh knobs alike.
            double span = std::max(1.0, static_cast<double>(k.max) - static_cast<double>(k.min));
            f.push_back((static_cast<double>(std::get<long long>(v)) - static_cast<double>(k.min)) / span);
            break;
        }
        case KnobKind::Pow2: {
            double lo = std::log2(std::max(1LL, k.min)), hi = std::log2(std::max(1LL, k.max));
            double span = std::max(1.0, hi - lo);
            f.push_back((std::log2(static_cast<double>(std::get<long long>(v))) - lo) / span);
            break;
        }
        case KnobKind::Choice:
            for (const auto& ch : k.choices)
                f.push_back(std::get<std::string>(v) == ch ? 1.0 : 0.0);
            break;
        case KnobKind::Bool:
            f.push_back(std::get<bool>(v) ? 1.0 : 0.0);
            break;
        }
    }
    for (const auto& p : patches)
        f.push_back(std::find(c.patches.begin(), c.patches.end(), p) != c.patches.end() ? 1.0 : 0.0);
    return Eigen::Map<Eigen::VectorXd>(f.data(), static_cast<Eigen::Index>(f.size()));
}

namespace {
const Value& value_of(const Knob& k, const Candidate& c) {
    auto it = c.knobs.find(k.name);
    return it == c.knobs.end() ? k.baseline : it->second;
}
} // namespace

std::map<std::string, std::string> Space::environment(const Candidate& c) const {
    std::map<std::string, std::string> env;
    for (const auto& k : knobs)
        if (k.delivery == Delivery::Env && !k.env.empty()) {
            const Value& v = value_of(k, c);
            if (!k.unset_choice.empty() && v == Value(k.unset_choice)) continue;
            env[k.env] = env_value(v);
        }
    return env;
}

std::vector<std::string> Space::arguments(const Candidate& c) const {
    std::vector<std::string> args;
    for (const auto& k : knobs) {
        if (k.delivery != Delivery::Arg) continue;
        const Value& v = value_of(k, c);
        const bool hole = std::any_of(k.arg.begin(), k.arg.end(),
                                      [](const std::string& a) { return a.find("{}") != std::string::npos; });
        if (!hole) {
            if (std::get<bool>(v)) // a flag (the contract allows this for bool only)
                args.insert(args.end(), k.arg.begin(), k.arg.end());
            continue;
        }
        const std::string text = env_value(v);
        for (std::string a : k.arg) {
            for (auto pos = a.find("{}"); pos != std::string::npos; pos = a.find("{}", pos + text.size()))
                a.replace(pos, 2, text);
            args.push_back(std::move(a));
        }
    }
    return args;
}

std::vector<std::string> Space::sbatch_options(const Candidate& c) const {
    std::vector<std::string> options;
    for (const auto& k : knobs) {
        if (k.delivery != Delivery::SbatchOption) continue;
        const Value& v = value_of(k, c);
        if (const bool* flag = std::get_if<bool>(&v)) {
            if (*flag) options.push_back(k.sbatch_option);
            continue;
        }
        options.push_back(k.sbatch_option + "=" + to_string(v));
    }
    return options;
}

void Space::check(const Candidate& c) const {
    for (const auto& [name, v] : c.knobs) {
        const Knob* k = knob(name);
        if (!k)
            throw Error("unknown knob '" + name + "'", "candidate " + c.describe(),
                        "one of the contract's knobs");
        if (!k->allows(v))
            throw Error(fmt::format("value {} of knob '{}' is outside its domain", to_string(v), name),
                        "candidate " + c.describe(), "a value of the knob's kind and range");
    }
    for (const auto& p : c.patches)
        if (std::find(patches.begin(), patches.end(), p) == patches.end())
            throw Error("unknown or refused patch '" + p + "'", "candidate " + c.describe(),
                        "a patch of the catalog that passed the scope check");
    if (auto v = violation(c.knobs); !v.empty())
        throw Error("constraint violated: " + v, "candidate " + c.describe(), "a feasible configuration");
}

} // namespace infrarsi::space
