#include "store/campaign_store.hpp"

#include "store/measurements.hpp"

#include "util/bounded_json.hpp"
#include "util/error.hpp"

#include <chrono>
#include <fmt/format.h>

namespace infrarsi::store {

double now_seconds() {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

TrialKind parse_trial_kind(const std::string& s) {
    if (const auto k = trial_kind_names.parse(s)) return *k;
    throw Error("unknown trial kind '" + s + "'", "campaign store", trial_kind_names.list());
}

namespace {
// Anything else reads as finished, as it always has.
TrialState parse_state(const std::string& s) {
    return trial_state_names.parse(s).value_or(TrialState::Finished);
}

// Migration i brings the schema from version i to i + 1. Never edit a shipped one; append.
const char* const migrations[] = {
    R"sql(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE locks (kind TEXT NOT NULL, path TEXT NOT NULL, hash TEXT NOT NULL, PRIMARY KEY (kind, path));
CREATE TABLE patches (id TEXT PRIMARY KEY, accepted INTEGER NOT NULL, reason TEXT NOT NULL, info TEXT NOT NULL);
CREATE TABLE batches (
  id INTEGER PRIMARY KEY, kind TEXT NOT NULL, state TEXT NOT NULL, job_id TEXT NOT NULL DEFAULT '',
  manifest TEXT NOT NULL, created REAL NOT NULL, submitted REAL NOT NULL DEFAULT 0, finished REAL NOT NULL DEFAULT 0);
CREATE TABLE trials (
  id INTEGER PRIMARY KEY, batch_id INTEGER NOT NULL REFERENCES batches(id), array_index INTEGER NOT NULL,
  kind TEXT NOT NULL, candidate_key TEXT NOT NULL, candidate TEXT NOT NULL, sandbox TEXT NOT NULL,
  state TEXT NOT NULL, outcome TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '',
  job_id TEXT NOT NULL DEFAULT '', node TEXT NOT NULL DEFAULT '',
  step_time_s REAL, step_time_lo REAL, step_time_hi REAL, cold_step_s REAL, tokens_per_s REAL, mfu REAL,
  loss REAL, peak_memory_bytes REAL, cost_node_s REAL NOT NULL DEFAULT 0, counted INTEGER NOT NULL DEFAULT 1,
  attempt INTEGER NOT NULL DEFAULT 0, reason TEXT NOT NULL DEFAULT '', result_path TEXT NOT NULL DEFAULT '',
  verification_id INTEGER, measurements TEXT NOT NULL DEFAULT '{}',
  UNIQUE (batch_id, array_index));
CREATE INDEX trials_candidate ON trials(candidate_key);
CREATE TABLE doctor (id INTEGER PRIMARY KEY, created REAL NOT NULL, result TEXT NOT NULL);
CREATE TABLE verifications (
  id INTEGER PRIMARY KEY, candidate_key TEXT NOT NULL, candidate TEXT NOT NULL, batch_id INTEGER NOT NULL DEFAULT 0,
  state TEXT NOT NULL, promoted INTEGER NOT NULL DEFAULT 0, speedup REAL, lo REAL, hi REAL,
  detail TEXT NOT NULL DEFAULT '{}');
CREATE TABLE promotions (
  id INTEGER PRIMARY KEY, verification_id INTEGER NOT NULL REFERENCES verifications(id),
  candidate_key TEXT NOT NULL UNIQUE, speedup REAL NOT NULL, created REAL NOT NULL);
CREATE TABLE events (id INTEGER PRIMARY KEY, time REAL NOT NULL, message TEXT NOT NULL);
)sql",
    // 2: a contract violation's kind is a column (it was only in the detail text); existing rows get it from
    // the detail this project's earlier releases wrote, read once here and never again.
    R"sql(
ALTER TABLE trials ADD COLUMN violation TEXT NOT NULL DEFAULT '';
UPDATE trials SET violation = CASE
  WHEN detail LIKE 'loss invariant%' THEN 'loss_invariant'
  WHEN detail LIKE 'missing step lines%' THEN 'missing_steps'
  WHEN detail LIKE 'no result file%' THEN 'no_result'
  ELSE 'protected_changed' END
WHERE outcome = 'contract_violation';
)sql",
    // 3: the campaign's stage is one typed value (meta 'stage', store::Stage) instead of three string flags.
    R"sql(
INSERT OR REPLACE INTO meta (key, value) SELECT 'stage', CASE
  WHEN (SELECT value FROM meta WHERE key = 'state') = 'done' THEN 'done'
  WHEN (SELECT value FROM meta WHERE key = 'verify_done') = '1' THEN 'done'
  WHEN (SELECT value FROM meta WHERE key = 'search_done') = '1' THEN 'verification'
  WHEN EXISTS (SELECT 1 FROM doctor) THEN 'search'
  WHEN (SELECT value FROM meta WHERE key = 'state') = 'running' THEN 'doctor'
  ELSE 'initialized' END;
DELETE FROM meta WHERE key IN ('state', 'search_done', 'verify_done');
)sql",
    // 4: a batch is one or more array jobs (one per set of sbatch-option knob values); every batch so far
    // was one array of all its runnable trials, under the batch's job id.
    R"sql(
CREATE TABLE arrays (
  batch_id INTEGER NOT NULL REFERENCES batches(id), seq INTEGER NOT NULL, first_index INTEGER NOT NULL,
  tasks INTEGER NOT NULL, options TEXT NOT NULL DEFAULT '[]', job_id TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (batch_id, seq));
INSERT INTO arrays (batch_id, seq, first_index, tasks, job_id)
  SELECT b.id, 0, 0, (SELECT COUNT(*) FROM trials t WHERE t.batch_id = b.id AND t.array_index >= 0), b.job_id
  FROM batches b WHERE EXISTS (SELECT 1 FROM trials t WHERE t.batch_id = b.id AND t.array_index >= 0);
)sql",
    // 5: the agent's calls (issue 31); its patches are rows of `patches` whose info says source "agent".
    R"sql(
CREATE TABLE agent_calls (
  id INTEGER PRIMARY KEY, started REAL NOT NULL, finished REAL NOT NULL DEFAULT 0,
  trigger TEXT NOT NULL, outcome TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  offered INTEGER NOT NULL DEFAULT 0, accepted INTEGER NOT NULL DEFAULT 0,
  tokens INTEGER NOT NULL DEFAULT 0, cost REAL NOT NULL DEFAULT 0, model TEXT NOT NULL DEFAULT '',
  detail TEXT NOT NULL DEFAULT '{}');
)sql",
    // 6: state out of the meta blackboard (issue 30, item 3): the campaign's stage is the one row of
    // campaign_stage (store/campaign_state.hpp; it was meta 'stage'), and the re-queue is a queue table (it
    // was meta 'requeue', a JSON array of {candidate, reason, attempt}, kept in its order). A re-queue that
    // is not JSON stops the migration (SQLite's "malformed JSON"): reading it failed the same way before.
    R"sql(
CREATE TABLE campaign_stage (
  id INTEGER PRIMARY KEY CHECK (id = 1), stage TEXT NOT NULL, changed REAL NOT NULL DEFAULT 0);
INSERT INTO campaign_stage (id, stage)
  VALUES (1, COALESCE((SELECT value FROM meta WHERE key = 'stage'), 'initialized'));
DELETE FROM meta WHERE key = 'stage';
CREATE TABLE requeue (
  id INTEGER PRIMARY KEY, candidate TEXT NOT NULL, reason TEXT NOT NULL, attempt INTEGER NOT NULL);
INSERT INTO requeue (candidate, reason, attempt)
  SELECT json_extract(e.value, '$.candidate'), json_extract(e.value, '$.reason'),
         json_extract(e.value, '$.attempt')
  FROM meta m, json_each(m.value) e WHERE m.key = 'requeue' ORDER BY e.key;
DELETE FROM meta WHERE key = 'requeue';
)sql",
    // 7: the rest of the campaign's state out of the meta blackboard (issue 30, item 3): when the run started
    // and ended, why it is paused or cancelled, why its noise was accepted and what became of the job a user
    // submitted with --infrarsi=tune (and where its output is) are the one row of campaign_run (a pause
    // cleared was meta 'paused' = '', now NULL); a batch's placement and its manifest's digest are
    // columns of its row (they were meta 'placement.ID' and 'manifest_sha256.ID').
    R"sql(
CREATE TABLE campaign_run (
  id INTEGER PRIMARY KEY CHECK (id = 1), started REAL, ended REAL, paused TEXT, cancelled TEXT,
  noise_accepted TEXT, submitted_job TEXT, submitted_job_output TEXT);
INSERT INTO campaign_run (id, started, ended, paused, cancelled, noise_accepted, submitted_job,
                          submitted_job_output) VALUES (1,
  (SELECT CAST(value AS REAL) FROM meta WHERE key = 'started'),
  (SELECT CAST(value AS REAL) FROM meta WHERE key = 'ended'),
  (SELECT NULLIF(value, '') FROM meta WHERE key = 'paused'),
  (SELECT NULLIF(value, '') FROM meta WHERE key = 'cancelled'),
  (SELECT value FROM meta WHERE key = 'noise_accepted'),
  (SELECT value FROM meta WHERE key = 'submitted_job'),
  (SELECT value FROM meta WHERE key = 'submitted_job_output'));
DELETE FROM meta WHERE key IN ('started', 'ended', 'paused', 'cancelled', 'noise_accepted', 'submitted_job',
                               'submitted_job_output');
ALTER TABLE batches ADD COLUMN placement TEXT NOT NULL DEFAULT '';
ALTER TABLE batches ADD COLUMN manifest_sha256 TEXT NOT NULL DEFAULT '';
UPDATE batches SET
  placement = COALESCE((SELECT value FROM meta WHERE key = 'placement.' || batches.id), ''),
  manifest_sha256 = COALESCE((SELECT value FROM meta WHERE key = 'manifest_sha256.' || batches.id), '');
DELETE FROM meta WHERE key LIKE 'placement.%' OR key LIKE 'manifest_sha256.%';
)sql",
    // 8: the equivalence checks out of the meta blackboard (issue 30, item 3): one row of equivalence_checks
    // each (store/equivalence_check.hpp; they were meta 'equivalence', a JSON array of records, kept in its
    // order). A key this build does not know stays in `other`; a max_relative of "inf" is infinite. The nodes
    // the doctor found slow and the baseline's step pace are columns of campaign_run (they were meta
    // 'slow_nodes', a JSON array, and 'step_pace', {median, runs}).
    R"sql(
CREATE TABLE equivalence_checks (
  id INTEGER PRIMARY KEY, batch_id INTEGER, patches TEXT NOT NULL DEFAULT '[]', candidate TEXT,
  candidate_key TEXT, state TEXT NOT NULL DEFAULT '', attempt INTEGER, knobs TEXT, knobs_key TEXT,
  knobs_candidate TEXT, knobs_moved INTEGER, knobs_note TEXT, seed INTEGER, seed_fresh INTEGER, seed_note TEXT,
  tolerance REAL, tolerance_key TEXT, math_changing INTEGER, baseline_trial INTEGER, candidate_trial INTEGER,
  max_relative REAL, compared INTEGER, step_values TEXT, beyond TEXT, reason TEXT, out_of_memory INTEGER,
  pair INTEGER, other TEXT NOT NULL DEFAULT '{}');
INSERT INTO equivalence_checks (batch_id, patches, candidate, candidate_key, state, attempt, knobs, knobs_key,
  knobs_candidate, knobs_moved, knobs_note, seed, seed_fresh, seed_note, tolerance, tolerance_key,
  math_changing, baseline_trial, candidate_trial, max_relative, compared, step_values, beyond, reason,
  out_of_memory, pair, other)
  SELECT json_extract(e.value, '$.batch_id'), COALESCE(json_extract(e.value, '$.patches'), '[]'),
         json_extract(e.value, '$.candidate'), json_extract(e.value, '$.candidate_key'),
         COALESCE(json_extract(e.value, '$.state'), ''), json_extract(e.value, '$.attempt'),
         json_extract(e.value, '$.knobs'), json_extract(e.value, '$.knobs_key'),
         json_extract(e.value, '$.knobs_candidate'), json_extract(e.value, '$.knobs_moved'),
         json_extract(e.value, '$.knobs_note'), json_extract(e.value, '$.seed'),
         json_extract(e.value, '$.seed_fresh'), json_extract(e.value, '$.seed_note'),
         json_extract(e.value, '$.tolerance'), json_extract(e.value, '$.tolerance_key'),
         json_extract(e.value, '$.math_changing'), json_extract(e.value, '$.baseline_trial'),
         json_extract(e.value, '$.candidate_trial'),
         CASE WHEN json_type(e.value, '$.max_relative') = 'text' THEN 9e999
              ELSE json_extract(e.value, '$.max_relative') END,
         json_extract(e.value, '$.compared'), json_extract(e.value, '$.values'),
         json_extract(e.value, '$.beyond'), json_extract(e.value, '$.reason'),
         json_extract(e.value, '$.out_of_memory'), json_extract(e.value, '$.pair'),
         json_remove(e.value, '$.batch_id', '$.patches', '$.candidate', '$.candidate_key', '$.state',
                     '$.attempt', '$.knobs', '$.knobs_key', '$.knobs_candidate', '$.knobs_moved',
                     '$.knobs_note', '$.seed', '$.seed_fresh', '$.seed_note', '$.tolerance', '$.tolerance_key',
                     '$.math_changing', '$.baseline_trial', '$.candidate_trial', '$.max_relative',
                     '$.compared', '$.values', '$.beyond', '$.reason', '$.out_of_memory', '$.pair')
  FROM meta m, json_each(m.value) e WHERE m.key = 'equivalence' ORDER BY e.key;
DELETE FROM meta WHERE key = 'equivalence';
ALTER TABLE campaign_run ADD COLUMN slow_nodes TEXT;
ALTER TABLE campaign_run ADD COLUMN step_pace REAL;
ALTER TABLE campaign_run ADD COLUMN step_pace_runs INTEGER;
UPDATE campaign_run SET
  slow_nodes = (SELECT value FROM meta WHERE key = 'slow_nodes' AND json_valid(value)),
  step_pace = (SELECT json_extract(value, '$.median') FROM meta WHERE key = 'step_pace' AND json_valid(value)
               AND json_type(value, '$.median') IN ('real', 'integer')),
  step_pace_runs = (SELECT json_extract(value, '$.runs') FROM meta WHERE key = 'step_pace' AND json_valid(value)
                    AND json_type(value, '$.median') IN ('real', 'integer'));
DELETE FROM meta WHERE key IN ('slow_nodes', 'step_pace');
)sql",
    // 9: the last facts out of the meta blackboard (issue 30): the startup the doctor measured is columns of
    // campaign_run (trial::Startup's fields; it was meta 'startup', its JSON, read only when its median and
    // spread were numbers, as trial::startup_from_json reads it); the bank's seeds and the agent's pairs the
    // bank gave are JSON columns of the same shape (store/bank_facts.hpp; meta 'bank_seeds', a list, and
    // 'agent_bank_pairs'; one that is not JSON, or seeds that are not a list, is dropped: the bank is asked
    // again, where before the search stopped on it); whether the findings were recorded is a name
    // (BankIngested; meta 'bank_ingested' was '1' when done, 'searched' after a search without verification,
    // and '' never said anything).
    R"sql(
ALTER TABLE campaign_run ADD COLUMN startup_median_s REAL;
ALTER TABLE campaign_run ADD COLUMN startup_spread_s REAL;
ALTER TABLE campaign_run ADD COLUMN startup_runs INTEGER;
ALTER TABLE campaign_run ADD COLUMN startup_wall_clock INTEGER;
ALTER TABLE campaign_run ADD COLUMN startup_source TEXT;
ALTER TABLE campaign_run ADD COLUMN bank_seeds TEXT;
ALTER TABLE campaign_run ADD COLUMN agent_bank_pairs TEXT;
ALTER TABLE campaign_run ADD COLUMN bank_ingested TEXT;
UPDATE campaign_run SET
  (startup_median_s, startup_spread_s, startup_runs, startup_wall_clock, startup_source) = (
    SELECT json_extract(value, '$.median_s'), json_extract(value, '$.spread_s'),
           CASE WHEN json_type(value, '$.runs') IN ('integer', 'real')
                THEN CAST(json_extract(value, '$.runs') AS INTEGER) ELSE 0 END,
           CASE json_type(value, '$.wall_clock') WHEN 'false' THEN 0 ELSE 1 END,
           CASE WHEN json_type(value, '$.source') = 'text' THEN json_extract(value, '$.source') ELSE '' END
    FROM meta WHERE key = 'startup' AND json_valid(value) AND json_type(value) = 'object'
      AND json_type(value, '$.median_s') IN ('integer', 'real')
      AND json_type(value, '$.spread_s') IN ('integer', 'real')),
  bank_seeds = (SELECT value FROM meta WHERE key = 'bank_seeds' AND json_valid(value)
                AND json_type(value) = 'array'),
  agent_bank_pairs = (SELECT value FROM meta WHERE key = 'agent_bank_pairs' AND json_valid(value)),
  bank_ingested = (SELECT CASE value WHEN '1' THEN 'done' ELSE 'searched' END FROM meta
                   WHERE key = 'bank_ingested' AND value <> '');
DELETE FROM meta WHERE key IN ('startup', 'bank_seeds', 'agent_bank_pairs', 'bank_ingested');
)sql",
    // 10: the bank's last facts out of the meta blackboard (issue 30): the experience-bank file the seeds
    // came from and the bank's match of this hardware (a JSON document, the shape bank::ExperienceBank::
    // match_hardware returns) are columns of campaign_run (meta 'bank' and 'bank_hardware'; a match that is
    // not JSON is dropped: the report says the hardware was not matched, where before it stopped on it).
    R"sql(
ALTER TABLE campaign_run ADD COLUMN bank_path TEXT;
ALTER TABLE campaign_run ADD COLUMN bank_hardware TEXT;
UPDATE campaign_run SET
  bank_path = (SELECT value FROM meta WHERE key = 'bank'),
  bank_hardware = (SELECT value FROM meta WHERE key = 'bank_hardware' AND json_valid(value));
DELETE FROM meta WHERE key IN ('bank', 'bank_hardware');
)sql",
};
constexpr int migration_count = sizeof(migrations) / sizeof(migrations[0]);
static_assert(migration_count == CampaignStore::schema_version);

const char* trial_columns =
    "id, batch_id, array_index, kind, candidate_key, candidate, sandbox, state, outcome, detail, job_id, "
    "node, "
    "step_time_s, step_time_lo, step_time_hi, cold_step_s, tokens_per_s, mfu, loss, peak_memory_bytes, "
    "cost_node_s, counted, attempt, reason, result_path, verification_id, measurements, violation";

TrialRow read_trial(const Statement& s) {
    TrialRow t;
    t.id = s.integer(0);
    t.batch_id = s.integer(1);
    t.array_index = static_cast<int>(s.integer(2));
    t.kind = parse_trial_kind(s.text(3));
    t.candidate_key = s.text(4);
    t.candidate = nlohmann::json::parse(s.text(5));
    t.sandbox = s.text(6);
    t.state = parse_state(s.text(7));
    if (const auto o = s.text(8); !o.empty()) t.outcome = trial::parse_outcome(o);
    t.detail = s.text(9);
    t.job_id = s.text(10);
    t.node = s.text(11);
    t.step_time_s = s.opt_real(12);
    t.step_time_lo = s.opt_real(13);
    t.step_time_hi = s.opt_real(14);
    t.cold_step_s = s.opt_real(15);
    t.tokens_per_s = s.opt_real(16);
    t.mfu = s.opt_real(17);
    t.loss = s.opt_real(18);
    t.peak_memory_bytes = s.opt_real(19);
    t.cost_node_s = s.real(20);
    t.counted = s.integer(21) != 0;
    t.attempt = static_cast<int>(s.integer(22));
    t.reason = s.text(23);
    t.result_path = s.text(24);
    t.verification_id = s.opt_integer(25);
    t.measurements = measurements_from_json(nlohmann::json::parse(s.text(26)));
    t.violation = trial::parse_violation(s.text(27));
    return t;
}
} // namespace

void record_assessment(TrialRow& t, const trial::TrialRecord& r) {
    t.outcome = r.outcome;
    t.violation = r.violation;
    t.detail = r.detail;
    t.step_time_s = r.step_time_s;
    t.step_time_lo = r.step_time_lo;
    t.step_time_hi = r.step_time_hi;
    t.cold_step_s = r.cold_step_s;
    t.tokens_per_s = r.tokens_per_s;
    t.mfu = r.mfu;
    t.loss = r.loss;
    t.peak_memory_bytes = r.peak_memory_bytes;
    t.cost_node_s = r.cost_node_s;
    t.measurements = r.measurements;
}

CampaignStore::CampaignStore(const std::string& path) : db_(path) {
    migrate();
}

void CampaignStore::migrate() {
    Statement q(db_, "PRAGMA user_version");
    q.step();
    int version = static_cast<int>(q.integer(0));
    if (version > schema_version)
        throw Error("campaign database has schema version " + std::to_string(version) +
                        ", newer than this build understands",
                    db_.path(),
                    "schema version <= " + std::to_string(schema_version) + " (upgrade infrarsi)");
    for (int v = version; v < schema_version; ++v) {
        Transaction tx(db_);
        db_.exec(migrations[v]);
        db_.exec("PRAGMA user_version = " + std::to_string(v + 1));
        tx.commit();
    }
}

void CampaignStore::set_meta(const std::string& key, const std::string& value) {
    Statement(db_, "INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = ?2")
        .bind(1, key)
        .bind(2, value)
        .run();
}

Stage CampaignStore::stage() {
    Statement s(db_, "SELECT stage FROM campaign_stage WHERE id = 1");
    return parse_stage(s.step() ? s.text(0) : to_string(Stage::Initialized), db_.path());
}

bool CampaignStore::advance_stage(Stage s) {
    const auto next = advance(stage(), s);
    if (!next) return false;
    Statement(db_, "INSERT INTO campaign_stage(id, stage, changed) VALUES (1, ?1, ?2) "
                   "ON CONFLICT(id) DO UPDATE SET stage = ?1, changed = ?2")
        .bind(1, to_string(*next))
        .bind(2, now_seconds())
        .run();
    return true;
}

void CampaignStore::requeue(const RequeueEntry& e) {
    Statement(db_, "INSERT INTO requeue(candidate, reason, attempt) VALUES (?1, ?2, ?3)")
        .bind(1, e.candidate.dump())
        .bind(2, e.reason)
        .bind(3, e.attempt)
        .run();
}

std::vector<RequeueEntry> CampaignStore::requeued() {
    std::vector<RequeueEntry> out;
    Statement s(db_, "SELECT id, candidate, reason, attempt FROM requeue ORDER BY id");
    while (s.step())
        out.push_back(
            {s.integer(0), nlohmann::json::parse(s.text(1)), s.text(2), static_cast<int>(s.integer(3))});
    return out;
}

void CampaignStore::dequeue(std::int64_t requeue_id) {
    Statement(db_, "DELETE FROM requeue WHERE id = ?1").bind(1, requeue_id).run();
}

std::optional<std::string> CampaignStore::meta(const std::string& key) {
    Statement s(db_, "SELECT value FROM meta WHERE key = ?1");
    s.bind(1, key);
    if (s.step()) return s.text(0);
    return std::nullopt;
}

void CampaignStore::add_lock(const Lock& l) {
    Statement(db_, "INSERT OR REPLACE INTO locks(kind, path, hash) VALUES (?1, ?2, ?3)")
        .bind(1, l.kind)
        .bind(2, l.path)
        .bind(3, l.hash)
        .run();
}

std::vector<Lock> CampaignStore::locks() {
    std::vector<Lock> out;
    Statement s(db_, "SELECT kind, path, hash FROM locks ORDER BY kind, path");
    while (s.step())
        out.push_back({s.text(0), s.text(1), s.text(2)});
    return out;
}

void CampaignStore::put_patch(const PatchRow& p) {
    Statement(db_, "INSERT OR REPLACE INTO patches(id, accepted, reason, info) VALUES (?1, ?2, ?3, ?4)")
        .bind(1, p.id)
        .bind(2, p.accepted ? 1 : 0)
        .bind(3, p.reason)
        .bind(4, p.info.dump())
        .run();
}

std::vector<PatchRow> CampaignStore::patches() {
    std::vector<PatchRow> out;
    Statement s(db_, "SELECT id, accepted, reason, info FROM patches ORDER BY id");
    while (s.step())
        out.push_back({s.text(0), s.integer(1) != 0, s.text(2), nlohmann::json::parse(s.text(3))});
    return out;
}

std::int64_t CampaignStore::add_batch(BatchKind kind, const std::string& manifest) {
    Statement(db_, "INSERT INTO batches(kind, state, manifest, created) VALUES (?1, ?4, ?2, ?3)")
        .bind(1, to_string(kind))
        .bind(2, manifest)
        .bind(3, now_seconds())
        .bind(4, to_string(BatchState::Planned))
        .run();
    return db_.last_insert_rowid();
}

void CampaignStore::add_array(std::int64_t batch_id, const ArrayRow& a) {
    Statement(db_, "INSERT INTO arrays(batch_id, seq, first_index, tasks, options, job_id) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
        .bind(1, batch_id)
        .bind(2, a.seq)
        .bind(3, a.first_index)
        .bind(4, a.tasks)
        .bind(5, nlohmann::json(a.options).dump())
        .bind(6, a.job_id)
        .run();
}

std::vector<ArrayRow> CampaignStore::arrays(std::int64_t batch_id) {
    std::vector<ArrayRow> out;
    Statement s(db_, "SELECT seq, first_index, tasks, options, job_id FROM arrays WHERE batch_id = ?1 "
                     "ORDER BY seq");
    s.bind(1, batch_id);
    while (s.step()) {
        ArrayRow a;
        a.seq = static_cast<int>(s.integer(0));
        a.first_index = static_cast<int>(s.integer(1));
        a.tasks = static_cast<int>(s.integer(2));
        a.options = nlohmann::json::parse(s.text(3)).get<std::vector<std::string>>();
        a.job_id = s.text(4);
        out.push_back(std::move(a));
    }
    return out;
}

void CampaignStore::set_array_submitted(std::int64_t batch_id, int seq, const std::string& job_id) {
    Transaction tx(db_);
    Statement(db_, "UPDATE arrays SET job_id = ?3 WHERE batch_id = ?1 AND seq = ?2")
        .bind(1, batch_id)
        .bind(2, seq)
        .bind(3, job_id)
        .run();
    Statement(db_, "UPDATE trials SET state = 'submitted', job_id = ?3 || '_' || array_index "
                   "WHERE batch_id = ?1 AND state = 'planned' AND EXISTS (SELECT 1 FROM arrays a WHERE "
                   "a.batch_id = ?1 AND a.seq = ?2 AND array_index >= a.first_index AND "
                   "array_index < a.first_index + a.tasks)")
        .bind(1, batch_id)
        .bind(2, seq)
        .bind(3, job_id)
        .run();
    tx.commit();
}

void CampaignStore::set_batch_submitted(std::int64_t id) {
    Transaction tx(db_);
    const auto state = transition(id, batch(id).state, BatchState::Submitted);
    std::string ids;
    for (const auto& a : arrays(id))
        ids += (ids.empty() ? "" : ",") + a.job_id;
    Statement(db_, "UPDATE batches SET state = ?4, job_id = ?2, submitted = ?3 WHERE id = ?1")
        .bind(1, id)
        .bind(2, ids)
        .bind(3, now_seconds())
        .bind(4, to_string(state))
        .run();
    tx.commit();
}

void CampaignStore::set_batch_manifest(std::int64_t id, const std::string& manifest,
                                       const std::string& sha256) {
    Statement(db_, "UPDATE batches SET manifest = ?2, manifest_sha256 = ?3 WHERE id = ?1")
        .bind(1, id)
        .bind(2, manifest)
        .bind(3, sha256)
        .run();
}

void CampaignStore::set_batch_placement(std::int64_t id, const std::string& placement) {
    Statement(db_, "UPDATE batches SET placement = ?2 WHERE id = ?1").bind(1, id).bind(2, placement).run();
}

namespace {
const char* equivalence_columns =
    "batch_id, patches, candidate, candidate_key, state, attempt, knobs, knobs_key, knobs_candidate, "
    "knobs_moved, knobs_note, seed, seed_fresh, seed_note, tolerance, tolerance_key, math_changing, "
    "baseline_trial, candidate_trial, max_relative, compared, step_values, beyond, reason, out_of_memory, "
    "pair, other";

std::optional<std::string> opt_dump(const std::optional<nlohmann::json>& j) {
    return j ? std::optional<std::string>(j->dump()) : std::nullopt;
}

std::optional<nlohmann::json> opt_parse(const std::optional<std::string>& s) {
    return s ? std::optional<nlohmann::json>(nlohmann::json::parse(*s)) : std::nullopt;
}

template <class T> std::optional<T> opt_int(const Statement& s, int col) {
    const auto v = s.opt_integer(col);
    return v ? std::optional<T>(static_cast<T>(*v)) : std::nullopt;
}

std::optional<bool> opt_bool(const Statement& s, int col) {
    const auto v = s.opt_integer(col);
    return v ? std::optional<bool>(*v != 0) : std::nullopt;
}

std::optional<std::int64_t> opt_flag(const std::optional<bool>& b) {
    return b ? std::optional<std::int64_t>(*b ? 1 : 0) : std::nullopt;
}

// The check's columns from ?1 (equivalence_columns' order).
void bind_check(Statement& q, const EquivalenceCheck& c) {
    q.bind(1, c.batch_id)
        .bind(2, nlohmann::json(c.patches).dump())
        .bind(3, c.candidate)
        .bind(4, c.candidate_key)
        .bind(5, c.state)
        .bind(6, c.attempt)
        .bind(7, c.knobs)
        .bind(8, c.knobs_key)
        .bind(9, opt_dump(c.knobs_candidate))
        .bind(10, opt_flag(c.knobs_moved))
        .bind(11, c.knobs_note)
        .bind(12, c.seed ? std::optional<std::int64_t>(*c.seed) : std::nullopt)
        .bind(13, opt_flag(c.seed_fresh))
        .bind(14, c.seed_note)
        .bind(15, c.tolerance)
        .bind(16, c.tolerance_key)
        .bind(17, opt_flag(c.math_changing))
        .bind(18, c.baseline_trial)
        .bind(19, c.candidate_trial)
        .bind(20, c.max_relative)
        .bind(21, c.compared)
        .bind(22, opt_dump(c.values))
        .bind(23, opt_dump(c.beyond))
        .bind(24, c.reason)
        .bind(25, opt_flag(c.out_of_memory))
        .bind(26, c.pair)
        .bind(27, (c.other.is_object() ? c.other : nlohmann::json::object()).dump());
}

EquivalenceCheck read_check(const Statement& s) {
    EquivalenceCheck c;
    c.id = s.integer(0);
    c.batch_id = s.opt_integer(1);
    c.patches = nlohmann::json::parse(s.text(2)).get<std::vector<std::string>>();
    c.candidate = s.opt_text(3);
    c.candidate_key = s.opt_text(4);
    c.state = s.text(5);
    c.attempt = opt_int<int>(s, 6);
    c.knobs = s.opt_text(7);
    c.knobs_key = s.opt_text(8);
    c.knobs_candidate = opt_parse(s.opt_text(9));
    c.knobs_moved = opt_bool(s, 10);
    c.knobs_note = s.opt_text(11);
    c.seed = opt_int<long long>(s, 12);
    c.seed_fresh = opt_bool(s, 13);
    c.seed_note = s.opt_text(14);
    c.tolerance = s.opt_real(15);
    c.tolerance_key = s.opt_text(16);
    c.math_changing = opt_bool(s, 17);
    c.baseline_trial = s.opt_integer(18);
    c.candidate_trial = s.opt_integer(19);
    c.max_relative = s.opt_real(20);
    c.compared = opt_int<int>(s, 21);
    c.values = opt_parse(s.opt_text(22));
    c.beyond = opt_parse(s.opt_text(23));
    c.reason = s.opt_text(24);
    c.out_of_memory = opt_bool(s, 25);
    c.pair = opt_int<int>(s, 26);
    c.other = nlohmann::json::parse(s.text(27));
    return c;
}
} // namespace

std::int64_t CampaignStore::add_equivalence_check(const EquivalenceCheck& c) {
    Statement q(db_, std::string("INSERT INTO equivalence_checks (") + equivalence_columns +
                         ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, "
                         "?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27)");
    bind_check(q, c);
    q.run();
    return db_.last_insert_rowid();
}

void CampaignStore::update_equivalence_check(const EquivalenceCheck& c) {
    Statement q(db_,
                "UPDATE equivalence_checks SET (" + std::string(equivalence_columns) +
                    ") = (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
                    "?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27) WHERE id = ?28");
    bind_check(q, c);
    q.bind(28, c.id).run();
}

std::vector<EquivalenceCheck> CampaignStore::equivalence_checks() {
    Statement s(db_,
                std::string("SELECT id, ") + equivalence_columns + " FROM equivalence_checks ORDER BY id");
    std::vector<EquivalenceCheck> out;
    while (s.step())
        out.push_back(read_check(s));
    return out;
}

CampaignRun CampaignStore::campaign_run() {
    Statement s(db_,
                "SELECT started, ended, paused, cancelled, noise_accepted, submitted_job, "
                "submitted_job_output, slow_nodes, step_pace, step_pace_runs, startup_median_s, "
                "startup_spread_s, startup_runs, startup_wall_clock, startup_source, bank_seeds, "
                "agent_bank_pairs, bank_ingested, bank_path, bank_hardware FROM campaign_run WHERE id = 1");
    if (!s.step()) return {};
    CampaignRun r;
    r.started = s.opt_real(0);
    r.ended = s.opt_real(1);
    r.paused = s.opt_text(2);
    r.cancelled = s.opt_text(3);
    r.noise_accepted = s.opt_text(4);
    r.submitted_job = s.opt_text(5);
    r.submitted_job_output = s.opt_text(6);
    if (const auto slow = s.opt_text(7))
        r.slow_nodes = nlohmann::json::parse(*slow).get<std::vector<std::string>>();
    r.step_pace = s.opt_real(8);
    if (const auto runs = s.opt_integer(9)) r.step_pace_runs = static_cast<int>(*runs);
    if (const auto median = s.opt_real(10)) {
        trial::Startup st;
        st.median_s = *median;
        st.spread_s = s.opt_real(11).value_or(0);
        st.runs = static_cast<int>(s.opt_integer(12).value_or(0));
        st.wall_clock = s.opt_integer(13).value_or(1) != 0;
        st.source = s.opt_text(14).value_or("");
        r.startup = st;
    }
    if (const auto seeds = s.opt_text(15)) r.bank_seeds = bank_seeds_from_json(nlohmann::json::parse(*seeds));
    if (const auto pairs = s.opt_text(16))
        r.agent_bank_pairs = agent_bank_pairs_from_json(nlohmann::json::parse(*pairs, nullptr, false));
    if (const auto ingested = s.opt_text(17)) {
        r.bank_ingested = bank_ingested_names.parse(*ingested);
        if (!r.bank_ingested)
            throw Error("unknown bank ingestion '" + *ingested + "'", db_.path() + ", campaign_run",
                        bank_ingested_names.list());
    }
    r.bank_path = s.opt_text(18);
    // Migration 10 kept an older build's match as it was if it was JSON at all: one too deep or too large
    // for the bounded reader, or not JSON, reads as none rather than stopping the report.
    if (const auto match = s.opt_text(19)) {
        try {
            r.bank_hardware = parse_bounded_json(*match, db_.path() + ", campaign_run.bank_hardware",
                                                 "the experience bank's hardware match as JSON");
        } catch (const Error&) {
            // none
        }
    }
    return r;
}

namespace {
// One column of the run's row (made by migration 7, for a new campaign too). `set`: the assignment, with ?1
// the value.
template <class T> void update_run(Database& db, const std::string& set, const T& value) {
    Statement(db, "UPDATE campaign_run SET " + set + " WHERE id = 1").bind(1, value).run();
}
} // namespace

void CampaignStore::mark_started(double t) {
    update_run(db_, "started = COALESCE(started, ?1)", t);
}

void CampaignStore::mark_ended(double t) {
    update_run(db_, "ended = COALESCE(ended, ?1)", t);
}

void CampaignStore::set_paused(const std::optional<std::string>& why) {
    update_run(db_, "paused = ?1", why);
}

void CampaignStore::set_cancelled(const std::string& why) {
    update_run(db_, "cancelled = COALESCE(cancelled, ?1)", why);
}

void CampaignStore::set_noise_accepted(const std::string& why) {
    update_run(db_, "noise_accepted = ?1", why);
}

void CampaignStore::set_slow_nodes(const std::vector<std::string>& nodes) {
    update_run(db_, "slow_nodes = ?1", nlohmann::json(nodes).dump());
}

void CampaignStore::set_step_pace(double median, int runs) {
    Statement(db_, "UPDATE campaign_run SET step_pace = ?1, step_pace_runs = ?2 WHERE id = 1")
        .bind(1, median)
        .bind(2, runs)
        .run();
}

void CampaignStore::set_startup(const trial::Startup& st) {
    Statement(db_, "UPDATE campaign_run SET startup_median_s = ?1, startup_spread_s = ?2, startup_runs = ?3, "
                   "startup_wall_clock = ?4, startup_source = ?5 WHERE id = 1")
        .bind(1, st.median_s)
        .bind(2, st.spread_s)
        .bind(3, st.runs)
        .bind(4, st.wall_clock ? 1 : 0)
        .bind(5, st.source)
        .run();
}

void CampaignStore::set_bank_seeds(const std::vector<BankSeed>& seeds) {
    update_run(db_, "bank_seeds = ?1", to_json(seeds).dump());
}

void CampaignStore::set_agent_bank_pairs(const AgentBankPairs& pairs) {
    update_run(db_, "agent_bank_pairs = ?1", to_json(pairs).dump());
}

void CampaignStore::set_bank_ingested(BankIngested what) {
    update_run(db_, "bank_ingested = ?1", std::string(bank_ingested_names.name(what)));
}

void CampaignStore::set_bank_path(const std::string& path) {
    update_run(db_, "bank_path = ?1", path);
}

void CampaignStore::set_bank_hardware(const nlohmann::json& match) {
    update_run(db_, "bank_hardware = ?1", match.dump());
}

void CampaignStore::set_submitted_job(const std::string& decision, const std::optional<std::string>& output) {
    update_run(db_, "submitted_job = ?1", decision);
    if (output) update_run(db_, "submitted_job_output = ?1", *output);
}

void CampaignStore::set_batch_finished(std::int64_t id) {
    // Often inside the caller's transaction (ingest): the update names the state it moves from instead.
    const auto from = batch(id).state;
    Statement(db_, "UPDATE batches SET state = ?3, finished = ?2 WHERE id = ?1 AND state = ?4")
        .bind(1, id)
        .bind(2, now_seconds())
        .bind(3, to_string(transition(id, from, BatchState::Finished)))
        .bind(4, to_string(from))
        .run();
}

namespace {
BatchKind parse_batch_kind(const std::string& s) {
    if (const auto k = batch_kind_names.parse(s)) return *k;
    throw Error("unknown batch kind '" + s + "'", "campaign store", batch_kind_names.list());
}

const char* batch_columns = "id, kind, state, job_id, manifest, created, submitted, finished, placement, "
                            "manifest_sha256";

BatchRow read_batch(const Statement& s, const std::string& where) {
    return {s.integer(0),
            parse_batch_kind(s.text(1)),
            parse_batch_state(s.text(2), where),
            s.text(3),
            s.text(4),
            s.real(5),
            s.real(6),
            s.real(7),
            s.text(8),
            s.text(9)};
}
} // namespace

std::vector<BatchRow> CampaignStore::batches(std::optional<BatchState> state) {
    std::vector<BatchRow> out;
    Statement s(db_,
                fmt::format("SELECT {} FROM batches WHERE ?1 = '' OR state = ?1 ORDER BY id", batch_columns));
    s.bind(1, state ? to_string(*state) : std::string());
    while (s.step())
        out.push_back(read_batch(s, db_.path()));
    return out;
}

BatchRow CampaignStore::batch(std::int64_t id) {
    Statement s(db_, fmt::format("SELECT {} FROM batches WHERE id = ?1", batch_columns));
    s.bind(1, id);
    if (!s.step()) throw Error("no batch " + std::to_string(id), db_.path(), "an existing batch id");
    return read_batch(s, db_.path());
}

std::int64_t CampaignStore::add_trial(const TrialRow& t) {
    Statement(db_,
              "INSERT INTO trials(batch_id, array_index, kind, candidate_key, candidate, sandbox, state, "
              "counted, attempt, reason, result_path, verification_id) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)")
        .bind(1, t.batch_id)
        .bind(2, t.array_index)
        .bind(3, to_string(t.kind))
        .bind(4, t.candidate_key)
        .bind(5, t.candidate.dump())
        .bind(6, t.sandbox)
        .bind(7, to_string(t.state))
        .bind(8, t.counted ? 1 : 0)
        .bind(9, t.attempt)
        .bind(10, t.reason)
        .bind(11, t.result_path)
        .bind(12, t.verification_id)
        .run();
    return db_.last_insert_rowid();
}

void CampaignStore::update_trial(const TrialRow& t) {
    Statement(
        db_, "UPDATE trials SET state = ?2, outcome = ?3, detail = ?4, job_id = ?5, node = ?6, "
             "step_time_s = ?7, step_time_lo = ?8, step_time_hi = ?9, cold_step_s = ?10, tokens_per_s = ?11, "
             "mfu = ?12, loss = ?13, peak_memory_bytes = ?14, cost_node_s = ?15, counted = ?16, "
             "result_path = ?17, measurements = ?18, sandbox = ?19, violation = ?20 WHERE id = ?1")
        .bind(1, t.id)
        .bind(2, to_string(t.state))
        .bind(3, t.outcome ? trial::to_string(*t.outcome) : std::string())
        .bind(4, t.detail)
        .bind(5, t.job_id)
        .bind(6, t.node)
        .bind(7, t.step_time_s)
        .bind(8, t.step_time_lo)
        .bind(9, t.step_time_hi)
        .bind(10, t.cold_step_s)
        .bind(11, t.tokens_per_s)
        .bind(12, t.mfu)
        .bind(13, t.loss)
        .bind(14, t.peak_memory_bytes)
        .bind(15, t.cost_node_s)
        .bind(16, t.counted ? 1 : 0)
        .bind(17, t.result_path)
        .bind(18, to_json(t.measurements).dump())
        .bind(19, t.sandbox)
        .bind(20, trial::to_string(t.violation))
        .run();
}

std::vector<TrialRow> CampaignStore::trials(const TrialQuery& q) {
    std::string where;
    std::vector<std::string> args;
    const auto match = [&](const std::string& column, std::string value) {
        args.push_back(std::move(value));
        where += (where.empty() ? " WHERE " : " AND ") + column + " = ?" + std::to_string(args.size());
    };
    if (!q.kinds.empty()) {
        std::string in;
        for (auto k : q.kinds) {
            args.emplace_back(to_string(k));
            in += (in.empty() ? "?" : ", ?") + std::to_string(args.size());
        }
        where += (where.empty() ? " WHERE " : " AND ") + std::string("kind IN (") + in + ")";
    }
    if (q.state) match("state", to_string(*q.state));
    if (q.outcome) match("outcome", trial::to_string(*q.outcome));
    if (q.counted) match("counted", *q.counted ? "1" : "0");
    if (q.batch_id) match("batch_id", std::to_string(*q.batch_id));
    if (q.verification_id) match("verification_id", std::to_string(*q.verification_id));
    if (q.candidate_key) match("candidate_key", *q.candidate_key);
    Statement s(db_, std::string("SELECT ") + trial_columns + " FROM trials" + where + " ORDER BY id");
    for (std::size_t i = 0; i < args.size(); ++i)
        s.bind(static_cast<int>(i + 1), args[i]);
    std::vector<TrialRow> out;
    while (s.step())
        out.push_back(read_trial(s));
    return out;
}

std::vector<TrialRow> CampaignStore::trials_of_batch(std::int64_t batch_id) {
    return trials({.batch_id = batch_id});
}

void CampaignStore::put_baseline(const Baseline& b) {
    Statement(db_, "INSERT INTO doctor(created, result) VALUES (?1, ?2)")
        .bind(1, now_seconds())
        .bind(2, to_json(b).dump())
        .run();
}

std::optional<Baseline> CampaignStore::baseline() {
    Statement s(db_, "SELECT result FROM doctor ORDER BY id DESC LIMIT 1");
    if (!s.step()) return std::nullopt;
    try {
        return baseline_from_json(nlohmann::json::parse(s.text(0)));
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("unreadable baseline: ") + e.what(), "campaign.db, table doctor");
    }
}

std::int64_t CampaignStore::add_verification(const VerificationRow& v) {
    Statement(db_, "INSERT INTO verifications(candidate_key, candidate, batch_id, state, detail) VALUES (?1, "
                   "?2, ?3, ?4, ?5)")
        .bind(1, v.candidate_key)
        .bind(2, v.candidate.dump())
        .bind(3, v.batch_id)
        .bind(4, to_string(start(v.state)))
        .bind(5, to_json(v.detail).dump())
        .run();
    return db_.last_insert_rowid();
}

void CampaignStore::update_verification(const VerificationRow& v) {
    // Often inside the caller's transaction (finish_verification): the update names the state it moves from.
    const auto from = [&] {
        Statement now(db_, "SELECT state FROM verifications WHERE id = ?1");
        now.bind(1, v.id);
        if (!now.step())
            throw Error("no verification " + std::to_string(v.id), db_.path(), "an existing verification id");
        return now.text(0);
    }();
    const auto state = transition(v.id, parse_verification_state(from, db_.path()), v.state);
    Statement(db_,
              "UPDATE verifications SET batch_id = ?2, state = ?3, promoted = ?4, speedup = ?5, lo = ?6, "
              "hi = ?7, detail = ?8 WHERE id = ?1 AND state = ?9")
        .bind(1, v.id)
        .bind(2, v.batch_id)
        .bind(3, to_string(state))
        .bind(4, v.promoted ? 1 : 0)
        .bind(5, v.speedup)
        .bind(6, v.lo)
        .bind(7, v.hi)
        .bind(8, to_json(v.detail).dump())
        .bind(9, from)
        .run();
}

std::vector<VerificationRow> CampaignStore::verifications() {
    std::vector<VerificationRow> out;
    Statement s(db_,
                "SELECT id, candidate_key, candidate, batch_id, state, promoted, speedup, lo, hi, detail "
                "FROM verifications ORDER BY id");
    while (s.step()) {
        VerificationRow v;
        v.id = s.integer(0);
        v.candidate_key = s.text(1);
        v.candidate = nlohmann::json::parse(s.text(2));
        v.batch_id = s.integer(3);
        v.state = parse_verification_state(s.text(4), db_.path());
        v.promoted = s.integer(5) != 0;
        v.speedup = s.opt_real(6);
        v.lo = s.opt_real(7);
        v.hi = s.opt_real(8);
        v.detail = verification_detail_from_json(nlohmann::json::parse(s.text(9)));
        out.push_back(std::move(v));
    }
    return out;
}

void CampaignStore::add_promotion(std::int64_t verification_id, const std::string& key, double speedup) {
    Statement(db_, "INSERT OR IGNORE INTO promotions(verification_id, candidate_key, speedup, created) "
                   "VALUES (?1, ?2, ?3, ?4)")
        .bind(1, verification_id)
        .bind(2, key)
        .bind(3, speedup)
        .bind(4, now_seconds())
        .run();
}

std::vector<std::pair<std::int64_t, std::string>> CampaignStore::promotions() {
    std::vector<std::pair<std::int64_t, std::string>> out;
    Statement s(db_, "SELECT verification_id, candidate_key FROM promotions ORDER BY speedup DESC");
    while (s.step())
        out.emplace_back(s.integer(0), s.text(1));
    return out;
}

std::int64_t CampaignStore::add_agent_call(const AgentCallRow& c) {
    Statement(db_, "INSERT INTO agent_calls(started, trigger, outcome) VALUES (?1, ?2, ?3)")
        .bind(1, c.started)
        .bind(2, c.trigger)
        .bind(3, c.outcome)
        .run();
    return db_.last_insert_rowid();
}

void CampaignStore::update_agent_call(const AgentCallRow& c) {
    Statement(db_,
              "UPDATE agent_calls SET finished = ?2, outcome = ?3, reason = ?4, offered = ?5, accepted = ?6, "
              "tokens = ?7, cost = ?8, model = ?9, detail = ?10 WHERE id = ?1")
        .bind(1, c.id)
        .bind(2, c.finished)
        .bind(3, c.outcome)
        .bind(4, c.reason)
        .bind(5, c.offered)
        .bind(6, c.accepted)
        .bind(7, static_cast<std::int64_t>(c.tokens))
        .bind(8, c.cost)
        .bind(9, c.model)
        .bind(10, to_json(c.detail).dump())
        .run();
}

std::vector<AgentCallRow> CampaignStore::agent_calls() {
    std::vector<AgentCallRow> out;
    Statement s(db_,
                "SELECT id, started, finished, trigger, outcome, reason, offered, accepted, tokens, cost, "
                "model, detail FROM agent_calls ORDER BY id");
    while (s.step()) {
        AgentCallRow c;
        c.id = s.integer(0);
        c.started = s.real(1);
        c.finished = s.real(2);
        c.trigger = s.text(3);
        c.outcome = s.text(4);
        c.reason = s.text(5);
        c.offered = static_cast<int>(s.integer(6));
        c.accepted = static_cast<int>(s.integer(7));
        c.tokens = s.integer(8);
        c.cost = s.real(9);
        c.model = s.text(10);
        // One JSON document (store/agent_call_detail.hpp); one that is not JSON says nothing.
        c.detail = agent_call_detail_from_json(nlohmann::json::parse(s.text(11), nullptr, false));
        out.push_back(std::move(c));
    }
    return out;
}

void CampaignStore::log(const std::string& message) {
    Statement(db_, "INSERT INTO events(time, message) VALUES (?1, ?2)")
        .bind(1, now_seconds())
        .bind(2, message)
        .run();
}

std::vector<std::pair<double, std::string>> CampaignStore::events(int last) {
    std::vector<std::pair<double, std::string>> out;
    Statement s(db_,
                "SELECT time, message FROM (SELECT id, time, message FROM events ORDER BY id DESC LIMIT ?1) "
                "ORDER BY id");
    s.bind(1, last);
    while (s.step())
        out.emplace_back(s.real(0), s.text(1));
    return out;
}

} // namespace infrarsi::store
