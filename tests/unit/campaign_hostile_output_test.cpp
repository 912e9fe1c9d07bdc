// A trial's own directory is the job's to write: what it leaves there must neither hang nor crash the
// orchestrator (issue 29). The stepload workload, wrapped so that every trial of chunk 2 ends by replacing
// its log.txt with a FIFO (an open for reading blocked `run` and the daemon forever) and by writing a
// result.json nested a million levels deep, with a directory at the wrapper's temporary name so the wrapper
// cannot replace it (infrarsid crashed in a loop on it). The campaign runs to its end on the local scheduler,
// those trials are recorded as failed with the reason logged, and the others are measured as usual.
#include "campaign/campaign.hpp"

#include "stepload_campaign.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace infrarsi;
using test::TempDir;

TEST_CASE("a trial that leaves a FIFO for log.txt and a deep result.json the wrapper cannot replace is "
          "recorded failed, and the campaign runs on") {
    TempDir d("infrarsi-hostile");
    std::ofstream(d.path / "hostile.sh") << R"(#!/bin/bash
bash "$@" || exit $?
[ "${STEPLOAD_CHUNK:-1}" = 2 ] || exit 0
mkdir result.json.tmp
{ head -c 1000000 /dev/zero | tr '\0' '['; head -c 1000000 /dev/zero | tr '\0' ']'; } >result.json
rm -f log.txt && mkfifo log.txt
)";
    const auto dir = test::stepload_campaign(
        d, {{R"(command = ["bash", "{source}/train.sh")",
             R"(command = ["bash", "{contract_dir}/hostile.sh", "{source}/train.sh")"}});
    campaign::Campaign c(dir);
    c.run(test::local_run_options(false)); // returns: nothing blocked on a FIFO, nothing recursed
    int hostile = 0;
    for (const auto& t : c.store().trials({})) {
        const fs::path tdir = fs::path(t.result_path).parent_path();
        if (fs::symlink_status(tdir / "log.txt").type() != fs::file_type::fifo) {
            if (t.kind == store::TrialKind::Doctor) CHECK(t.outcome == trial::Outcome::Ok);
            continue;
        }
        ++hostile;
        CHECK(t.outcome != trial::Outcome::Ok);
    }
    CHECK(hostile >= 1);
    bool logged = false;
    for (const auto& [when, msg] : c.store().events(100000))
        logged = logged || (msg.find("result ignored") != std::string::npos &&
                            msg.find("nested more than 64 levels") != std::string::npos);
    CHECK(logged);
}
