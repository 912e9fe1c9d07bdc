#pragma once
// The one error type of the workload: what failed, and what was expected, in one actionable line.
#include <stdexcept>
#include <string>

namespace minigpt {

class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

} // namespace minigpt
