// Steps from a job's own log: each built-in format on lines captured in that framework's format
// (tests/fixtures/logs/<format>.log, with the lines around them that must not match), a user's regex, step
// time from the wrapper's line times, rank filtering, and hostile input.
#include "measure/log_format.hpp"

#include "measure/line_pattern.hpp"
#include "measure/statistics.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

using namespace infrarsi;
using namespace infrarsi::measure;

namespace {
std::string fixture(const std::string& name) {
    std::ifstream in(std::string(INFRARSI_FIXTURES) + "/logs/" + name);
    REQUIRE(in);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}
LogFormat format(LogFormatKind k) {
    LogFormat f;
    f.kind = k;
    return f;
}
std::vector<double> times_for(const std::string& text, double first, double step) {
    std::vector<double> t;
    double now = first;
    for (char c : text)
        if (c == '\n') t.push_back(now += step);
    return t;
}
} // namespace

TEST_CASE("nanoGPT: iter lines with their time and MFU, eval and checkpoint lines are not steps") {
    auto log = parse_log(fixture("nanogpt.log"), format(LogFormatKind::NanoGpt));
    REQUIRE(log.steps.size() == 6);
    CHECK(log.steps[0].step == 0);
    CHECK_FALSE(log.steps[0].mfu); // nanoGPT prints -100% before it has measured
    CHECK(log.steps[1].step == 10);
    CHECK(log.steps[1].loss == doctest::Approx(3.2442));
    CHECK(log.steps[1].step_time_s == doctest::Approx(0.05215));
    CHECK(*log.steps[1].mfu == doctest::Approx(0.0715));
    CHECK(log.steps[5].step_time_s == doctest::Approx(2.05132)); // the checkpoint's step, as printed
}

TEST_CASE(
    "Megatron-LM: iteration lines with elapsed time and lm loss, memory reports and validation are not") {
    auto log = parse_log(fixture("megatron.log"), format(LogFormatKind::Megatron));
    REQUIRE(log.steps.size() == 3);
    CHECK(log.steps[0].step == 1);
    CHECK(log.steps[0].step_time_s == doctest::Approx(5.1234));
    CHECK(log.steps[0].loss == doctest::Approx(10.96875));
    CHECK(log.steps[2].step == 3);
    CHECK(log.steps[2].step_time_s == doctest::Approx(0.8099));
}

TEST_CASE("Hugging Face Trainer: loss dicts numbered in order, timed by the wrapper's line times") {
    const auto text = fixture("hf-trainer.log");
    CHECK(parse_log(text, format(LogFormatKind::HfTrainer)).steps.empty()); // no time anywhere: not measured
    const auto times = times_for(text, 0.0, 2.0);
    auto log = parse_log(text, format(LogFormatKind::HfTrainer), &times);
    REQUIRE(log.steps.size() == 3); // not the eval dict, not the final summary
    CHECK(log.steps[0].step == 1);
    CHECK(log.steps[0].loss == doctest::Approx(3.2145));      // after the progress bar's carriage return
    CHECK(log.steps[0].step_time_s == doctest::Approx(14.0)); // line 7, since the job started
    CHECK(log.steps[1].step_time_s == doctest::Approx(2.0));
    CHECK(log.steps[2].step_time_s == doctest::Approx(4.0)); // the eval line in between
}

TEST_CASE("torchtitan: colours stripped, one line per step across ranks, memory and throughput kept") {
    const auto text = fixture("torchtitan.log");
    const auto times = times_for(text, 0.0, 1.0);
    auto log = parse_log(text, format(LogFormatKind::Torchtitan), &times);
    REQUIRE(log.steps.size() == 2);
    CHECK(log.steps[0].step == 1);
    CHECK(log.steps[0].loss == doctest::Approx(12.224));
    CHECK(*log.steps[0].peak_device_bytes == doctest::Approx(42.61 * (1ull << 30)));
    CHECK(log.steps[0].tokens_per_s == doctest::Approx(1165));
    CHECK(*log.steps[0].mfu == doctest::Approx(0.2162));
    CHECK(log.steps[1].step == 10);
    CHECK(log.steps[1].step_time_s == doctest::Approx(2.0 / 9)); // two lines later, nine steps on
    auto rank1 = format(LogFormatKind::Torchtitan);
    rank1.rank = 1;
    auto only1 = parse_log(text, rank1, &times);
    REQUIRE(only1.steps.size() == 1);
    CHECK(only1.steps[0].tokens_per_s == doctest::Approx(1163));
}

TEST_CASE("key=value prints: units on values and on keys, progress bars and validation are not steps") {
    auto log = parse_log(fixture("key-value.log"), format(LogFormatKind::KeyValue));
    REQUIRE(log.steps.size() == 3);
    CHECK(log.steps[0].step_time_s == doctest::Approx(0.512));
    CHECK(log.steps[1].step_time_s == doctest::Approx(0.498));
    CHECK(*log.steps[1].peak_device_bytes == doctest::Approx(1.5 * (1ull << 30)));
    CHECK(log.steps[2].step_time_s == doctest::Approx(0.505));
    CHECK(*log.steps[2].mfu == doctest::Approx(0.315));
}

TEST_CASE("a user's regex with named groups and a unit, a bad pattern is refused with why") {
    LogFormat f = format(LogFormatKind::Regex);
    f.pattern = R"(^\[train\] it (?<step>\d+) \| loss (?<loss>[0-9.]+) \| (?<step_time>[0-9.]+) ms/it)";
    f.step_time_unit_s = 1e-3;
    check(f, "metrics");
    auto log = parse_log(fixture("regex.log"), f);
    REQUIRE(log.steps.size() == 3);
    CHECK(log.steps[1].step_time_s == doctest::Approx(0.1205));
    CHECK(log_format_from_json(to_json(f), "again") == f);

    f.pattern = "it (?<step>\\d+";
    CHECK_THROWS_WITH_AS(check(f, "metrics"), doctest::Contains("does not compile"), Error);
    f.pattern = "it (?<step>\\d+)";
    CHECK_THROWS_WITH_AS(check(f, "metrics"), doctest::Contains("no (?<loss>"), Error);
    f.pattern = "(?<loss>\\d+) (?<lr>\\d+)";
    CHECK_THROWS_WITH_AS(check(f, "metrics"), doctest::Contains("unknown group (?<lr>"), Error);
    CHECK_THROWS_WITH_AS(log_format_from_json({{"format", "tensorboard"}}, "m"),
                         doctest::Contains("nanogpt, megatron"), Error);
}

TEST_CASE(
    "hostile logs: a pathological pattern on a long line ends with no match, a nan loss is kept as nan") {
    LinePattern evil("^(a+)+$");
    CHECK_FALSE(evil.match(std::string(5000, 'a') + "b")); // the match limit, not a hang
    CHECK(evil.match(std::string(100000, 'a') + "b"));     // cut at kMaxLineBytes: the b is gone
    auto log = parse_log("iter 3: loss nan, time 10.0ms, mfu 1.00%\n", format(LogFormatKind::NanoGpt));
    REQUIRE(log.steps.size() == 1);
    CHECK(std::isnan(log.steps[0].loss));
    auto back = step_from_json(to_json(log.steps[0]));
    CHECK(std::isnan(back.loss));
    CHECK(parse_log(std::string(1 << 20, 'x'), format(LogFormatKind::KeyValue)).steps.empty());
}

TEST_CASE("units") {
    CHECK(*seconds_per_unit("ms") == 1e-3);
    CHECK(*bytes_per_unit("GiB") == double(1ull << 30));
    CHECK(*bytes_per_unit("MB") == 1024.0 * 1024);
    CHECK_FALSE(seconds_per_unit("fortnight"));
}

TEST_CASE(
    "evaluation losses: each format's own evaluation line, once across ranks, the step after it is left "
    "out of timing") {
    {
        auto log = parse_log(fixture("nanogpt.log"), format(LogFormatKind::NanoGpt));
        REQUIRE(log.evals.size() == 2);
        CHECK(log.evals[0] == EvalLoss{0, 4.2823});
        CHECK(log.evals[1] == EvalLoss{50, 2.5071});
        REQUIRE(log.steps.size() == 6);
        CHECK_FALSE(log.steps[0].timed); // after step 0's evaluation
        CHECK(log.steps[1].timed);
        CHECK_FALSE(log.steps[5].timed); // iter 50: the evaluation and the checkpoint, 2051 ms
    }
    {
        auto log = parse_log(fixture("megatron.log"), format(LogFormatKind::Megatron));
        REQUIRE(log.evals.size() == 1);
        CHECK(log.evals[0] == EvalLoss{3, 10.9});
        CHECK(log.steps.size() == 3);
    }
    {
        const auto text = fixture("hf-trainer.log");
        const auto times = times_for(text, 0.0, 2.0);
        auto log = parse_log(text, format(LogFormatKind::HfTrainer), &times);
        REQUIRE(log.evals.size() == 1);
        CHECK(log.evals[0] == EvalLoss{2, 2.7}); // after the second loss dict
        REQUIRE(log.steps.size() == 3);
        CHECK(log.steps[1].timed);
        CHECK_FALSE(log.steps[2].timed);
    }
    {
        auto log = parse_log(fixture("key-value.log"), format(LogFormatKind::KeyValue));
        REQUIRE(log.evals.size() == 1);
        CHECK(log.evals[0] == EvalLoss{2, 2.1});
        REQUIRE(log.steps.size() == 3);
        CHECK_FALSE(log.steps[2].timed);
    }
    {
        LogFormat f = format(LogFormatKind::Regex);
        f.pattern = R"(^\[train\] it (?<step>\d+) \| loss (?<loss>[0-9.]+) \| (?<step_time>[0-9.]+) ms/it|)"
                    R"(^\[eval\] it (?<estep>\d+) \| val loss (?<eval_loss>[0-9.]+))";
        CHECK_THROWS_WITH_AS(check(f, "metrics"), doctest::Contains("unknown group (?<estep>"), Error);
        f.pattern = R"(^\[train\] it (?<step>\d+) \| loss (?<loss>[0-9.]+) \| (?<step_time>[0-9.]+) ms/it|)"
                    R"(^\[eval\] it \d+ \| val loss (?<eval_loss>[0-9.]+))";
        check(f, "metrics");
        auto log = parse_log(fixture("regex.log"), f);
        REQUIRE(log.evals.size() == 1);
        CHECK(log.evals[0] == EvalLoss{2, 2.45});
        REQUIRE(log.steps.size() == 3);
        CHECK_FALSE(log.steps[2].timed);
    }
    // Every rank printing the same evaluation line: one evaluation.
    auto both = parse_log("[rank0]:step 50: train loss 2.4989, val loss 2.5071\n"
                          "[rank1]:step 50: train loss 2.4989, val loss 2.5071\n",
                          format(LogFormatKind::NanoGpt));
    CHECK(both.evals.size() == 1);
}

TEST_CASE("steps excluded from timing by number or by a pattern on the lines since the previous step, the "
          "summary leaves them out and keeps their losses") {
    auto f = format(LogFormatKind::NanoGpt);
    f.exclude_steps = {20};
    f.exclude_pattern = "^saving checkpoint";
    check(f, "metrics");
    CHECK(log_format_from_json(to_json(f), "again") == f);
    const auto log = parse_log(fixture("nanogpt.log"), f);
    REQUIRE(log.steps.size() == 6);
    std::vector<bool> timed;
    for (const auto& s : log.steps)
        timed.push_back(s.timed);
    CHECK(timed == std::vector<bool>{false, true, false, true, true, false});
    const auto summary = summarize(log, 1);
    CHECK(summary.excluded_steps == 2);
    CHECK(summary.steady_samples.size() == 3);
    CHECK(summary.losses.size() == 6);
    CHECK(summary.steady_step_s.estimate == doctest::Approx(0.05215)); // the 2 s checkpoint step is out

    // The project's own lines: by number and by pattern; a job cannot mark its own steps untimed.
    auto own = format(LogFormatKind::Infrarsi);
    own.exclude_steps = {1};
    own.exclude_pattern = "checkpoint saved";
    const auto l2 =
        parse_log("INFRARSI_STEP {\"step\": 1, \"loss\": 2, \"step_time_s\": 1}\n"
                  "INFRARSI_STEP {\"step\": 2, \"loss\": 2, \"step_time_s\": 1, \"timed\": false}\n"
                  "checkpoint saved\n"
                  "INFRARSI_STEP {\"step\": 3, \"loss\": 2, \"step_time_s\": 9, \"eval_loss\": 1.5}\n",
                  own);
    REQUIRE(l2.steps.size() == 3);
    CHECK_FALSE(l2.steps[0].timed);
    CHECK(l2.steps[1].timed);
    CHECK_FALSE(l2.steps[2].timed);
    REQUIRE(l2.evals.size() == 1);
    CHECK(l2.evals[0] == EvalLoss{3, 1.5});

    f.exclude_pattern = "(unclosed";
    CHECK_THROWS_WITH_AS(check(f, "metrics"), doctest::Contains("does not compile"), Error);
    f.exclude_pattern.clear();
    f.exclude_steps = {-1};
    CHECK_THROWS_WITH_AS(check(f, "metrics"), doctest::Contains("negative"), Error);
}

namespace {
// The framework fixtures (tests/fixtures/logs/frameworks/README.md says where each line comes from), read as
// a sample is: one second between lines.
StepLog framework_log(const std::string& file, LogFormatKind k) {
    const auto text = fixture("frameworks/" + file);
    const auto times = times_for(text, 0.0, 1.0);
    return parse_log(text, format(k), &times);
}
} // namespace

TEST_CASE("torchtitan as metrics.py prints it today: grad_norm between loss and memory, colours, ranks") {
    const auto log = framework_log("torchtitan.log", LogFormatKind::Torchtitan);
    REQUIRE(log.steps.size() == 3); // rank 1's step 1 is the same step
    CHECK(log.steps[0].step == 1);
    CHECK(log.steps[0].loss == doctest::Approx(12.2517));
    CHECK(*log.steps[0].peak_device_bytes == doctest::Approx(42.61 * (1ull << 30)));
    CHECK(log.steps[0].tokens_per_s == doctest::Approx(1165));
    CHECK(*log.steps[0].mfu == doctest::Approx(0.2162));
    CHECK(log.steps[1].step == 2);
    CHECK(log.steps[1].loss == doctest::Approx(11.98012));
    CHECK(log.steps[1].step_time_s == doctest::Approx(2.0)); // line times: rank 1's line in between
    CHECK(log.steps[2].step_time_s == doctest::Approx(1.0));
}

TEST_CASE("Megatron-LM, Megatron-DeepSpeed and GPT-NeoX: elapsed time per iteration in ms or in s, lm loss "
          "or lm_loss") {
    {
        const auto log = framework_log("megatron-lm.log", LogFormatKind::Megatron);
        REQUIRE(log.steps.size() == 3);
        CHECK(log.steps[0].step_time_s == doctest::Approx(5.1234));
        CHECK(log.steps[1].loss == doctest::Approx(10.9321));
        REQUIRE(log.evals.size() == 1);
        CHECK(log.evals[0] == EvalLoss{3, 10.9});
    }
    {
        const auto log = framework_log("megatron-deepspeed.log", LogFormatKind::Megatron);
        REQUIRE(log.steps.size() == 3);
        CHECK(log.steps[0].step == 1);
        CHECK(log.steps[0].step_time_s == doctest::Approx(2.3456));
        CHECK(log.steps[2].loss == doctest::Approx(10.42));
    }
    {
        const auto log = framework_log("megatron-deepspeed-s.log", LogFormatKind::Megatron);
        REQUIRE(log.steps.size() == 3);
        CHECK(log.steps[0].step == 12695);
        CHECK(log.steps[0].step_time_s == doctest::Approx(105.22)); // (s): not divided by 1000
        CHECK(log.steps[0].loss == doctest::Approx(2.463556));
        CHECK(log.steps[1].step == 10);
        CHECK(log.steps[1].step_time_s == doctest::Approx(7.231));
        CHECK(log.steps[2].step_time_s == doctest::Approx(769.99));
    }
    {
        const auto log = framework_log("gpt-neox.log", LogFormatKind::Megatron);
        REQUIRE(log.steps.size() == 3);
        CHECK(log.steps[0].step == 10);
        CHECK(log.steps[0].step_time_s == doctest::Approx(0.6143));
        CHECK(log.steps[0].loss == doctest::Approx(10.6431));
        CHECK(log.steps[2].loss == doctest::Approx(8.4412));
    }
}

TEST_CASE("llm.c: train_gpt2.c's and train_gpt2.cu's step lines, ms to s, MFU and tok/s, val loss lines") {
    {
        const auto log = framework_log("llmc-c.log", LogFormatKind::LlmC);
        REQUIRE(log.steps.size() == 3);
        CHECK(log.steps[0].step == 0);
        CHECK(log.steps[0].loss == doctest::Approx(4.677779));
        CHECK(log.steps[0].step_time_s == doctest::Approx(1.234567891));
        CHECK_FALSE(log.steps[0].timed); // after the val loss line
        CHECK(log.steps[1].timed);
        REQUIRE(log.evals.size() == 1);
        CHECK(log.evals[0].loss == doctest::Approx(5.325522));
    }
    {
        const auto log = framework_log("llmc-cu.log", LogFormatKind::LlmC);
        REQUIRE(log.steps.size() == 3);
        CHECK(log.steps[0].step == 1);
        CHECK(log.steps[0].loss == doctest::Approx(11.010424));
        CHECK(log.steps[1].step_time_s == doctest::Approx(0.16428));
        CHECK(*log.steps[1].mfu == doctest::Approx(0.833));
        CHECK(log.steps[1].tokens_per_s == doctest::Approx(1727461));
        CHECK(log.evals.size() == 1);
    }
}

TEST_CASE("litgpt: the optimizer step's line, its time from the line times, not the last micro-batch's") {
    const auto log = framework_log("litgpt.log", LogFormatKind::Litgpt);
    REQUIRE(log.steps.size() == 3);
    CHECK(log.steps[0].step == 1);
    CHECK(log.steps[0].loss == doctest::Approx(10.467));
    CHECK(log.steps[1].step == 2);
    CHECK(log.steps[1].step_time_s == doctest::Approx(1.0));
}

TEST_CASE("OLMo: a header and indented name=value lines make one step, other ranks' headers add none") {
    const auto log = framework_log("olmo.log", LogFormatKind::Olmo);
    REQUIRE(log.steps.size() == 3);
    CHECK(log.steps[0].step == 1);
    CHECK(log.steps[0].loss == doctest::Approx(11.05));
    CHECK(log.steps[0].tokens_per_s == doctest::Approx(3421)); // "3,421", as format_float prints it
    CHECK(log.steps[1].step == 2);
    CHECK(log.steps[1].loss == doctest::Approx(10.81));
    CHECK(log.steps[1].step_time_s == doctest::Approx(11.0)); // one line a second: loss lines 11 apart
    // Without line times the step time is the inverse of batches_per_second.
    const auto untimed = parse_log(fixture("frameworks/olmo.log"), format(LogFormatKind::Olmo));
    REQUIRE(untimed.steps.size() == 3);
    CHECK(untimed.steps[1].step_time_s == doctest::Approx(1.0 / 0.5001));
    CHECK(untimed.steps[1].tokens_per_s == doctest::Approx(8192));
}

TEST_CASE("Hugging Face Trainer as transformers prints it today: floats as quoted strings") {
    const auto log = framework_log("hf-trainer.log", LogFormatKind::HfTrainer);
    REQUIRE(log.steps.size() == 3);
    CHECK(log.steps[0].loss == doctest::Approx(3.215));
    CHECK(log.steps[2].loss == doctest::Approx(2.654));
    REQUIRE(log.evals.size() == 1);
    CHECK(log.evals[0] == EvalLoss{2, 2.7});
}

TEST_CASE("detection over every framework fixture: each read best by its own format, no other format reads "
          "a step of it, DeepSpeed's own lines read by none") {
    const std::vector<std::pair<std::string, std::optional<LogFormatKind>>> expected{
        {"torchtitan.log", LogFormatKind::Torchtitan},
        {"megatron-lm.log", LogFormatKind::Megatron},
        {"megatron-deepspeed.log", LogFormatKind::Megatron},
        {"megatron-deepspeed-s.log", LogFormatKind::Megatron},
        {"gpt-neox.log", LogFormatKind::Megatron},
        {"llmc-c.log", LogFormatKind::LlmC},
        {"llmc-cu.log", LogFormatKind::LlmC},
        {"litgpt.log", LogFormatKind::Litgpt},
        {"olmo.log", LogFormatKind::Olmo},
        {"hf-trainer.log", LogFormatKind::HfTrainer},
        {"deepspeed.log", std::nullopt}};
    for (const auto& [file, kind] : expected) {
        INFO(file);
        const auto text = fixture("frameworks/" + file);
        CHECK(detect_format(text) == kind);
        for (const auto& [other, name] : log_format_names.entries) {
            if (other == LogFormatKind::Regex) continue;
            INFO(name);
            const auto r = read_sample(text, format(other));
            if (kind && other == *kind) {
                CHECK(r.steps == 3);
                CHECK(r.unread == 0);
            } else {
                CHECK(r.steps == 0);
            }
        }
    }
}

TEST_CASE("a sample read with the wrong format names the step lines it could not read, the first of them") {
    const auto text = fixture("frameworks/megatron-deepspeed-s.log");
    const auto r = read_sample(text, format(LogFormatKind::NanoGpt));
    CHECK(r.steps == 0);
    CHECK(r.unread == 3);
    CHECK(r.first_unread.find("iteration    12695/  115311") != std::string::npos);
    CHECK(read_sample(fixture("nanogpt.log"), format(LogFormatKind::NanoGpt)).unread == 0);
}
