// `infrarsi trial classify` (trial/classify_job.hpp): a job's record file, output files and result.json go
// through the one classify(), the same the campaign's ingest uses.
#include "trial/classify_job.hpp"
#include "util/error.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sys/stat.h>

using namespace infrarsi;
using nlohmann::json;
using test::TempDir;

namespace {

std::string steps_text(int n) {
    std::string s;
    for (int i = 1; i <= n; ++i)
        s += "INFRARSI_STEP {\"step\":" + std::to_string(i) + ",\"loss\":2.5,\"step_time_s\":0.1}\n";
    return s;
}

json classify(const TempDir& d, const json& record, const std::string& output, int steps = 4) {
    std::ofstream(d.path / "record.json") << record.dump();
    std::ofstream(d.path / "out.txt") << output;
    trial::ClassifyRequest r;
    r.record_file = (d.path / "record.json").string();
    r.files.outputs = {(d.path / "out.txt").string()};
    r.mem = "300M";
    r.time_limit = "5";
    r.steps = steps;
    return trial::classify_request(r);
}

} // namespace

TEST_CASE(
    "trial classify: Slurm's OUT_OF_MEMORY, or a failed job whose output has slurmstepd's oom-kill "
    "report, is oom, a workload printing the words is a crash, a completed job is judged by its steps") {
    TempDir d("infrarsi-classify");
    auto j = classify(d, {{"state", "OUT_OF_MEMORY"}, {"exit_code", 0}, {"signal", 125}}, steps_text(1));
    CHECK(j["outcome"] == "oom");
    CHECK(j["detail"].get<std::string>().find("limit 300M") != std::string::npos);
    CHECK(j["steps"] == 1);
    CHECK(j["record"]["state"] == "OUT_OF_MEMORY");

    j = classify(d, {{"state", "FAILED"}, {"exit_code", 1}},
                 steps_text(2) +
                     "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=7.0. Some of your "
                     "processes may have been killed by the cgroup out-of-memory handler.\n");
    CHECK(j["outcome"] == "oom");

    // The scripts' old rule ("oom-kill" anywhere) called these out of memory.
    j = classify(d, {{"state", "FAILED"}, {"exit_code", 1}}, "my model: error: Detected 1 oom-kill event\n");
    CHECK(j["outcome"] == "crash");
    j = classify(d, {{"state", "COMPLETED"}}, steps_text(4) + "note: an oom-kill earlier today\n");
    CHECK(j["outcome"] == "ok");
    CHECK(j["steps"] == 4);

    j = classify(d, {{"state", "COMPLETED"}}, steps_text(3));
    CHECK(j["outcome"] == "contract_violation");
    CHECK(j["violation"] == "missing_steps");
    j = classify(d, {{"state", "TIMEOUT"}}, steps_text(2));
    CHECK(j["outcome"] == "timeout");
    j = classify(d, {{"state", "NODE_FAIL"}}, "");
    CHECK(j["outcome"] == "node_failure");
}

TEST_CASE(
    "trial classify: a trial wrapper's result.json is expected when named, and hostile inputs are clear "
    "errors") {
    TempDir d("infrarsi-classify");
    std::ofstream(d.path / "record.json") << R"({"state": "COMPLETED"})";
    std::ofstream(d.path / "out.txt") << steps_text(4);
    trial::ClassifyRequest r;
    r.record_file = (d.path / "record.json").string();
    r.files.outputs = {(d.path / "out.txt").string()};
    r.steps = 4;
    r.files.result = (d.path / "no-such-result.json").string();
    auto j = trial::classify_request(r);
    CHECK(j["outcome"] == "contract_violation");
    CHECK(j["violation"] == "no_result");

    r.files.result.clear();
    CHECK(trial::classify_request(r)["outcome"] == "ok");

    // Neither or both of a job id and a record file.
    auto both = r;
    both.job = "12";
    CHECK_THROWS_WITH_AS(trial::classify_request(both), doctest::Contains("either --job"), Error);
    auto neither = r;
    neither.record_file.clear();
    CHECK_THROWS_AS(trial::classify_request(neither), Error);

    std::ofstream(d.path / "record.json") << "{\"state\": ";
    CHECK_THROWS_WITH_AS(trial::classify_request(r), doctest::Contains("record.json: not valid JSON"), Error);
    std::ofstream(d.path / "record.json") << "[1]";
    CHECK_THROWS_WITH_AS(trial::classify_request(r), doctest::Contains("a job record is a JSON object"),
                         Error);
    std::ofstream(d.path / "record.json") << R"({"state": "EXPLODED"})";
    CHECK_THROWS_WITH_AS(trial::classify_request(r), doctest::Contains("unknown job state 'EXPLODED'"),
                         Error);
    std::ofstream(d.path / "record.json") << R"({"state": "FAILED", "exit_code": "one"})";
    CHECK_THROWS_WITH_AS(trial::classify_request(r), doctest::Contains("'exit_code' must be a number"),
                         Error);

    // An output that is a FIFO does not hang the classifier.
    std::ofstream(d.path / "record.json") << R"({"state": "COMPLETED"})";
    REQUIRE(::mkfifo((d.path / "fifo").c_str(), 0600) == 0);
    r.files.outputs = {(d.path / "fifo").string()};
    CHECK_THROWS_AS(trial::classify_request(r), Error);
}

TEST_CASE("trial classify --format: a framework's log is read in its own format, as the contract's [metrics] "
          "reads it, and the project's format reads none of its steps") {
    TempDir d("infrarsi-classify");
    std::ofstream(d.path / "record.json") << json{{"state", "COMPLETED"}, {"exit_code", 0}}.dump();
    const std::filesystem::path logs = std::filesystem::path(INFRARSI_FIXTURES) / "logs" / "frameworks";
    const std::vector<std::pair<std::string, measure::LogFormatKind>> logs_and_formats{
        {"torchtitan.log", measure::LogFormatKind::Torchtitan},
        {"megatron-lm.log", measure::LogFormatKind::Megatron},
        {"gpt-neox.log", measure::LogFormatKind::Megatron},
        {"llmc-c.log", measure::LogFormatKind::LlmC},
        {"llmc-cu.log", measure::LogFormatKind::LlmC},
        {"litgpt.log", measure::LogFormatKind::Litgpt},
        {"olmo.log", measure::LogFormatKind::Olmo},
        {"hf-trainer.log", measure::LogFormatKind::HfTrainer}};
    for (const auto& [file, kind] : logs_and_formats) {
        INFO(file);
        trial::ClassifyRequest r;
        r.record_file = (d.path / "record.json").string();
        r.files.outputs = {(logs / file).string()};
        r.steps = 3; // every framework fixture prints 3 steps
        auto j = trial::classify_request(r);
        CHECK(j["outcome"] == "contract_violation"); // read as the project's lines: no step
        CHECK(j["violation"] == "missing_steps");
        CHECK(j["steps"] == 0);
        r.files.format.kind = kind;
        j = trial::classify_request(r);
        CHECK(j["outcome"] == "ok");
        CHECK(j["steps"] == 3);
        // torchtitan prints no step time: without the wrapper's line times its steps are counted, untimed.
        const bool prints_time = kind == measure::LogFormatKind::Megatron ||
                                 kind == measure::LogFormatKind::LlmC ||
                                 kind == measure::LogFormatKind::Olmo; // OLMo: 1 / batches_per_second
        CHECK((j["detail"].get<std::string>().find("untimed") == std::string::npos) == prints_time);
    }
    // With the line times the trial wrapper writes beside its log, as a campaign reads it.
    std::filesystem::copy_file(logs / "torchtitan.log", d.path / "log.txt");
    std::ofstream times(d.path / "log.txt.times");
    for (int i = 1; i <= 12; ++i)
        times << 0.5 * i << "\n";
    times.close();
    trial::ClassifyRequest r;
    r.record_file = (d.path / "record.json").string();
    r.files.outputs = {(d.path / "log.txt").string()};
    r.files.format.kind = measure::LogFormatKind::Torchtitan;
    r.steps = 3;
    auto j = trial::classify_request(r);
    CHECK(j["outcome"] == "ok");
    CHECK(j["detail"].get<std::string>().find("s/step") != std::string::npos);
    // A user's pattern: checked as the contract's is (a regex without a loss group is an error).
    std::ofstream(d.path / "out.txt") << "it 1 | loss 2.5\nit 2 | loss 2.4\n";
    r = {};
    r.record_file = (d.path / "record.json").string();
    r.files.outputs = {(d.path / "out.txt").string()};
    r.steps = 2;
    r.files.format.kind = measure::LogFormatKind::Regex;
    r.files.format.pattern = R"(^it (?<step>\d+) \| loss (?<loss>[0-9.]+))";
    CHECK(trial::classify_request(r)["steps"] == 2);
    r.files.format.pattern = R"(^it (?<step>\d+))";
    CHECK_THROWS_AS(trial::classify_request(r), Error);
}
