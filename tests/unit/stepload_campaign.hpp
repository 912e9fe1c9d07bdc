#pragma once
// The campaign tests' common set-up on the stepload fixture (tests/fixtures/stepload*): a private copy of the
// workload, its patches and its contract, the contract changed by text edits, initialized as <dir>/c; and the
// options that run a campaign on the local scheduler, quietly, polling fast.
#include "campaign/campaign.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace infrarsi::test {

// `edits`: text of the contract -> its replacement, each of which must be there.
inline std::filesystem::path stepload_campaign(const TempDir& d,
                                               const std::map<std::string, std::string>& edits = {}) {
    namespace fs = std::filesystem;
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "stepload", d.path / "stepload", fs::copy_options::recursive);
    fs::copy(fx / "stepload-patches", d.path / "stepload-patches", fs::copy_options::recursive);
    std::string contract = read_file(fx / "stepload.contract.toml");
    for (const auto& edit : edits) { // not a structured binding: clang 14 cannot capture one (REQUIRE_MESSAGE)
        const std::string& from = edit.first;
        const auto at = contract.find(from);
        REQUIRE_MESSAGE(at != std::string::npos, "the stepload contract has no '" << from << "'");
        contract.replace(at, from.size(), edit.second);
    }
    std::ofstream(d.path / "stepload.contract.toml") << contract;
    campaign::Campaign::init(d.path / "stepload.contract.toml", d.path / "c");
    return d.path / "c";
}

inline campaign::RunOptions local_run_options(bool verify = true) {
    using namespace std::chrono_literals;
    campaign::RunOptions o;
    o.verbose = false;
    o.scheduler = "local";
    o.poll = 20ms;
    o.verify = verify;
    return o;
}

} // namespace infrarsi::test
