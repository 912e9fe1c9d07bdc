#pragma once
// A small RAII wrapper over SQLite's C API: one Database (WAL on a local filesystem, a rollback journal on a
// network one; busy timeout, foreign keys), prepared
// Statements with typed binds and columns, and a Transaction that rolls back unless committed.
#include <cstdint>
#include <optional>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace infrarsi::store {

class Database;

// The journal a database gets where it lives: WAL (readers beside the writer) on a local filesystem, DELETE
// (a rollback journal, with POSIX locks) on a network filesystem, where WAL's shared memory does not span
// machines. `f_type` is statfs(2)'s filesystem magic.
enum class JournalMode { Wal, Delete };
JournalMode journal_mode_for_filesystem(unsigned long f_type);

class Statement {
  public:
    Statement(Database& db, const std::string& sql);
    ~Statement();
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& bind(int index, std::int64_t v);
    Statement& bind(int index, int v) { return bind(index, static_cast<std::int64_t>(v)); }
    Statement& bind(int index, double v);
    Statement& bind(int index, const std::string& v);
    Statement& bind(int index, const char* v) { return bind(index, std::string(v)); }
    Statement& bind(int index, std::nullopt_t);
    template <class T> Statement& bind(int index, const std::optional<T>& v) {
        return v ? bind(index, *v) : bind(index, std::nullopt);
    }

    bool step(); // true: a row is ready; false: done. Throws on errors.
    void run();  // step to completion
    void reset();

    bool is_null(int col) const;
    std::int64_t integer(int col) const;
    double real(int col) const;
    std::string text(int col) const;
    std::optional<double> opt_real(int col) const;
    std::optional<std::int64_t> opt_integer(int col) const;
    std::optional<std::string> opt_text(int col) const;

  private:
    Database& db_;
    sqlite3_stmt* stmt_ = nullptr;
    std::string sql_;
};

class Database {
  public:
    explicit Database(const std::string& path);
    ~Database();
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;

    void exec(const std::string& sql);
    std::int64_t last_insert_rowid() const;
    int changes() const;
    sqlite3* handle() { return db_; }
    const std::string& path() const { return path_; }
    std::string message() const;
    JournalMode journal() const { return journal_; } // chosen from where the file lives

  private:
    sqlite3* db_ = nullptr;
    std::string path_;
    JournalMode journal_ = JournalMode::Wal;
};

class Transaction {
  public:
    explicit Transaction(Database& db);
    ~Transaction();
    void commit();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

  private:
    Database& db_;
    bool done_ = false;
};

} // namespace infrarsi::store
