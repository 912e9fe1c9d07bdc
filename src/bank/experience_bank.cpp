#include "bank/experience_bank.hpp"

#include "patch/hash.hpp"
#include "util/atomic_file.hpp"
#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/process.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace infrarsi::bank {
namespace {

constexpr const char* kSchema = R"SQL(
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE hardware (
  id INTEGER PRIMARY KEY,
  fingerprint TEXT NOT NULL UNIQUE,
  key TEXT NOT NULL,
  nodes TEXT NOT NULL DEFAULT '[]',
  first_seen REAL NOT NULL,
  last_seen REAL NOT NULL);
CREATE TABLE findings (
  id INTEGER PRIMARY KEY,
  uid TEXT NOT NULL UNIQUE,
  hardware_id INTEGER NOT NULL REFERENCES hardware(id),
  workload TEXT NOT NULL,
  kind TEXT NOT NULL,
  verified INTEGER NOT NULL,
  content TEXT NOT NULL,
  campaign TEXT NOT NULL,
  trials TEXT NOT NULL,
  origin TEXT NOT NULL,
  created REAL NOT NULL);
CREATE INDEX findings_workload ON findings(workload, verified);
CREATE TABLE noise (
  id INTEGER PRIMARY KEY,
  uid TEXT NOT NULL UNIQUE,
  hardware_id INTEGER NOT NULL REFERENCES hardware(id),
  node TEXT NOT NULL,
  job TEXT NOT NULL,
  time TEXT NOT NULL,
  calibration TEXT NOT NULL,
  origin TEXT NOT NULL);
)SQL";

double now_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string finding_uid(const std::string& hw_fingerprint, const Finding& f) {
    nlohmann::json j = {{"hw", hw_fingerprint}, {"kind", f.kind},         {"workload", f.workload},
                        {"content", f.content}, {"campaign", f.campaign}, {"verified", f.verified}};
    return patch::hash_text(j.dump());
}

Finding finding_from_row(store::Statement& s, int first) {
    Finding f;
    f.uid = s.text(first);
    f.workload = s.text(first + 1);
    f.kind = s.text(first + 2);
    f.verified = s.integer(first + 3) != 0;
    f.content = nlohmann::json::parse(s.text(first + 4));
    f.campaign = s.text(first + 5);
    f.trials = nlohmann::json::parse(s.text(first + 6)).get<std::vector<std::int64_t>>();
    f.origin = s.text(first + 7);
    f.created = s.real(first + 8);
    return f;
}

nlohmann::json finding_to_json(const Finding& f) {
    return {{"uid", f.uid},           {"kind", f.kind},       {"workload", f.workload},
            {"verified", f.verified}, {"content", f.content}, {"campaign", f.campaign},
            {"trials", f.trials},     {"origin", f.origin},   {"created", f.created}};
}

Finding finding_from_json(const nlohmann::json& j) {
    Finding f;
    f.uid = j.at("uid").get<std::string>();
    f.kind = j.at("kind").get<std::string>();
    f.workload = j.at("workload").get<std::string>();
    f.verified = j.at("verified").get<bool>();
    f.content = j.at("content");
    f.campaign = j.at("campaign").get<std::string>();
    f.trials = j.at("trials").get<std::vector<std::int64_t>>();
    f.origin = j.at("origin").get<std::string>();
    f.created = j.at("created").get<double>();
    if (f.uid.size() != 64 || f.uid.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw Error("finding uid '" + f.uid + "'", "", "a 64-digit hex digest");
    static const std::set<std::string> kinds{"knob_setting",      "patch_effect",  "knob_effect",
                                             "memory_correction", "oom_threshold", "noise"};
    if (!kinds.count(f.kind))
        throw Error("unknown finding kind '" + f.kind + "'", "", "one of the documented kinds");
    return f;
}

} // namespace

namespace {
// The bank's directory, made when missing (the default path's ~/.local/share/infrarsi on first use): only
// where a bank is opened, so that naming the default path creates nothing.
const std::string& with_parent_made(const std::string& path) {
    if (const auto parent = fs::path(path).parent_path(); !parent.empty()) {
        std::error_code ec;
        fs::create_directories(parent, ec);
        if (ec)
            throw Error("cannot create the experience bank's directory: " + ec.message(), parent.string());
    }
    return path;
}
} // namespace

ExperienceBank::ExperienceBank(const std::string& path, const std::string& cluster)
    : db_(with_parent_made(path)), cluster_(cluster) {
    migrate();
}

void ExperienceBank::migrate() {
    store::Statement v(db_, "PRAGMA user_version");
    v.step();
    int version = static_cast<int>(v.integer(0));
    v.reset();
    if (version > schema_version)
        throw Error("bank schema version " + std::to_string(version) + " is newer than this build's " +
                        std::to_string(schema_version),
                    db_.path(), "a bank written by this InfraRSI version or older");
    if (version == 0) {
        // A database that has tables but no version is not a bank: refuse rather than write into it.
        store::Statement t(db_, "SELECT count(*) FROM sqlite_master WHERE type='table'");
        t.step();
        if (t.integer(0) != 0)
            throw Error("not an InfraRSI experience bank (tables without a bank schema)", db_.path(),
                        "a bank file, or a new path");
        store::Transaction tx(db_);
        db_.exec(kSchema);
        store::Statement m(db_,
                           "INSERT INTO meta(key, value) VALUES ('format', 'infrarsi-bank'), ('created', ?)");
        m.bind(1, std::to_string(now_s())).run();
        db_.exec("PRAGMA user_version=" + std::to_string(schema_version));
        tx.commit();
        return;
    }
    store::Statement f(db_, "SELECT value FROM meta WHERE key='format'");
    if (!f.step() || f.text(0) != "infrarsi-bank")
        throw Error("not an InfraRSI experience bank", db_.path(), "meta format 'infrarsi-bank'");
}

nlohmann::json ExperienceBank::match_hardware(const HardwareKey& here) {
    nlohmann::json m = {{"entries", 0}, {"seen", false}};
    for (const auto& h : hardware(here)) {
        m["entries"] = m["entries"].get<int>() + 1;
        if (m.contains("similarity") && h.similarity <= m["similarity"].get<double>()) continue;
        m.update({{"seen", h.similarity >= kSeenHardwareSimilarity},
                  {"similarity", h.similarity},
                  {"nearest", h.fingerprint}});
    }
    return m;
}

std::string describe_match(const nlohmann::json& m) {
    if (!m.contains("entries")) return "hardware not matched (a campaign from before the match was kept)";
    if (m["entries"].get<int>() == 0) return "unseen hardware (the bank is empty)";
    const double sim = m.value("similarity", 0.0);
    return m.value("seen", false)
               ? fmt::format("seen hardware (similarity {:.2f} to {})", sim, m.value("nearest", "?"))
               : fmt::format("unseen hardware (nearest of {} entries: similarity {:.2f})",
                             m["entries"].get<int>(), sim);
}

std::int64_t ExperienceBank::hardware_id(const std::string& fp) {
    store::Statement s(db_, "SELECT id FROM hardware WHERE fingerprint=?");
    s.bind(1, fp);
    return s.step() ? s.integer(0) : -1;
}

std::int64_t ExperienceBank::upsert_hardware(const HardwareKey& key, const std::string& node) {
    auto fp = fingerprint(key);
    double t = now_s();
    auto id = hardware_id(fp);
    if (id < 0) {
        store::Statement ins(
            db_, "INSERT INTO hardware(fingerprint, key, nodes, first_seen, last_seen) VALUES (?,?,?,?,?)");
        nlohmann::json nodes = nlohmann::json::array();
        if (!node.empty()) nodes.push_back(node);
        ins.bind(1, fp).bind(2, to_json(key).dump()).bind(3, nodes.dump()).bind(4, t).bind(5, t).run();
        return db_.last_insert_rowid();
    }
    store::Statement get(db_, "SELECT nodes FROM hardware WHERE id=?");
    get.bind(1, id).step();
    auto nodes = nlohmann::json::parse(get.text(0));
    if (!node.empty() && std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
    store::Statement up(db_, "UPDATE hardware SET nodes=?, last_seen=? WHERE id=?");
    up.bind(1, nodes.dump()).bind(2, t).bind(3, id).run();
    return id;
}

bool ExperienceBank::insert_finding(std::int64_t hardware_id, const Finding& f) {
    store::Statement ins(
        db_, "INSERT OR IGNORE INTO findings(uid, hardware_id, workload, kind, verified, content, "
             "campaign, trials, origin, created) VALUES (?,?,?,?,?,?,?,?,?,?)");
    ins.bind(1, f.uid)
        .bind(2, hardware_id)
        .bind(3, f.workload)
        .bind(4, f.kind)
        .bind(5, f.verified ? 1 : 0)
        .bind(6, f.content.dump())
        .bind(7, f.campaign)
        .bind(8, nlohmann::json(f.trials).dump())
        .bind(9, f.origin)
        .bind(10, f.created)
        .run();
    return db_.changes() > 0;
}

bool ExperienceBank::add_finding(const HardwareKey& key, Finding f) {
    auto hw = upsert_hardware(key);
    f.uid = finding_uid(fingerprint(key), f);
    if (f.origin.empty()) f.origin = cluster_;
    if (f.created == 0) f.created = now_s();
    return insert_finding(hw, f);
}

IngestSummary ExperienceBank::ingest_allocation_records(const std::string& path, const SoftwareStack& stack) {
    IngestSummary sum;
    auto read = node::read_records(path);
    sum.errors = read.errors;
    store::Transaction tx(db_);
    for (const auto& r : read.records) {
        ++sum.records;
        HardwareKey key{r.topology, 0, stack};
        bool known = hardware_id(fingerprint(key)) >= 0;
        auto hw = upsert_hardware(key, r.node);
        if (!known) ++sum.hardware_new;
        std::string job = std::to_string(r.job_id);
        nlohmann::json cal = node::to_json(r.calibration);
        std::string uid = patch::hash_text(job + "|" + r.node + "|" + r.time + "|" + cal.dump());
        store::Statement ins(
            db_, "INSERT OR IGNORE INTO noise(uid, hardware_id, node, job, time, calibration, origin) "
                 "VALUES (?,?,?,?,?,?,?)");
        ins.bind(1, uid)
            .bind(2, hw)
            .bind(3, r.node)
            .bind(4, job)
            .bind(5, r.time)
            .bind(6, cal.dump())
            .bind(7, cluster_);
        ins.run();
        if (db_.changes() > 0)
            ++sum.noise_new;
        else
            ++sum.skipped;
    }
    tx.commit();
    return sum;
}

std::vector<Prior> ExperienceBank::priors(const HardwareKey& here, const std::string& workload, double now,
                                          double half_life_days, double min_weight) {
    std::vector<Prior> out;
    store::Statement s(
        db_, "SELECT h.key, f.uid, f.workload, f.kind, f.verified, f.content, f.campaign, f.trials, "
             "f.origin, f.created FROM findings f JOIN hardware h ON h.id = f.hardware_id "
             "WHERE f.verified = 1 AND f.workload = ?");
    s.bind(1, workload);
    while (s.step()) {
        Prior p;
        p.hardware = hardware_key_from_json(nlohmann::json::parse(s.text(0)));
        p.finding = finding_from_row(s, 1);
        p.similarity = similarity(here, p.hardware);
        double age_days = std::max(0.0, (now - p.finding.created) / 86400.0);
        p.weight = p.similarity * std::pow(0.5, age_days / half_life_days);
        p.hypothesis = p.similarity < kSeenHardwareSimilarity;
        if (p.weight >= min_weight) out.push_back(std::move(p));
    }
    std::stable_sort(out.begin(), out.end(),
                     [](const Prior& a, const Prior& b) { return a.weight > b.weight; });
    return out;
}

std::vector<Finding> ExperienceBank::findings(const std::string& workload) {
    std::vector<Finding> out;
    store::Statement s(db_,
                       "SELECT uid, workload, kind, verified, content, campaign, trials, origin, created "
                       "FROM findings WHERE ? = '' OR workload = ? ORDER BY created DESC, id DESC");
    s.bind(1, workload).bind(2, workload);
    while (s.step())
        out.push_back(finding_from_row(s, 0));
    return out;
}

std::vector<ExperienceBank::HardwareEntry>
ExperienceBank::hardware(const std::optional<HardwareKey>& relative_to) {
    std::vector<HardwareEntry> out;
    store::Statement s(db_, "SELECT h.id, h.fingerprint, h.key, h.nodes, "
                            "(SELECT count(*) FROM findings f WHERE f.hardware_id = h.id), "
                            "(SELECT count(*) FROM noise n WHERE n.hardware_id = h.id) FROM hardware h");
    while (s.step()) {
        HardwareEntry e{s.integer(0),
                        s.text(1),
                        hardware_key_from_json(nlohmann::json::parse(s.text(2))),
                        nlohmann::json::parse(s.text(3)).get<std::vector<std::string>>(),
                        0,
                        static_cast<int>(s.integer(4)),
                        static_cast<int>(s.integer(5))};
        e.similarity = relative_to ? similarity(*relative_to, e.key) : 0;
        out.push_back(std::move(e));
    }
    if (relative_to)
        std::stable_sort(out.begin(), out.end(),
                         [](auto& a, auto& b) { return a.similarity > b.similarity; });
    return out;
}

void ExperienceBank::export_to(const std::string& path) {
    nlohmann::json doc = {{"format", kBankExportFormat},
                          {"version", kBankExportVersion},
                          {"origin", cluster_},
                          {"exported_at", now_s()}};
    nlohmann::json hw = nlohmann::json::array(), finds = nlohmann::json::array(),
                   noise = nlohmann::json::array();
    store::Statement h(db_, "SELECT fingerprint, key, nodes FROM hardware ORDER BY id");
    while (h.step())
        hw.push_back({{"fingerprint", h.text(0)},
                      {"key", nlohmann::json::parse(h.text(1))},
                      {"nodes", nlohmann::json::parse(h.text(2))}});
    store::Statement f(db_,
                       "SELECT h.fingerprint, f.uid, f.workload, f.kind, f.verified, f.content, f.campaign, "
                       "f.trials, f.origin, f.created FROM findings f JOIN hardware h ON h.id=f.hardware_id "
                       "ORDER BY f.id");
    while (f.step()) {
        auto j = finding_to_json(finding_from_row(f, 1));
        j["hardware"] = f.text(0);
        finds.push_back(std::move(j));
    }
    store::Statement n(
        db_, "SELECT h.fingerprint, n.uid, n.node, n.job, n.time, n.calibration, n.origin FROM noise n "
             "JOIN hardware h ON h.id=n.hardware_id ORDER BY n.id");
    while (n.step())
        noise.push_back({{"hardware", n.text(0)},
                         {"uid", n.text(1)},
                         {"node", n.text(2)},
                         {"job", n.text(3)},
                         {"time", n.text(4)},
                         {"calibration", nlohmann::json::parse(n.text(5))},
                         {"origin", n.text(6)}});
    doc["hardware"] = hw;
    doc["findings"] = finds;
    doc["noise"] = noise;
    // Checked, fsync'd and renamed into place: a crash or a full disk never leaves half an export.
    write_file_atomically(path, doc.dump(1) + "\n");
}

ImportSummary ExperienceBank::import_from(const std::string& path) {
    // Another site's file: bounded in size and depth before anything copies or prints a value of it.
    const nlohmann::json doc = read_bounded_json(path, "an export written by `infrarsi bank export`",
                                                 {.max_bytes = kMaxBankExportBytes});
    // Compared as JSON values: doc.value("format", "") throws a type error when "format" is not a string.
    if (!doc.is_object() || !doc.contains("format") || doc.at("format") != kBankExportFormat)
        throw Error("not an InfraRSI bank export", path, std::string("format \"") + kBankExportFormat + "\"");
    // Compared as a JSON number: a conversion to int first would read 4294967297 as 1.
    if (!doc.contains("version") || !doc.at("version").is_number_integer() ||
        doc.at("version") != kBankExportVersion)
        throw Error(
            "bank export version " +
                (doc.contains("version") ? doc.at("version").dump().substr(0, 64) : std::string("missing")) +
                " is not understood by this build",
            path, "version " + std::to_string(kBankExportVersion));

    // Validate everything first: a bad entry anywhere leaves the bank untouched.
    struct Hw {
        std::string fp;
        HardwareKey key;
        std::vector<std::string> nodes;
    };
    std::vector<Hw> hws;
    std::vector<std::pair<std::string, Finding>> finds;
    std::vector<nlohmann::json> noise;
    std::set<std::string> fps;
    try {
        for (const auto& h : doc.at("hardware")) {
            Hw e{h.at("fingerprint").get<std::string>(), hardware_key_from_json(h.at("key")),
                 h.at("nodes").get<std::vector<std::string>>()};
            if (fingerprint(e.key) != e.fp)
                throw Error("hardware entry " + e.fp + " does not match its key (edited or corrupted)", path);
            fps.insert(e.fp);
            hws.push_back(std::move(e));
        }
        for (const auto& f : doc.at("findings")) {
            auto fp = f.at("hardware").get<std::string>();
            if (!fps.count(fp)) throw Error("finding refers to unknown hardware " + fp, path);
            auto finding = finding_from_json(f);
            if (finding_uid(fp, finding) != finding.uid)
                throw Error("finding " + finding.uid.substr(0, 12) +
                                " does not match its content (edited or corrupted)",
                            path);
            finds.emplace_back(fp, std::move(finding));
        }
        for (const auto& n : doc.at("noise")) {
            if (!fps.count(n.at("hardware").get<std::string>()))
                throw Error("noise record on unknown hardware", path);
            for (const char* k : {"uid", "node", "job", "time", "origin"})
                n.at(k).get<std::string>();
            n.at("calibration");
            noise.push_back(n);
        }
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("malformed bank export: ") + e.what(), path,
                    "hardware, findings and noise arrays");
    } catch (const Error& e) {
        throw Error(e.problem(), path, e.expected());
    }

    ImportSummary sum;
    sum.origin =
        doc.contains("origin") && doc.at("origin").is_string() ? doc.at("origin").get<std::string>() : "";
    store::Transaction tx(db_);
    std::map<std::string, std::int64_t> ids;
    for (const auto& h : hws) {
        bool known = hardware_id(h.fp) >= 0;
        auto id = upsert_hardware(h.key);
        for (const auto& n : h.nodes)
            upsert_hardware(h.key, n);
        ids[h.fp] = id;
        if (!known) ++sum.hardware_new;
    }
    for (auto& [fp, f] : finds) {
        if (insert_finding(ids.at(fp), f))
            ++sum.findings_new;
        else
            ++sum.findings_known;
    }
    for (const auto& n : noise) {
        store::Statement ins(
            db_, "INSERT OR IGNORE INTO noise(uid, hardware_id, node, job, time, calibration, origin) "
                 "VALUES (?,?,?,?,?,?,?)");
        ins.bind(1, n["uid"].get<std::string>())
            .bind(2, ids.at(n["hardware"].get<std::string>()))
            .bind(3, n["node"].get<std::string>())
            .bind(4, n["job"].get<std::string>())
            .bind(5, n["time"].get<std::string>())
            .bind(6, n["calibration"].dump())
            .bind(7, n["origin"].get<std::string>())
            .run();
        if (db_.changes() > 0) ++sum.noise_new;
    }
    tx.commit();
    return sum;
}

std::string default_bank_path() {
    if (const char* p = std::getenv("INFRARSI_BANK"); p && *p)
        return std::string(p) == "off" ? std::string() : p;
    fs::path base;
    if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x)
        base = x;
    else if (const char* h = std::getenv("HOME"); h && *h)
        base = fs::path(h) / ".local" / "share";
    else
        base = "/tmp";
    return (base / "infrarsi" / "bank.sqlite").string();
}

SoftwareStack current_software_stack(const std::string& workload_version) {
    SoftwareStack s;
#if defined(__clang__)
    s.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
    s.compiler = "g++ " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
                 std::to_string(__GNUC_PATCHLEVEL__);
#endif
    try {
        auto r = run_process({"ompi_info", "--parsable", "--version", "ompi"});
        // "ompi:version:full:4.1.4"
        auto pos = r.out.find("ompi:version:full:");
        if (r.ok() && pos != std::string::npos) {
            auto v = r.out.substr(pos + 18);
            s.mpi = "Open MPI " + v.substr(0, v.find('\n'));
        }
    } catch (const Error&) {
        // No MPI on this machine: the stack says so by leaving it empty.
    }
    s.workload = workload_version;
    return s;
}

} // namespace infrarsi::bank
