#pragma once
// A campaign: a directory with its SQLite store, sandboxes, batch manifests and trial results, driven through
// the five stages (init, doctor, run, verify, report/apply). All state is in the store, so a process killed
// at any point resumes where it stopped: a batch is recorded before it is submitted, its job id before it is
// released, and a submitted batch is re-attached to on restart.
#include "contract/contract.hpp"
#include "patch/catalog.hpp"
#include "search/proposer.hpp"
#include "slurm/client.hpp"
#include "store/campaign_store.hpp"

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace infrarsi::campaign {

namespace fs = std::filesystem;

struct RunOptions {
    bool verbose = true;
    std::string proposer = "model";
    std::chrono::milliseconds poll{1000};
    bool verify = true;                      // run the verification stage after the search
    std::string bank; // experience bank file: seeds the search, receives the findings; empty: none
    std::string spool; // the plugin's spool, whose allocation records name the hardware; empty: this host
    const std::atomic<bool>* stop = nullptr; // set by a signal handler: finish the current step and return
};

class Campaign {
  public:
    // Creates the campaign directory and store; records the locks. Refuses an existing campaign.
    static void init(const fs::path& contract_file, const fs::path& dir);
    // Opens a campaign and re-checks the locks (contract, baseline tree, protected files); throws an Error
    // naming what changed.
    explicit Campaign(const fs::path& dir);

    const contract::Contract& contract() const { return contract_; }
    store::CampaignStore& store() { return *store_; }
    const fs::path& dir() const { return dir_; }
    const std::vector<patch::PatchInfo>& catalog() const { return catalog_; }
    const patch::PatchInfo* patch_info(const std::string& id) const;

    void doctor(const RunOptions& o); // runs (or re-attaches to) the doctor batch; no-op when done
    void search(const RunOptions& o); // batches until the budget ends
    void verify(const RunOptions& o); // interleaved A/B verification of the best candidates
    void run(const RunOptions& o);    // doctor, search, verify; resumable
    bool finished();                  // every stage done

    struct BudgetUse {
        int trials = 0;        // counted search trials (planned, running or finished)
        double node_hours = 0; // all trials
        double wall_s = 0;     // since the first run
        std::string exhausted; // which limit ended the search, empty while budget is left
    };
    BudgetUse budget_use();

    // The contract's analytic peak-memory estimate of a candidate (its estimate command, run with the
    // baseline build and the candidate's knob environment); cached. Empty without a command or a doctor.
    std::optional<double> memory_estimate(const space::Candidate& c);

  private:
    struct Task {
        space::Candidate candidate;
        store::TrialKind kind = store::TrialKind::Search;
        std::string reason;
        int attempt = 0;
        std::optional<std::int64_t> verification_id;
    };
    std::int64_t plan_batch(const std::string& kind, const std::vector<Task>& tasks);
    void submit_batch(std::int64_t batch_id, const RunOptions& o);
    void await_batch(std::int64_t batch_id, const RunOptions& o);
    void resume_open_batches(const RunOptions& o);
    void ingest(std::int64_t batch_id, const std::vector<slurm::JobRecord>& records);
    void finish_doctor();
    void finish_verification(std::int64_t verification_id);
    std::vector<double> reference_losses();
    std::map<std::string, std::optional<double>> estimates_;
    double mde();
    bool stopping(const RunOptions& o) const { return o.stop && o.stop->load(); }
    void say(const RunOptions& o, const std::string& msg);

    fs::path dir_;
    contract::Contract contract_;
    std::unique_ptr<store::CampaignStore> store_;
    std::vector<patch::PatchInfo> catalog_;
    slurm::Client slurm_;
};

// Path of the `infrarsi` binary trial jobs call (INFRARSI_BIN, else the one of this build).
std::string infrarsi_binary();

} // namespace infrarsi::campaign
