// NCCL in the contract: knob presets ([knobs] include), knobs whose "unset" choice leaves the variable to
// the job, [nccl], and the per-GPU memory limit ([resources] gpu_mem).
#include "contract/contract.hpp"
#include "space/presets.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace infrarsi;

namespace {
const fs::path fixtures = INFRARSI_FIXTURES;

// The toyload contract with edits, written next to it (relative paths still resolve).
struct Variant {
    fs::path path;
    explicit Variant(std::initializer_list<std::pair<std::string, std::string>> edits) {
        std::string text = test::read_file(fixtures / "toyload.contract.toml");
        for (const auto& [from, to] : edits) {
            const auto pos = text.find(from);
            REQUIRE_MESSAGE(pos != std::string::npos, from);
            text.replace(pos, from.size(), to);
        }
        path = fixtures / ("tmp-nccl-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
                           ".contract.toml");
        std::ofstream(path) << text;
    }
    ~Variant() { fs::remove(path); }
    static inline int counter = 0;
};

std::string error_of(const fs::path& p) {
    try {
        contract::load(p);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

const std::string kKnobs = "[knobs.micro_batch]";
std::pair<std::string, std::string> include(const std::string& list) {
    return {kKnobs, "[knobs]\ninclude = [" + list + "]\n\n" + kKnobs};
}
} // namespace

TEST_CASE("the nccl preset adds the NCCL knobs, whose baseline leaves the job's NCCL as it is") {
    Variant v({include("\"nccl\"")});
    const auto c = contract::load(v.path);
    CHECK(c.knob_presets == std::vector<std::string>{"nccl"});
    for (const char* name : {"nccl_algo", "nccl_proto", "nccl_min_nchannels", "nccl_max_nchannels",
                             "nccl_buffsize", "nccl_net_gdr_level"})
        CHECK_MESSAGE(c.space.knob(name) != nullptr, name);
    CHECK(c.space.knobs.size() == 3 + 6);
    CHECK(c.space.knob("nccl_algo")->env == "NCCL_ALGO");
    CHECK(c.space.knob("nccl_buffsize")->kind == space::KnobKind::Pow2);
    CHECK(contract::uses_nccl(c));
    // The baseline sets no NCCL variable but the buffer size at NCCL's own default.
    auto env = c.space.environment(c.space.baseline());
    CHECK(env.count("NCCL_ALGO") == 0);
    CHECK(env.count("NCCL_NET_GDR_LEVEL") == 0);
    CHECK(env.at("NCCL_BUFFSIZE") == "4194304");
    // A candidate that moves a knob off "default" sets its variable.
    auto cand = c.space.baseline();
    cand.knobs["nccl_algo"] = std::string("Tree");
    cand.knobs["nccl_max_nchannels"] = std::string("8");
    c.space.check(cand);
    env = c.space.environment(cand);
    CHECK(env.at("NCCL_ALGO") == "Tree");
    CHECK(env.at("NCCL_MAX_NCHANNELS") == "8");
    CHECK(env.count("NCCL_PROTO") == 0);
}

TEST_CASE("a part of the NCCL presets adds only its knobs") {
    Variant v({include("\"nccl-algo\", \"nccl-buffers\"")});
    const auto c = contract::load(v.path);
    CHECK(c.space.knobs.size() == 3 + 3);
    CHECK(c.space.knob("nccl_net_gdr_level") == nullptr);
    Variant twice({include("\"nccl\", \"nccl-algo\"")});
    CHECK(contract::load(twice.path).space.knobs.size() == 3 + 6);
}

TEST_CASE("a knob the contract declares on a preset's variable takes the preset knob's place") {
    Variant v(
        {include("\"nccl-algo\""),
         {"[constants]", "[knobs.algo]\nkind = \"choice\"\nvalues = [\"Ring\", \"Tree\", \"CollnetDirect\"]\n"
                         "env = \"NCCL_ALGO\"\nbaseline = \"Ring\"\n\n[constants]"}});
    const auto c = contract::load(v.path);
    CHECK(c.space.knob("nccl_algo") == nullptr);
    CHECK(c.space.knob("algo")->choices.size() == 3);
    CHECK(c.space.knob("nccl_proto") != nullptr);
}

TEST_CASE("an unknown preset, or a preset's variable that [workload.env] fixes, is refused with what to do") {
    Variant unknown({include("\"rccl\"")});
    const auto e = error_of(unknown.path);
    CHECK(e.find("unknown knob preset 'rccl'") != std::string::npos);
    CHECK(e.find("nccl-channels") != std::string::npos);
    Variant fixed(
        {include("\"nccl\""), {"TOY_GLOBAL_BATCH = 16", "TOY_GLOBAL_BATCH = 16\nNCCL_PROTO = \"LL\""}});
    CHECK(error_of(fixed.path).find("NCCL_PROTO, which [workload.env] fixes") != std::string::npos);
}

TEST_CASE("a choice knob's unset value leaves its variable out, only a choice knob on env has one") {
    Variant v({{"baseline = \"none\"", "baseline = \"none\"\nunset = \"none\""}});
    const auto c = contract::load(v.path);
    CHECK(c.space.knob("recompute")->unset_choice == "none");
    CHECK(c.space.environment(c.space.baseline()).count("TOY_RECOMPUTE") == 0);
    CHECK_FALSE(contract::uses_nccl(c));
    Variant bad({{"baseline = \"none\"", "baseline = \"none\"\nunset = \"never\""}});
    CHECK(error_of(bad.path).find("recompute.unset") != std::string::npos);
    Variant pow2({{"baseline = 16", "baseline = 16\nunset = \"1\""}});
    CHECK(error_of(pow2.path).find("choice knob delivered by env") != std::string::npos);
}

TEST_CASE("[nccl] says whether the job uses NCCL and whether a fallback stops the doctor") {
    Variant used({{"[constants]", "[nccl]\nused = true\nfallback = \"warn\"\n\n[constants]"}});
    const auto c = contract::load(used.path);
    CHECK(contract::uses_nccl(c));
    CHECK_FALSE(c.nccl.stop_on_fallback);
    CHECK(contract::load(fixtures / "toyload.contract.toml").nccl.stop_on_fallback);
    Variant bad({{"[constants]", "[nccl]\nfallback = \"ignore\"\n\n[constants]"}});
    CHECK(error_of(bad.path).find("unknown nccl.fallback 'ignore'") != std::string::npos);
    Variant typo({{"[constants]", "[nccl]\nuse = true\n\n[constants]"}});
    CHECK(error_of(typo.path).find("unknown key 'use' in [nccl]") != std::string::npos);
    // A knob on an NCCL_ variable says it too.
    Variant knob(
        {{"env = \"TOY_RECOMPUTE\"", "env = \"NCCL_PROTO\""},
         {"values = [\"none\", \"selective\", \"full\"]", "values = [\"none\", \"Simple\", \"LL\"]"}});
    CHECK(contract::uses_nccl(contract::load(knob.path)));
}

TEST_CASE("[resources] gpu_mem is the memory of one GPU a trial must fit under") {
    Variant v({{"mem = \"300M\"", "mem = \"300M\"\ngpu_mem = \"80G\""}});
    const auto c = contract::load(v.path);
    CHECK(c.resources.gpu_mem_bytes == 80LL << 30);
    CHECK(contract::load(fixtures / "toyload.contract.toml").resources.gpu_mem_bytes == 0);
    Variant bad({{"mem = \"300M\"", "mem = \"300M\"\ngpu_mem = \"80GB\""}});
    CHECK(error_of(bad.path).find("the memory of one GPU") != std::string::npos);
}
