#pragma once
// A child process spoken to line by line over its stdin/stdout, for the ask/tell protocol of the Optuna
// adapter. util/process.hpp only runs a child to completion; this conversation is a benchmark-only need.
#include <cstdio>
#include <string>
#include <sys/types.h>
#include <vector>

namespace infrarsi::bench {

class PipeChild {
  public:
    explicit PipeChild(const std::vector<std::string>& argv);
    ~PipeChild();
    PipeChild(const PipeChild&) = delete;
    PipeChild& operator=(const PipeChild&) = delete;

    void send(const std::string& line);
    std::string receive(); // one line without the newline; throws Error at end of stream

  private:
    pid_t pid_ = -1;
    std::FILE* to_ = nullptr;
    std::FILE* from_ = nullptr;
    std::string command_;
};

} // namespace infrarsi::bench
