#include "model/features.hpp"

#include "util/error.hpp"

#include <cmath>
#include <unordered_map>

namespace infrarsi::model {

FeatureEncoding::FeatureEncoding(std::vector<KnobSpec> knobs, std::vector<PatchSpec> patches)
    : knobs_(std::move(knobs)), patches_(std::move(patches)) {
    std::set<std::string> seen;
    for (const auto& k : knobs_) {
        if (k.values.empty()) throw Error("knob '" + k.name + "' has no values", "feature encoding");
        if (!seen.insert(k.name).second)
            throw Error("knob '" + k.name + "' declared twice", "feature encoding");
        if (k.kind == KnobSpec::Kind::power_of_two) {
            for (const auto& v : k.values) {
                double x = std::stod(v);
                if (x <= 0 || std::exp2(std::round(std::log2(x))) != x)
                    throw Error("value '" + v + "' of knob '" + k.name + "' is not a power of two",
                                "feature encoding", "1, 2, 4, ...");
            }
            names_.push_back("log2_" + k.name);
        } else {
            for (const auto& v : k.values)
                names_.push_back(k.name + "=" + v);
        }
    }
    for (const auto& p : patches_) {
        if (!seen.insert(p.name).second)
            throw Error("patch '" + p.name + "' declared twice", "feature encoding");
        names_.push_back("+" + p.name);
    }
    for (size_t i = 0; i < patches_.size(); ++i)
        for (size_t j = i + 1; j < patches_.size(); ++j)
            names_.push_back("+" + patches_[i].name + "*+" + patches_[j].name);
}

int FeatureEncoding::value_index(const KnobSpec& k, const std::string& value) const {
    for (size_t i = 0; i < k.values.size(); ++i)
        if (k.values[i] == value) return static_cast<int>(i);
    std::string allowed;
    for (const auto& v : k.values)
        allowed += (allowed.empty() ? "" : ", ") + v;
    throw Error("value '" + value + "' of knob '" + k.name + "' is not declared", "feature encoding",
                "one of " + allowed);
}

Eigen::VectorXd FeatureEncoding::encode(const Configuration& c) const {
    Eigen::VectorXd f = Eigen::VectorXd::Zero(size());
    int at = 0;
    for (const auto& [name, _] : c.knobs) {
        bool known = false;
        for (const auto& k : knobs_)
            known = known || k.name == name;
        if (!known) throw Error("unknown knob '" + name + "'", "feature encoding");
    }
    for (const auto& k : knobs_) {
        auto it = c.knobs.find(k.name);
        if (it == c.knobs.end()) throw Error("knob '" + k.name + "' has no value", "feature encoding");
        int i = value_index(k, it->second);
        if (k.kind == KnobSpec::Kind::power_of_two) {
            double lo = std::log2(std::stod(k.values.front())), hi = std::log2(std::stod(k.values.back()));
            double x = std::log2(std::stod(it->second));
            f(at++) = hi > lo ? (x - lo) / (hi - lo) : 0.0;
        } else {
            f(at + i) = 1.0;
            at += static_cast<int>(k.values.size());
        }
    }
    std::vector<double> on(patches_.size(), 0.0);
    for (const auto& p : c.patches) {
        bool known = false;
        for (size_t j = 0; j < patches_.size(); ++j)
            if (patches_[j].name == p) on[j] = 1.0, known = true;
        if (!known) throw Error("unknown patch '" + p + "'", "feature encoding");
    }
    for (double x : on)
        f(at++) = x;
    for (size_t i = 0; i < on.size(); ++i)
        for (size_t j = i + 1; j < on.size(); ++j)
            f(at++) = on[i] * on[j];
    return f;
}

Eigen::VectorXd FeatureEncoding::memory_key(const Configuration& c) const {
    std::vector<double> key;
    auto add = [&](MemoryEffect e, double v) {
        switch (e) {
        case MemoryEffect::none:
        case MemoryEffect::unknown:
            break;
        case MemoryEffect::increasing:
            key.push_back(v);
            break;
        case MemoryEffect::decreasing:
            key.push_back(-v);
            break;
        case MemoryEffect::unordered:
            key.push_back(v), key.push_back(-v);
            break;
        }
    };
    for (const auto& k : knobs_) {
        auto it = c.knobs.find(k.name);
        if (it == c.knobs.end()) throw Error("knob '" + k.name + "' has no value", "feature encoding");
        add(k.memory, value_index(k, it->second));
    }
    for (const auto& p : patches_)
        add(p.memory, c.patches.count(p.name) ? 1.0 : 0.0);
    return Eigen::Map<Eigen::VectorXd>(key.data(), static_cast<Eigen::Index>(key.size()));
}

Eigen::VectorXd FeatureEncoding::memory_unknown(const Configuration& c) const {
    std::vector<double> out;
    for (const auto& k : knobs_) {
        if (k.memory != MemoryEffect::unknown) continue;
        auto it = c.knobs.find(k.name);
        if (it == c.knobs.end()) throw Error("knob '" + k.name + "' has no value", "feature encoding");
        out.push_back(value_index(k, it->second));
    }
    for (const auto& p : patches_)
        if (p.memory == MemoryEffect::unknown) out.push_back(c.patches.count(p.name) ? 1.0 : 0.0);
    return Eigen::Map<Eigen::VectorXd>(out.data(), static_cast<Eigen::Index>(out.size()));
}

std::vector<char> FeatureEncoding::memory_unknown_ordered() const {
    std::vector<char> out;
    for (const auto& k : knobs_)
        if (k.memory == MemoryEffect::unknown) out.push_back(k.kind == KnobSpec::Kind::power_of_two);
    for (const auto& p : patches_)
        if (p.memory == MemoryEffect::unknown) out.push_back(0);
    return out;
}

std::string FeatureEncoding::describe(const Configuration& c) const {
    std::string s;
    for (const auto& k : knobs_) {
        auto it = c.knobs.find(k.name);
        s += (s.empty() ? "" : " ") + k.name + "=" + (it == c.knobs.end() ? "?" : it->second);
    }
    for (const auto& p : patches_)
        if (c.patches.count(p.name)) s += " +" + p.name;
    return s;
}

std::vector<Candidate> build_candidates(const FeatureEncoding& encoding,
                                        const std::vector<Configuration>& configs,
                                        const std::vector<double>& prior_peak_bytes) {
    if (configs.size() != prior_peak_bytes.size())
        throw Error("one prior peak estimate per configuration is needed", "build_candidates");
    std::vector<Candidate> out(configs.size());
    std::unordered_map<std::string, int> index;
    for (size_t i = 0; i < configs.size(); ++i) {
        out[i].id = encoding.describe(configs[i]);
        out[i].features = encoding.encode(configs[i]);
        out[i].memory_key = encoding.memory_key(configs[i]);
        out[i].memory_unknown = encoding.memory_unknown(configs[i]);
        if (!(prior_peak_bytes[i] > 0))
            throw Error("prior peak estimate of '" + out[i].id + "' is not positive", "build_candidates");
        out[i].prior_peak_bytes = prior_peak_bytes[i];
        if (!index.emplace(out[i].id, static_cast<int>(i)).second)
            throw Error("configuration '" + out[i].id + "' listed twice", "build_candidates");
    }
    // Savers: one declared saver step from each configuration, when that configuration is in the set.
    for (size_t i = 0; i < configs.size(); ++i) {
        for (const auto& k : encoding.knobs()) {
            if (!k.memory_saver) continue;
            const auto& v = configs[i].knobs.at(k.name);
            int at = 0;
            while (k.values[at] != v)
                ++at;
            int step = k.memory == MemoryEffect::increasing   ? -1
                       : k.memory == MemoryEffect::decreasing ? 1
                                                              : 0;
            if (step == 0 || at + step < 0 || at + step >= static_cast<int>(k.values.size())) continue;
            Configuration s = configs[i];
            s.knobs[k.name] = k.values[at + step];
            auto it = index.find(encoding.describe(s));
            if (it != index.end()) out[i].savers.push_back({it->second, k.name + "=" + k.values[at + step]});
        }
        for (const auto& p : encoding.patches()) {
            if (!p.memory_saver) continue;
            bool on = configs[i].patches.count(p.name) > 0;
            // Switching on saves memory for "decreasing", switching off for "increasing".
            bool want_on = p.memory == MemoryEffect::decreasing;
            if (on == want_on || p.memory == MemoryEffect::none || p.memory == MemoryEffect::unordered ||
                p.memory == MemoryEffect::unknown)
                continue;
            Configuration s = configs[i];
            if (want_on)
                s.patches.insert(p.name);
            else
                s.patches.erase(p.name);
            auto it = index.find(encoding.describe(s));
            if (it != index.end()) out[i].savers.push_back({it->second, (want_on ? "+" : "-") + p.name});
        }
    }
    return out;
}

} // namespace infrarsi::model
