#pragma once
// Feature encoding of configurations for the global models, and what the models need to know about memory:
// which knobs change peak memory monotonically (for the "never propose something that needs more memory
// than an OOM" rule) and which changes are declared memory savers (for pairing).
//
// The models are abstract over feature vectors (model/candidate.hpp); this helper is one way to build them
// from a knob description. The orchestrator's space (src/space) may build Candidates its own way.
#include "model/candidate.hpp"

#include <Eigen/Dense>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace infrarsi::model {

// How peak memory moves along a knob's declared value order (or when a patch is switched on).
enum class MemoryEffect {
    none,       // no effect on memory: ignored by the dominance rule
    increasing, // later values (patch on) never need less memory
    decreasing, // later values (patch on) never need more memory
    unordered,  // affects memory, not monotonically: dominance requires the same value
    // Not declared (what a campaign knows of a knob it cannot recognise): dominance requires the same value;
    // the OOM edge presumes a change of it saves no memory until a trial shows it does
    // (model/failure_edges.hpp).
    unknown,
};

struct KnobSpec {
    enum class Kind { power_of_two, choice };
    std::string name;
    Kind kind = Kind::choice;
    std::vector<std::string> values; // declared order; power_of_two values are integers ("1", "2", "4")
    MemoryEffect memory = MemoryEffect::none;
    // Moving one step toward less memory along `values` is a memory saver worth pairing (recompute, ZeRO).
    bool memory_saver = false;
};

struct PatchSpec {
    std::string name;
    MemoryEffect memory = MemoryEffect::none;
    bool memory_saver = false; // switching it on saves memory (fused attention, sequence parallelism)
};

// One configuration: a value per knob (by name) and the set of patches switched on.
struct Configuration {
    std::map<std::string, std::string> knobs;
    std::set<std::string> patches;
};

// Encodes a configuration as: log2 of power-of-two knobs scaled to [0, 1] over the declared range, one-hot
// for choices, an indicator per patch and the product of each pair of patches (patches interact: a fused
// kernel may only pay off together with another).
class FeatureEncoding {
  public:
    FeatureEncoding(std::vector<KnobSpec> knobs, std::vector<PatchSpec> patches);

    int size() const { return static_cast<int>(names_.size()); }
    const std::vector<std::string>& names() const { return names_; }
    const std::vector<KnobSpec>& knobs() const { return knobs_; }
    const std::vector<PatchSpec>& patches() const { return patches_; }

    // Throws Error for an unknown knob, a missing knob, a value outside the declaration, an unknown patch.
    Eigen::VectorXd encode(const Configuration& c) const;

    // Memory key (see Candidate::memory_key): larger in every coordinate means at least as much memory.
    Eigen::VectorXd memory_key(const Configuration& c) const;
    // The values of the knobs and patches of unknown memory effect (Candidate::memory_unknown), and for each
    // whether its values are ordered (a power-of-two knob; a choice or a patch is not).
    Eigen::VectorXd memory_unknown(const Configuration& c) const;
    std::vector<char> memory_unknown_ordered() const;

    // Stable text id, e.g. "tp=2 pp=4 mb=1 +flash_attention".
    std::string describe(const Configuration& c) const;

  private:
    int value_index(const KnobSpec& k, const std::string& value) const;
    std::vector<KnobSpec> knobs_;
    std::vector<PatchSpec> patches_;
    std::vector<std::string> names_;
};

// Candidates for every configuration, with features, memory keys and declared memory-saver neighbours (one
// saver step away, among the given configurations). prior_peak_bytes[i] is the analytic estimate of each.
std::vector<Candidate> build_candidates(const FeatureEncoding& encoding,
                                        const std::vector<Configuration>& configs,
                                        const std::vector<double>& prior_peak_bytes);

} // namespace infrarsi::model
