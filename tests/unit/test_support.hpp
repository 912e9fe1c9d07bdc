#pragma once
// Helpers of several unit tests: a private temporary directory, a whole file's text, and the toyload
// fixture's candidates (tests/fixtures/toyload.contract.toml).
#include "space/space.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

namespace infrarsi::test {

// A new directory under the system's temporary directory, removed with everything in it at the end.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& prefix = "infrarsi-test") {
        std::string t = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
        if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + t);
        path = t;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

// The whole file; empty when it cannot be read.
inline std::string read_file(const std::filesystem::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), {}};
}

// A candidate of the toyload fixture's space: its three knobs, no patch.
inline space::Candidate toy(long long micro_batch, long long grad_accum, const std::string& recompute) {
    space::Candidate c;
    c.knobs = {{"micro_batch", micro_batch}, {"grad_accum", grad_accum}, {"recompute", recompute}};
    return c;
}

} // namespace infrarsi::test
