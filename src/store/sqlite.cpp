#include "store/sqlite.hpp"

#include "util/error.hpp"

#include <sqlite3.h>

#include <filesystem>
#include <sys/vfs.h>

namespace infrarsi::store {

Database::Database(const std::string& path) : path_(path) {
    int rc = sqlite3_open_v2(path.c_str(), &db_,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (rc != SQLITE_OK) {
        std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
        sqlite3_close(db_);
        db_ = nullptr;
        throw Error("cannot open database: " + msg, path, "a writable SQLite file");
    }
    sqlite3_busy_timeout(db_, 10000);
    // WAL needs shared memory between every process that opens the file, which a network filesystem does
    // not give (SQLite's docs: "WAL does not work over a network filesystem"): the daemon on a compute node
    // and `status` on the login node would then each see their own database. There, a rollback journal.
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    struct statfs fs {};
    const bool network =
        ::statfs(dir.c_str(), &fs) == 0 &&
        journal_mode_for_filesystem(static_cast<unsigned long>(fs.f_type)) == JournalMode::Delete;
    journal_ = network ? JournalMode::Delete : JournalMode::Wal;
    if (journal_ == JournalMode::Wal) {
        exec("PRAGMA journal_mode=WAL");
        exec("PRAGMA synchronous=NORMAL");
    } else {
        exec("PRAGMA journal_mode=DELETE");
        exec("PRAGMA synchronous=FULL");
    }
    exec("PRAGMA foreign_keys=ON");
}

JournalMode journal_mode_for_filesystem(unsigned long f_type) {
    // statfs(2) f_type magics (linux/magic.h and the filesystems' own headers).
    switch (f_type) {
    case 0x6969:     // NFS
    case 0x517B:     // SMB
    case 0xFF534D42: // CIFS
    case 0xFE534D42: // SMB2
    case 0x5346414F: // AFS
    case 0x6B414653: // kAFS
    case 0x00C36400: // Ceph
    case 0x0BD00BD0: // Lustre
    case 0x47504653: // GPFS (IBM Storage Scale)
    case 0x19830326: // BeeGFS
    case 0x01021997: // 9P (v9fs)
    case 0x65735546: // FUSE (sshfs, s3fs, ...: may span machines)
    case 0x013111A8: // IBRIX
    case 0xAAD7AAEA: // PanFS
        return JournalMode::Delete;
    default:
        return JournalMode::Wal;
    }
}

Database::~Database() {
    if (db_) sqlite3_close_v2(db_);
}

std::string Database::message() const {
    return db_ ? sqlite3_errmsg(db_) : "";
}

void Database::exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : message();
        sqlite3_free(err);
        throw Error("SQLite: " + msg, path_, "a successful statement: " + sql.substr(0, 80));
    }
}

std::int64_t Database::last_insert_rowid() const {
    return sqlite3_last_insert_rowid(db_);
}
int Database::changes() const {
    return sqlite3_changes(db_);
}

Statement::Statement(Database& db, const std::string& sql) : db_(db), sql_(sql) {
    if (sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
        throw Error("SQLite cannot prepare: " + db.message(), db.path(), "valid SQL: " + sql.substr(0, 80));
}

Statement::~Statement() {
    sqlite3_finalize(stmt_);
}

Statement& Statement::bind(int i, std::int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
}
Statement& Statement::bind(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
}
Statement& Statement::bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
}
Statement& Statement::bind(int i, std::nullopt_t) {
    sqlite3_bind_null(stmt_, i);
    return *this;
}

bool Statement::step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw Error("SQLite: " + db_.message(), db_.path(), "a successful statement: " + sql_.substr(0, 80));
}

void Statement::run() {
    while (step()) {
    }
}

void Statement::reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int c) const {
    return sqlite3_column_type(stmt_, c) == SQLITE_NULL;
}
std::int64_t Statement::integer(int c) const {
    return sqlite3_column_int64(stmt_, c);
}
double Statement::real(int c) const {
    return sqlite3_column_double(stmt_, c);
}
std::string Statement::text(int c) const {
    auto p = sqlite3_column_text(stmt_, c);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(stmt_, c)))
             : std::string();
}
std::optional<double> Statement::opt_real(int c) const {
    return is_null(c) ? std::nullopt : std::optional<double>(real(c));
}
std::optional<std::int64_t> Statement::opt_integer(int c) const {
    return is_null(c) ? std::nullopt : std::optional<std::int64_t>(integer(c));
}
std::optional<std::string> Statement::opt_text(int c) const {
    return is_null(c) ? std::nullopt : std::optional<std::string>(text(c));
}

Transaction::Transaction(Database& db) : db_(db) {
    db_.exec("BEGIN IMMEDIATE");
}
Transaction::~Transaction() {
    if (!done_) {
        try {
            db_.exec("ROLLBACK");
        } catch (...) {
        }
    }
}
void Transaction::commit() {
    db_.exec("COMMIT");
    done_ = true;
}

} // namespace infrarsi::store
