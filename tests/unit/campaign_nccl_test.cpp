// The doctor's NCCL transport check in a real campaign on the local scheduler: the toyload fixture, its
// command wrapped to print NCCL's INFO lines of a captured run (tests/fixtures/nccl) before it trains, and
// the nodes' NICs from the plugin's allocation records (tests/fixtures/bank: a node with an InfiniBand HCA).
#include "campaign/campaign.hpp"
#include "util/error.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace infrarsi;
using test::TempDir;
using namespace std::chrono_literals;

namespace {

const fs::path fx = INFRARSI_FIXTURES;

// A toyload campaign whose job prints `nccl_fixture`'s lines and its NCCL_DEBUG first; `extra` is added to
// the contract.
fs::path nccl_campaign(const TempDir& d, const std::string& nccl_fixture, const std::string& extra) {
    fs::copy(fx / "toyload", d.path / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", d.path / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "nccl" / nccl_fixture, d.path / "nccl.log");
    std::string text = test::read_file(fx / "toyload.contract.toml");
    const std::string command = "command = [\"{build}/toy\"]";
    text.replace(
        text.find(command), command.size(),
        "command = [\"sh\", \"-c\", \"echo NCCL_DEBUG=$NCCL_DEBUG; cat {contract_dir}/nccl.log; exec "
        "{build}/toy\"]");
    const std::string constants = "[constants]", doctor = "doctor = 3";
    text.replace(text.find(constants), constants.size(), extra + "\n\n[constants]");
    text.replace(text.find(doctor), doctor.size(), "doctor = 2");
    const std::string env = "TOY_GLOBAL_BATCH = 16"; // and little work per step: this test is about the log
    text.replace(text.find(env), env.size(), env + "\nTOY_WORK = 20000");
    std::ofstream(d.path / "toyload.contract.toml") << text;
    campaign::Campaign::init(d.path / "toyload.contract.toml", d.path / "c");
    return d.path / "c";
}

// A spool whose allocation record is a node with an InfiniBand HCA (mlx5_0).
fs::path infiniband_spool(const TempDir& d) {
    const auto spool = d.path / "spool";
    fs::create_directories(spool);
    fs::copy_file(fx / "bank" / "allocations-gpu-2s32c-pcie4.jsonl", spool / "allocations.jsonl");
    return spool;
}

campaign::RunOptions options(const fs::path& spool = {}) {
    campaign::RunOptions o;
    o.verbose = false;
    o.scheduler = "local";
    o.poll = 50ms;
    o.spool = spool.string();
    return o;
}

std::string error_of(campaign::Campaign& c, const campaign::RunOptions& o) {
    try {
        c.doctor(o);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST_CASE("the doctor stops a campaign whose baseline's NCCL sends over sockets where the nodes have IB") {
    TempDir d;
    const auto dir = nccl_campaign(d, "socket-2.18.log", "[nccl]\nused = true");
    campaign::Campaign c(dir);
    const auto e = error_of(c, options(infiniband_spool(d)));
    CHECK(e.find("fell back to a slower transport") != std::string::npos);
    CHECK(e.find("TCP sockets") != std::string::npos);
    CHECK(e.find("via NET/Socket/3") != std::string::npos);
    CHECK(e.find("mlx5_0") != std::string::npos);
    CHECK_FALSE(c.store().baseline().has_value());
    // The baseline runs had NCCL_DEBUG=INFO, and the check's reading is in the store.
    for (const auto& t : c.store().trials({.kinds = {store::TrialKind::Doctor}}))
        CHECK(test::read_file(fs::path(t.result_path).parent_path() / "log.txt").find("NCCL_DEBUG=INFO\n") !=
              std::string::npos);
    const auto seen = nlohmann::json::parse(c.store().meta("nccl_transport").value_or("{}"));
    REQUIRE(seen["runs"].size() == 2);
    CHECK(seen["runs"][0]["fallbacks"][0]["kind"] == "sockets_over_rdma");
    CHECK(seen["runs"][0]["nccl"]["version"] == "2.18.3");
}

TEST_CASE("with [nccl] fallback = \"warn\" the doctor logs a failed net plugin and keeps the baseline") {
    TempDir d;
    const auto dir =
        nccl_campaign(d, "plugin-unsupported-2.19.log", "[nccl]\nused = true\nfallback = \"warn\"");
    campaign::Campaign c(dir);
    CHECK(error_of(c, options()) == "");
    CHECK(c.store().baseline().has_value());
    bool warned = false;
    for (const auto& [t, message] : c.store().events(50))
        warned = warned || (message.find("warning: NCCL fell back") != std::string::npos &&
                            message.find("network plugin did not load") != std::string::npos);
    CHECK(warned);
}

TEST_CASE("a good NCCL baseline passes the doctor") {
    TempDir d;
    const auto dir = nccl_campaign(d, "ib-roce-2.19.log", "[knobs]\ninclude = [\"nccl-algo\"]");
    campaign::Campaign c(dir);
    CHECK(error_of(c, options(infiniband_spool(d))) == "");
    CHECK(c.store().baseline().has_value());
    const auto seen = nlohmann::json::parse(c.store().meta("nccl_transport").value_or("{}"));
    REQUIRE(seen["runs"].size() == 2);
    CHECK(seen["runs"][1]["fallbacks"].empty());
    CHECK(seen["runs"][1]["nccl"]["networks"] == nlohmann::json::array({"IB"}));
}

TEST_CASE("only the doctor's runs of a job that uses NCCL get NCCL_DEBUG=INFO") {
    TempDir d, plain;
    campaign::Campaign nccl(nccl_campaign(d, "ib-roce-2.19.log", "[nccl]\nused = true"));
    campaign::Campaign none(nccl_campaign(plain, "ib-roce-2.19.log", ""));
    auto env_of = [](campaign::Campaign& c, store::TrialKind kind) {
        campaign::Task t;
        t.candidate = c.contract().space.baseline();
        t.kind = kind;
        const auto id =
            c.batches()
                .plan(kind == store::TrialKind::Doctor ? store::BatchKind::Doctor : store::BatchKind::Search,
                      {t})
                .id;
        const auto manifest = nlohmann::json::parse(test::read_file(c.store().batch(id).manifest));
        return manifest["tasks"][0]["env"];
    };
    CHECK(env_of(nccl, store::TrialKind::Doctor).value("NCCL_DEBUG", "") == "INFO");
    CHECK_FALSE(env_of(nccl, store::TrialKind::Search).contains("NCCL_DEBUG"));
    CHECK_FALSE(env_of(none, store::TrialKind::Doctor).contains("NCCL_DEBUG"));
}
