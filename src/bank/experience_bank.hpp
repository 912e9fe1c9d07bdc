#pragma once
// The experience bank: validated findings keyed by hardware (hwloc topology features plus software stack),
// in one SQLite file written only by the orchestrator. Findings from verified campaigns become priors of
// later campaigns, weighted by hardware similarity and age; failed and unverified trials are kept as
// evidence and never become priors. Banks of different clusters merge by export/import without duplicates.
#include "bank/similarity.hpp"
#include "node/allocation_record.hpp"
#include "store/sqlite.hpp"

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::bank {

inline constexpr const char* kBankExportFormat = "infrarsi-bank-export";
inline constexpr int kBankExportVersion = 1;
// An export is read whole (validated before anything is imported): larger is refused.
inline constexpr std::size_t kMaxBankExportBytes = 64u << 20;

// Kinds of finding (content fields in docs/bank.md):
//   knob_setting      {"candidate":{"knobs":{...},"patches":[...]},"knobs":{...},"patches":[...],"speedup":S,
//                      "lo":L,"hi":H,"memory_ratio":peak/limit,"limit_bytes":B,"estimate_factor":peak/estimate}
//   patch_effect      {"patch":ID,"speedup":S,"memory_ratio":R,"composes_with":[...]}
//   memory_correction {"factor":measured/estimated peak,"trials":N}
//   oom_threshold     {"candidate":{...},"limit_bytes":B}
//   noise             {"cv":C,"mde":M}
struct Finding {
    std::string uid; // SHA-256 of hardware, kind, workload, content, campaign and verified; set on insert
    std::string kind;
    std::string workload; // contract workload name, e.g. "minigpt/dense-1node"
    bool verified = false;
    nlohmann::json content = nlohmann::json::object();
    std::string campaign;             // provenance: campaign id (directory) that produced it
    std::vector<std::int64_t> trials; // supporting trial ids in that campaign
    std::string origin;               // cluster name where it was measured
    double created = 0;               // epoch seconds
};

// A verified finding as a prior for a campaign on `here`.
struct Prior {
    Finding finding;
    HardwareKey hardware;
    double similarity = 0;
    double weight = 0;       // similarity x age decay
    bool hypothesis = false; // from unseen hardware: verify on a fresh baseline before trusting
};

struct IngestSummary {
    int records = 0, hardware_new = 0, noise_new = 0, skipped = 0;
    std::vector<std::string> errors;
};

struct ImportSummary {
    int hardware_new = 0, findings_new = 0, findings_known = 0, noise_new = 0;
    std::string origin;
};

// One line for a match_hardware result: "seen hardware (similarity 0.97)", "unseen hardware (nearest ...)".
std::string describe_match(const nlohmann::json& match);

class ExperienceBank {
  public:
    static constexpr int schema_version = 1;
    // Opens or creates the bank. `cluster` names this cluster in the provenance of what it records.
    // A bank written by a newer version, or a file that is not a bank, is refused with an Error.
    explicit ExperienceBank(const std::string& path, const std::string& cluster = "local");

    std::int64_t upsert_hardware(const HardwareKey& key, const std::string& node = "");
    // false when a finding with the same uid is already there (nothing changes).
    bool add_finding(const HardwareKey& key, Finding f);

    // The plugin's allocation records (a JSON-lines file): hardware entries and noise measurements.
    IngestSummary ingest_allocation_records(const std::string& jsonl_path, const SoftwareStack& stack);

    // Verified findings for a workload, most useful first. Age halves a finding's weight every
    // half_life_days; findings weighing less than min_weight are left out.
    std::vector<Prior> priors(const HardwareKey& here, const std::string& workload, double now_s,
                              double half_life_days = 180, double min_weight = 0.05);
    // Everything recorded for a workload (verified or not), newest first.
    std::vector<Finding> findings(const std::string& workload = "");

    struct HardwareEntry {
        std::int64_t id;
        std::string fingerprint;
        HardwareKey key;
        std::vector<std::string> nodes;
        double similarity; // to the machine asked about
        int findings, noise_records;
    };
    std::vector<HardwareEntry> hardware(const std::optional<HardwareKey>& relative_to = std::nullopt);
    // Whether the bank knows `here`, findings or not: {"entries", "seen", and with entries "similarity" and
    // "nearest" (the fingerprint of the most similar entry)}; seen is similarity >= kSeenHardwareSimilarity.
    nlohmann::json match_hardware(const HardwareKey& here);

    // Writes every hardware entry, finding and noise record with their provenance to a JSON file.
    void export_to(const std::string& path);
    // Merges an export: new entries are added, known ones (same uid) are left as they are. The file is
    // validated completely before anything is written; a bad file leaves the bank untouched.
    ImportSummary import_from(const std::string& path);

    const std::string& cluster() const { return cluster_; }
    store::Database& db() { return db_; }

  private:
    void migrate();
    std::int64_t hardware_id(const std::string& fingerprint);
    bool insert_finding(std::int64_t hardware_id, const Finding& f); // false: uid already there
    store::Database db_;
    std::string cluster_;
};

// Where the bank lives: $INFRARSI_BANK, else $XDG_DATA_HOME/infrarsi/bank.sqlite, else
// ~/.local/share/infrarsi/bank.sqlite. A site sets INFRARSI_BANK to share one; INFRARSI_BANK=off gives
// an empty path: campaigns neither read nor write a bank.
std::string default_bank_path();

// The software stack of this build and machine (compiler from the build, MPI from ompi_info when present).
SoftwareStack current_software_stack(const std::string& workload_version);

} // namespace infrarsi::bank
