#include "campaign/campaign.hpp"
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

// A second edit of a variant.
void edit(const fs::path& p, const std::string& from, const std::string& to) {
    std::string text = read(p);
    const auto pos = text.find(from);
    REQUIRE_MESSAGE(pos != std::string::npos, from);
    text.replace(pos, from.size(), to);
    std::ofstream(p) << text;
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

TEST_CASE("[metrics]: a framework's log format, or a regex with its units, mistakes name the line") {
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

TEST_CASE("a knob reaches the job as an environment variable, an argument or an sbatch option, and "
          "[workload] args are fixed arguments") {
    ContractVariant v("env = \"TOY_RECOMPUTE\"", "arg = \"--recompute={}\"");
    edit(v.path, "[knobs.recompute]",
         "[knobs.checkpoint]\nkind = \"bool\"\narg = \"--activation-checkpointing\"\nbaseline = false\n\n"
         "[knobs.cpus]\nkind = \"integer\"\nmin = 1\nmax = 2\nsbatch_option = \"--cpus-per-task\"\n"
         "baseline = 1\n\n[knobs.recompute]");
    edit(v.path, "command = [\"{build}/toy\"]",
         "command = [\"{build}/toy\"]\nargs = [\"--data\", \"{source}/d\"]");
    auto c = contract::load(v.path);
    CHECK(c.workload.args == std::vector<std::string>{"--data", "{source}/d"});
    const auto* r = c.space.knob("recompute");
    CHECK(r->delivery == space::Delivery::Arg);
    CHECK(c.space.knob("cpus")->delivery == space::Delivery::SbatchOption);
    auto cand = c.space.baseline();
    cand.knobs["recompute"] = std::string("full");
    cand.knobs["checkpoint"] = true;
    cand.knobs["cpus"] = 2LL;
    // Arguments in the order the knobs are written (not by name); a bool without {} is a flag; only env
    // knobs are environment.
    std::vector<std::string> names;
    for (const auto& k : c.space.knobs)
        names.push_back(k.name);
    CHECK(names == std::vector<std::string>{"micro_batch", "grad_accum", "checkpoint", "cpus", "recompute"});
    CHECK(c.space.arguments(cand) ==
          std::vector<std::string>{"--activation-checkpointing", "--recompute=full"});
    CHECK(c.space.sbatch_options(cand) == std::vector<std::string>{"--cpus-per-task=2"});
    CHECK(c.space.environment(cand).count("TOY_RECOMPUTE") == 0);
    CHECK(c.space.environment(cand).at("TOY_MICRO_BATCH") == "1");
    cand.knobs["checkpoint"] = false;
    CHECK(c.space.arguments(cand) == std::vector<std::string>{"--recompute=full"});
}

TEST_CASE("a knob has exactly one delivery, a mistake names its line") {
    const std::string knob = "env = \"TOY_MICRO_BATCH\"";
    {
        ContractVariant v(knob, knob + "\narg = \"--mb={}\"");
        auto msg = error_of(v.path);
        CHECK(msg.find("exactly one of 'env', 'arg' and 'sbatch_option'") != std::string::npos);
        CHECK(msg.find(":" + std::to_string(line_of(v.path, "[knobs.micro_batch]"))) != std::string::npos);
    }
    {
        ContractVariant v(knob, "");
        CHECK(error_of(v.path).find("exactly one of 'env', 'arg' and 'sbatch_option'") != std::string::npos);
    }
    {
        ContractVariant v(knob, "arg = \"--micro-batch\"");
        auto msg = error_of(v.path);
        CHECK(msg.find("has no {}") != std::string::npos);
        CHECK(msg.find(":" + std::to_string(line_of(v.path, "arg = \"--micro-batch\""))) !=
              std::string::npos);
    }
    for (const char* owned : {"--mem", "--time", "--array", "--nodes"}) {
        CAPTURE(owned);
        ContractVariant v(knob, std::string("sbatch_option = \"") + owned + "\"");
        auto msg = error_of(v.path);
        CHECK(msg.find("cannot be a knob: the campaign sets it") != std::string::npos);
        CHECK(msg.find(":" + std::to_string(line_of(v.path, "sbatch_option ="))) != std::string::npos);
    }
    for (const char* bad : {"-c", "--cpus-per-task=2", "cpus-per-task", "--Cpus"}) {
        CAPTURE(bad);
        ContractVariant v(knob, std::string("sbatch_option = \"") + bad + "\"");
        CHECK(error_of(v.path).find("is not a long sbatch option") != std::string::npos);
    }
    {
        ContractVariant v("ntasks_per_node = 1",
                          "ntasks_per_node = 1\nsbatch_args = [\"--cpus-per-task=1\"]");
        edit(v.path, knob, "sbatch_option = \"--cpus-per-task\"");
        CHECK(error_of(v.path).find("both the knob 'micro_batch' and in resources.sbatch_args") !=
              std::string::npos);
    }
}

TEST_CASE("constraints hold across the three deliveries") {
    ContractVariant v("env = \"TOY_GRAD_ACCUM\"", "sbatch_option = \"--ntasks-per-node\"");
    edit(v.path, "env = \"TOY_MICRO_BATCH\"", "arg = \"--micro-batch={}\"");
    auto c = contract::load(v.path);
    // micro_batch (an argument) x grad_accum (an sbatch option) == global_batch, as with environment knobs.
    auto cand = c.space.baseline();
    cand.knobs["micro_batch"] = 4LL;
    cand.knobs["grad_accum"] = 4LL;
    CHECK(c.space.feasible(cand));
    CHECK(c.space.arguments(cand) == std::vector<std::string>{"--micro-batch=4"});
    CHECK(c.space.sbatch_options(cand) == std::vector<std::string>{"--ntasks-per-node=4"});
    cand.knobs["grad_accum"] = 8LL;
    CHECK_FALSE(c.space.feasible(cand));
    for (const auto& e : c.space.enumerate())
        CHECK(std::get<long long>(e.knobs.at("micro_batch")) *
                  std::get<long long>(e.knobs.at("grad_accum")) ==
              16);
}

TEST_CASE(
    "loss_mode final_eval needs a seed the job is told, and its loss_tolerance defaults to a small floor") {
    {
        ContractVariant v("loss_mode = \"last_k_mean\"",
                          "loss_mode = \"final_eval\"\nseed_arg = \"--seed={}\"");
        edit(v.path, "loss_tolerance = 0.02\n", "");
        auto c = contract::load(v.path);
        CHECK(c.invariants.loss_mode == contract::LossMode::FinalEval);
        CHECK(c.invariants.seed_arg == "--seed={}");
        CHECK(c.invariants.loss_tolerance == 0.001);
    }
    {
        ContractVariant v("loss_mode = \"last_k_mean\"", "loss_mode = \"final_eval\"");
        edit(v.path, "seed_env = \"TOY_SEED\"\n", "");
        auto msg = error_of(v.path);
        CHECK(msg.find("different seeds") != std::string::npos);
        CHECK(msg.find(":" + std::to_string(line_of(v.path, "loss_mode = \"final_eval\""))) !=
              std::string::npos);
    }
    {
        ContractVariant v("seed_env = \"TOY_SEED\"", "seed_arg = \"--seed\"");
        CHECK(error_of(v.path).find("seed_arg '--seed' has no {}") != std::string::npos);
    }
}

TEST_CASE("[metrics] exclude_steps and exclude_pattern") {
    {
        ContractVariant v("[budget]",
                          "[metrics]\nexclude_steps = [1, 8]\nexclude_pattern = 'checkpoint'\n\n[budget]");
        auto c = contract::load(v.path);
        CHECK(c.metrics.exclude_steps == std::vector<int>{1, 8});
        CHECK(c.metrics.exclude_pattern == "checkpoint");
    }
    {
        ContractVariant v("[budget]", "[metrics]\nexclude_steps = [\"last\"]\n\n[budget]");
        auto msg = error_of(v.path);
        CHECK(msg.find("not a step number") != std::string::npos);
        CHECK(msg.find(":" + std::to_string(line_of(v.path, "exclude_steps"))) != std::string::npos);
    }
    {
        ContractVariant v("[budget]", "[metrics]\nexclude_pattern = '(eval'\n\n[budget]");
        CHECK(error_of(v.path).find("does not compile") != std::string::npos);
    }
}

TEST_CASE("[memory.transformer]: a memory prior from the model's dimensions, moved by the knobs' roles") {
    const std::string section =
        "verify_top = 1\n\n[memory.transformer]\nlayers = 4\nhidden = 128\nheads = 4\n"
        "seq_len = 128\nvocab = 65\nactivation_bytes = 4\nparameter_bytes = 4\n"
        "optimizer_bytes = 8\nruntime = \"200M\"\n";
    ContractVariant v("verify_top = 1", section);
    const auto c = contract::load(v.path);
    REQUIRE(c.memory_transformer);
    CHECK(c.memory_transformer->layers == 4);
    CHECK(c.memory_transformer->runtime_bytes == 200LL << 20);
    CHECK(campaign::memory_prior_name(c).find("transformer") != std::string::npos);
    auto with = [&](long long micro_batch, const std::string& recompute) {
        auto cand = c.space.baseline();
        cand.knobs["micro_batch"] = micro_batch;
        cand.knobs["recompute"] = recompute;
        return campaign::transformer_memory_estimate(c, cand).value_or(0);
    };
    CHECK(with(1, "none") > double(200LL << 20));
    CHECK(with(8, "none") > with(1, "none"));
    CHECK(with(8, "full") < with(8, "selective"));
    CHECK(with(8, "selective") < with(8, "none"));

    ContractVariant both("verify_top = 1", section + "\n[memory]\nestimate_command = [\"x\"]\n");
    CHECK(error_of(both.path).find("one memory prior") != std::string::npos);
    ContractVariant twice("verify_top = 1",
                          "verify_top = 1\n\n[memory]\nestimate_command = [\"x\"]\n\n[memory.transformer]\n"
                          "layers = 1\nhidden = 8\nheads = 1\nseq_len = 8\nvocab = 8\n");
    CHECK(error_of(twice.path).find("one memory prior") != std::string::npos);
    ContractVariant zero("verify_top = 1", section + "zero_stage = 5\n");
    CHECK(error_of(zero.path).find("0 to 3") != std::string::npos);
    ContractVariant ranks("verify_top = 1", section + "ranks_knob = \"nope\"\n");
    CHECK(error_of(ranks.path).find("an integer or pow2 knob") != std::string::npos);
    std::string no_layers = section;
    no_layers.erase(no_layers.find("layers = 4\n"), 11);
    ContractVariant missing("verify_top = 1", no_layers);
    CHECK(error_of(missing.path).find("missing key 'layers'") != std::string::npos);
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
        ContractVariant v("[knobs.recompute]",
                          "[knobs.huge]\nkind = \"integer\"\nmin = 9223372036854775800\n"
                          "max = 9223372036854775807\nenv = \"HUGE\"\nbaseline = 9223372036854775807\n\n"
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
    space::Knob all;
    all.name = "all";
    all.kind = space::KnobKind::Integer;
    all.min = LLONG_MIN;
    all.max = LLONG_MAX;
    CHECK(all.size() == UINT64_MAX);
    CHECK(all.allows(0LL));
    space::Knob p2;
    p2.name = "p";
    p2.kind = space::KnobKind::Pow2;
    p2.min = 3;
    p2.max = LLONG_MAX;
    CHECK(p2.size() == 61); // 4 .. 2^62
    CHECK(std::get<long long>(p2.at(0)) == 4);
    CHECK(p2.index_of(1LL << 62) == 60);
    CHECK_FALSE(p2.allows(6LL));
}

TEST_CASE("a contract with a key of 300k dotted parts or nested arrays is refused before TOML parsing") {
    // toml++ builds and frees a table per dotted part recursively: this crashed `infrarsi init`.
    std::string key = "x";
    for (int i = 0; i < 300'000; ++i)
        key += ".x";
    ContractVariant dotted("name = ", key + " = 1\nname = ");
    CHECK(error_of(dotted.path).find(".contract.toml:") != std::string::npos);
    CHECK(error_of(dotted.path).find("a key of more than 32 dotted parts") != std::string::npos);
    ContractVariant nested("name = ",
                           "deep = " + std::string(100'000, '[') + std::string(100'000, ']') + "\nname = ");
    CHECK(error_of(nested.path).find("nested more than 32 levels") != std::string::npos);
    const std::string text = read(fixtures / "toyload.contract.toml");
    CHECK_THROWS_WITH_AS(contract::load_text(key + " = 1\n" + text, fixtures / "x.contract.toml"),
                         doctest::Contains("x.contract.toml:1: a key of more than 32 dotted parts"), Error);
}
