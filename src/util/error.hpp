#pragma once
// The one error type of the project: what failed, where (a file:line, a command, a job id), and what was
// expected, so every message a user sees can be acted on.
#include <stdexcept>
#include <string>

namespace infrarsi {

class Error : public std::runtime_error {
  public:
    explicit Error(std::string what, std::string where = {}, std::string expected = {})
        : std::runtime_error(compose(what, where, expected)), what_(std::move(what)),
          where_(std::move(where)), expected_(std::move(expected)) {}

    const std::string& problem() const noexcept { return what_; }
    const std::string& where() const noexcept { return where_; }
    const std::string& expected() const noexcept { return expected_; }

  private:
    static std::string compose(const std::string& what, const std::string& where,
                               const std::string& expected) {
        std::string s = where.empty() ? what : where + ": " + what;
        if (!expected.empty()) s += " (expected " + expected + ")";
        return s;
    }
    std::string what_, where_, expected_;
};

} // namespace infrarsi
