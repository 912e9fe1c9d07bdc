#include "contract/contract.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace fs = std::filesystem;
using namespace infrarsi;

namespace {
const fs::path fixtures = INFRARSI_FIXTURES;

std::string read(const fs::path& p) {
    std::ifstream in(p);
    return {std::istreambuf_iterator<char>(in), {}};
}

// Writes a variant of the toyload contract next to the fixture (so relative paths still resolve).
struct ContractVariant {
    fs::path path;
    ContractVariant(const std::string& from, const std::string& to) {
        std::string text = read(fixtures / "toyload.contract.toml");
        auto pos = text.find(from);
        REQUIRE_MESSAGE(pos != std::string::npos, from);
        text.replace(pos, from.size(), to);
        path = fixtures /
               ("tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".contract.toml");
        std::ofstream(path) << text;
    }
    ~ContractVariant() { fs::remove(path); }
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

int line_of(const fs::path& p, const std::string& needle) {
    std::ifstream in(p);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
        if (line.find(needle) != std::string::npos) return n;
    return -1;
}
} // namespace

TEST_CASE("the toyload contract loads with its knobs, constraint, scope and invariants") {
    auto c = contract::load(fixtures / "toyload.contract.toml");
    CHECK(c.name == "toyload");
    CHECK(c.resources.mem_bytes == 300LL << 20);
    CHECK(c.resources.time_limit_s == 180);
    REQUIRE(c.space.knobs.size() == 3);
    CHECK(c.space.knob("micro_batch")->kind == space::KnobKind::Pow2);
    CHECK(c.space.constraints.size() == 1);
    CHECK(c.space.violation(c.space.baseline().knobs).empty());
    CHECK(c.editable == std::vector<std::string>{"kernels/*"});
    CHECK(c.protected_files.size() == 2);
    CHECK(c.invariants.steps == 8);
    CHECK(c.invariants.loss_mode == contract::LossMode::LastKMean);
    CHECK(c.budget.trials == 8);
    CHECK(c.repeats.doctor == 3);
    CHECK(c.workload.env.at("TOY_GLOBAL_BATCH") == "16");
}

TEST_CASE("a TOML syntax error names file and line") {
    ContractVariant v("nodes = 1\n", "nodes = = 1\n");
    auto msg = error_of(v.path);
    CHECK(msg.find(v.path.string() + ":" + std::to_string(line_of(v.path, "nodes = = 1"))) !=
          std::string::npos);
    CHECK(msg.find("expected valid TOML") != std::string::npos);
}

TEST_CASE("a wrongly typed value names its line and the expected type") {
    ContractVariant v("steps = 8", "steps = \"eight\"");
    auto msg = error_of(v.path);
    CHECK(msg.find(":" + std::to_string(line_of(v.path, "steps = \"eight\""))) != std::string::npos);
    CHECK(msg.find("expected an integer") != std::string::npos);
}

TEST_CASE("an unknown key is an error, not a silent default") {
    ContractVariant v("warmup_steps = 2", "warmup_step = 2");
    auto msg = error_of(v.path);
    CHECK(msg.find("unknown key 'warmup_step'") != std::string::npos);
    CHECK(msg.find(":" + std::to_string(line_of(v.path, "warmup_step = 2"))) != std::string::npos);
}

TEST_CASE("a baseline outside the knob's domain is refused") {
    ContractVariant v("baseline = 1\n", "baseline = 3\n");
    auto msg = error_of(v.path);
    CHECK(msg.find("outside its domain") != std::string::npos);
    CHECK(msg.find(":" + std::to_string(line_of(v.path, "baseline = 3"))) != std::string::npos);
}

TEST_CASE("a baseline that violates a constraint is refused") {
    ContractVariant v("global_batch = 16", "global_batch = 32");
    CHECK(error_of(v.path).find("violate the constraint micro_batch * grad_accum == global_batch") !=
          std::string::npos);
}

TEST_CASE("a constraint over an unknown name is refused") {
    ContractVariant v("product = [\"micro_batch\", \"grad_accum\"]", "product = [\"micro_batch\", \"dp\"]");
    CHECK(error_of(v.path).find("'dp'") != std::string::npos);
}

TEST_CASE("bad memory and time values are refused with the expected format") {
    ContractVariant m("mem = \"300M\"", "mem = \"lots\"");
    CHECK(error_of(m.path).find("expected a Slurm memory size") != std::string::npos);
    ContractVariant t("time_limit = \"3\"", "time_limit = \"3h\"");
    CHECK(error_of(t.path).find("expected a Slurm time") != std::string::npos);
}

TEST_CASE("a missing protected file and a missing section are reported") {
    ContractVariant p("protected = [\"main.c\", \"loss.c\"]", "protected = [\"main.c\", \"nope.c\"]");
    CHECK(error_of(p.path).find("protected file 'nope.c' does not exist") != std::string::npos);
    ContractVariant b("[budget]\ntrials = 8", "[budgets]\ntrials = 8");
    CHECK(error_of(b.path).find("unknown key 'budgets'") != std::string::npos);
}

TEST_CASE("Slurm memory and time formats") {
    CHECK(contract::parse_memory("2000M") == 2000LL << 20);
    CHECK(contract::parse_memory("4G") == 4LL << 30);
    CHECK(contract::parse_memory("100") == 100LL << 20);
    CHECK_THROWS_AS(contract::parse_memory("4X"), Error);
    CHECK(contract::parse_time("5") == 300);
    CHECK(contract::parse_time("05:30") == 330);
    CHECK(contract::parse_time("01:00:00") == 3600);
    CHECK(contract::parse_time("1-02") == 93600);
    CHECK_THROWS_AS(contract::parse_time("a:b"), Error);
}

TEST_CASE("placeholders are substituted in every argument") {
    auto v = contract::substitute({"{build}/toy", "-I{source}", "x"}, {{"build", "/b"}, {"source", "/s"}});
    CHECK(v == std::vector<std::string>{"/b/toy", "-I/s", "x"});
}

TEST_CASE("[metrics]: a framework's log format, or a regex with its units; mistakes name the line") {
    CHECK(contract::load(fixtures / "toyload.contract.toml").metrics.kind ==
          measure::LogFormatKind::Infrarsi);
    {
        ContractVariant v("[budget]", "[metrics]\nformat = \"nanogpt\"\nrank = 0\n\n[budget]");
        auto c = contract::load(v.path);
        CHECK(c.metrics.kind == measure::LogFormatKind::NanoGpt);
        CHECK(c.metrics.rank == 0);
    }
    {
        ContractVariant v("[budget]", "[metrics]\nformat = \"regex\"\npattern = 'it (?<step>\\d+) loss "
                                      "(?<loss>[0-9.]+) (?<step_time>[0-9.]+)ms'\nstep_time_unit = \"ms\"\n\n"
                                      "[budget]");
        auto c = contract::load(v.path);
        CHECK(c.metrics.step_time_unit_s == 1e-3);
    }
    {
        ContractVariant v("[budget]", "[metrics]\nformat = \"wandb\"\n\n[budget]");
        auto msg = error_of(v.path);
        CHECK(msg.find("unknown log format 'wandb'") != std::string::npos);
        CHECK(msg.find(":" + std::to_string(line_of(v.path, "format = \"wandb\""))) != std::string::npos);
    }
    {
        ContractVariant v("[budget]",
                          "[metrics]\nformat = \"regex\"\npattern = 'it (?<step>\\d+'\n\n[budget]");
        CHECK(error_of(v.path).find("does not compile") != std::string::npos);
    }
    {
        ContractVariant v("[budget]", "[metrics]\nformat = \"nanogpt\"\npattern = 'x'\n\n[budget]");
        CHECK(error_of(v.path).find("only read with format = \"regex\"") != std::string::npos);
    }
}

TEST_CASE("numbers out of range are errors naming file:line, never wrapped or cast down") {
    auto refused = [](const std::string& from, const std::string& to, const std::string& needle) {
        ContractVariant v(from, to);
        const std::string msg = error_of(v.path);
        CHECK_MESSAGE(msg.find(needle) != std::string::npos, to, " -> ", msg);
        const int line = line_of(v.path, to.substr(0, to.find('\n')));
        CHECK_MESSAGE(msg.find(":" + std::to_string(line)) != std::string::npos, to, " -> ", msg);
    };
    refused("trials = 8", "trials = 4294967296", "an integer in [1, 2147483647]");
    refused("nodes = 1", "nodes = 4294967297", "an integer in [1, 2147483647]");
    refused("mem = \"300M\"", "mem = \"99999999999999999999M\"", "too large");
    refused("mem = \"300M\"", "mem = \"10000000000T\"", "too large");
    refused("time_limit = \"3\"", "time_limit = \"99999999999999999999\"", "out of range");
    CHECK(contract::parse_memory("8388607T") == 8388607LL << 40);
    CHECK_THROWS_AS(contract::parse_memory("8388608T"), Error);
}

TEST_CASE("Slurm time strings read as Slurm reads them: a day count makes the next field hours") {
    CHECK(contract::parse_time("0-12") == 12 * 3600);
    CHECK(contract::parse_time("0-12:30") == 12 * 3600 + 30 * 60);
    CHECK(contract::parse_time("2-00:00:10") == 2 * 86400 + 10);
    CHECK(contract::parse_time("90") == 90 * 60);
    CHECK(contract::parse_time("90:30") == 90 * 60 + 30);
    CHECK_THROWS_AS(contract::parse_time("1:2:3:4"), Error);
    CHECK_THROWS_AS(contract::parse_time("1-2:3:4:5"), Error);
    CHECK_THROWS_AS(contract::parse_time("-5"), Error);
    CHECK_THROWS_AS(contract::parse_time("0"), Error);
}

TEST_CASE("an integer knob near LLONG_MAX and a 64M-value knob load at once, their domains never listed") {
    {
        ContractVariant v("[knobs.recompute]", "[knobs.huge]\nkind = \"integer\"\nmin = 9223372036854775800\n"
                                               "max = 9223372036854775807\nbaseline = 9223372036854775807\n\n"
                                               "[knobs.recompute]");
        auto c = contract::load(v.path);
        const auto* k = c.space.knob("huge");
        REQUIRE(k);
        CHECK(k->size() == 8);
        CHECK(k->allows(9223372036854775807LL));
        CHECK(std::get<long long>(k->at(7)) == 9223372036854775807LL);
    }
    {
        ContractVariant v("[knobs.recompute]",
                          "[knobs.buff]\nkind = \"integer\"\nmin = 1048576\n"
                          "max = 67108864\nenv = \"NCCL_BUFFSIZE\"\nbaseline = 4194304\n\n"
                          "[knobs.recompute]");
        auto c = contract::load(v.path);
        const auto* k = c.space.knob("buff");
        REQUIRE(k);
        CHECK(k->size() == 67108864 - 1048576 + 1);
        CHECK_THROWS_AS(k->domain(), Error); // never materialised
        CHECK(c.space.cardinality() > 1000000);
        CHECK(c.space.enumerate(10, 1).size() <= 10);
        CHECK_FALSE(c.space.neighbours(c.space.baseline()).empty());
    }
    space::Knob all{.name = "all", .kind = space::KnobKind::Integer, .min = LLONG_MIN, .max = LLONG_MAX};
    CHECK(all.size() == UINT64_MAX);
    CHECK(all.allows(0LL));
    space::Knob p2{.name = "p", .kind = space::KnobKind::Pow2, .min = 3, .max = LLONG_MAX};
    CHECK(p2.size() == 61); // 4 .. 2^62
    CHECK(std::get<long long>(p2.at(0)) == 4);
    CHECK(p2.index_of(1LL << 62) == 60);
    CHECK_FALSE(p2.allows(6LL));
}
