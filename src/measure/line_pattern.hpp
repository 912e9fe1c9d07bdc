#pragma once
// A regular expression over one line of a job's log, with named groups (PCRE2 syntax: `(?<loss>[0-9.]+)`).
// A log is a job's output, so: lines are cut at kMaxLineBytes before matching, PCRE2's match and depth limits
// bound the work per line (a pathological pattern gives "no match", never a hang or a stack overflow), and a
// pattern that does not compile is an Error that says where.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::measure {

inline constexpr std::size_t kMaxLineBytes = 8192;

class LinePattern {
  public:
    // Throws infrarsi::Error with PCRE2's message and the offset in the pattern.
    explicit LinePattern(const std::string& pattern);
    ~LinePattern();
    LinePattern(LinePattern&&) noexcept;
    LinePattern& operator=(LinePattern&&) noexcept;

    const std::string& pattern() const { return pattern_; }
    const std::vector<std::string>& group_names() const { return names_; }
    bool has_group(std::string_view name) const;

    // The named groups that took part in the match (a group left out by an optional branch is absent).
    std::optional<std::map<std::string, std::string>> match(std::string_view line) const;

  private:
    struct Impl;
    std::string pattern_;
    std::vector<std::string> names_;
    std::unique_ptr<Impl> impl_;
};

} // namespace infrarsi::measure
