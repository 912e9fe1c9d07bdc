// The Slurm client's parsers, against outputs captured from the local cluster (tests/fixtures/slurm).
#include "slurm/client.hpp"
#include "trial/log_signals.hpp"
#include "util/error.hpp"

#include <chrono>
#include <cstdio>
#include <doctest/doctest.h>
#include <fmt/core.h>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace infrarsi;
using namespace infrarsi::slurm;

namespace {
std::string fixture(const std::string& name) {
    std::ifstream in(std::string(INFRARSI_FIXTURES) + "/slurm/" + name);
    REQUIRE_MESSAGE(in.good(), "missing fixture " << name);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
const JobRecord& find(const std::vector<JobRecord>& rs, const std::string& id) {
    for (const auto& r : rs)
        if (r.job_id == id) return r;
    FAIL("no record " << id);
    throw;
}
} // namespace

TEST_CASE("sbatch --parsable gives the job id, with or without a cluster name") {
    CHECK(parse_sbatch_parsable(fixture("sbatch-parsable.txt")) == "8");
    CHECK(parse_sbatch_parsable("42;cluster\n") == "42");
    CHECK_THROWS_AS(parse_sbatch_parsable("sbatch: error: Batch job submission failed\n"), Error);
}

TEST_CASE("squeue -r expands a job array into one record per task, pending and running") {
    auto rs = parse_squeue(fixture("squeue-array.txt"));
    REQUIRE(rs.size() == 6);
    const auto& pending = find(rs, "8_4");
    CHECK(pending.array_job_id == "8");
    CHECK(pending.array_task_id == 4);
    CHECK(pending.state == JobState::Pending);
    CHECK(pending.reason == "Resources");
    const auto& running = find(rs, "8_0");
    CHECK(running.state == JobState::Running);
    CHECK(running.node_list == "n1");
}

TEST_CASE("the job completion file names array tasks by array job and index, and keeps exit codes") {
    auto rs = parse_jobcomp(fixture("jobcomp.txt"));
    // Array 1 had four tasks; Slurm gave the last one the array's own id 1.
    for (int t = 0; t < 4; ++t) {
        const auto& r = find(rs, "1_" + std::to_string(t));
        CHECK(r.array_job_id == "1");
        CHECK(r.state == JobState::Completed);
        CHECK(classify(r) == JobEnd::Completed);
    }
    CHECK(classify(find(rs, "2")) == JobEnd::OutOfMemory);
    CHECK(find(rs, "2").exit_signal == 125);
    CHECK(classify(find(rs, "3")) == JobEnd::Timeout);
    const auto& failed = find(rs, "4");
    CHECK(classify(failed) == JobEnd::Failed);
    CHECK(failed.exit_code == 3);
    CHECK(find(rs, "1_2").elapsed_s == doctest::Approx(2.0));
}

TEST_CASE("a requeued job's last completion record wins") {
    std::string text = "JobId=7 JobState=NODE_FAIL ExitCode=0:0 NodeList=n2\n"
                       "JobId=7 JobState=COMPLETED ExitCode=0:0 NodeList=n3\n";
    auto rs = parse_jobcomp(text);
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].state == JobState::Completed);
    CHECK(rs[0].node_list == "n3");
    CHECK(rs[0].restarts == 1);
    // A requeue hold (launch failed) leaves a PENDING record, which is not a run.
    auto held =
        parse_jobcomp("JobId=8 JobState=NODE_FAIL ExitCode=0:0\nJobId=8 JobState=FAILED ExitCode=1:0\n"
                      "JobId=8 JobState=PENDING ExitCode=0:0\nJobId=8 JobState=CANCELLED ExitCode=0:0\n");
    REQUIRE(held.size() == 1);
    CHECK(held[0].state == JobState::Cancelled);
    CHECK(held[0].restarts == 2);
}

TEST_CASE("job names with spaces do not break key=value records") {
    auto rs = parse_jobcomp("JobId=5 Name=my training job JobState=FAILED ExitCode=1:0\n");
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].state == JobState::Failed);
    CHECK(rs[0].exit_code == 1);
}

TEST_CASE("sacct -P records give state, exit code and elapsed time") {
    auto rs = parse_sacct(fixture("sacct-c.txt"));
    CHECK(classify(find(rs, "2")) == JobEnd::OutOfMemory);
    CHECK(classify(find(rs, "3")) == JobEnd::Timeout);
    CHECK(find(rs, "4").exit_code == 3);
}

TEST_CASE("sacct step lines carry the peak RSS up to their job") {
    std::string text =
        "12_3|15|COMPLETED|0:0|n1|4||2026-01-01T00:00:00|2026-01-01T00:00:04\n"
        "12_3.batch|15.batch|COMPLETED|0:0|n1|4|1024K|2026-01-01T00:00:00|2026-01-01T00:00:04\n"
        "12_3.0|15.0|COMPLETED|0:0|n1|3|2M|2026-01-01T00:00:00|2026-01-01T00:00:03\n";
    auto rs = parse_sacct(text);
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].array_task_id == 3);
    REQUIRE(rs[0].max_rss_bytes);
    CHECK(*rs[0].max_rss_bytes == 2 * 1024 * 1024);
}

TEST_CASE("scontrol show job -o is read like a completion record") {
    auto rs = parse_jobcomp(fixture("scontrol-show-job.txt"));
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].job_id == "8_0");
    CHECK(rs[0].state == JobState::Running);
    CHECK(parse_scontrol_stdout(fixture("scontrol-show-job.txt")) == "/dev/null");
    CHECK(parse_scontrol_stdout("JobId=9 JobName=a b StdErr=/x StdIn=/dev/null StdOut=/home/u/slurm-9.out "
                                "Power=") == "/home/u/slurm-9.out");
    CHECK(!parse_scontrol_stdout("JobId=9 StdOut= Power="));
    CHECK(!parse_scontrol_stdout(""));
}

TEST_CASE("scontrol show config gives the completion file and accounting type") {
    auto c = parse_scontrol_config(fixture("scontrol-show-config.txt"));
    CHECK(c.at("JobCompType") == "jobcomp/filetxt");
    CHECK(c.at("AccountingStorageType") == "accounting_storage/none");
    CHECK(c.at("DefMemPerCPU") == "500");
}

TEST_CASE("states parse in long and short spellings, with Slurm's suffixes") {
    CHECK(parse_job_state("CANCELLED by 0") == JobState::Cancelled);
    CHECK(parse_job_state("OUT_OF_MEMORY") == JobState::OutOfMemory);
    CHECK(parse_job_state("OOM") == JobState::OutOfMemory);
    CHECK(parse_job_state("TO") == JobState::Timeout);
    CHECK(parse_job_state("NODE_FAIL") == JobState::NodeFail);
    CHECK(parse_job_state("WHATEVER") == JobState::Unknown);
}

TEST_CASE("classification: Slurm's state first, then the OOM exit signature") {
    JobRecord r;
    r.state = JobState::Failed;
    r.exit_code = 0;
    r.exit_signal = 125;
    CHECK(classify(r) == JobEnd::OutOfMemory);
    r.exit_signal = 9;
    CHECK(classify(r) == JobEnd::Failed);
    r.state = JobState::NodeFail;
    CHECK(classify(r) == JobEnd::NodeFailure);
    r.state = JobState::Completed;
    r.exit_code = 2;
    CHECK(classify(r) == JobEnd::Failed);
}

// Captured from the local cluster (tests/fixtures/slurm/oom-*-2node*): minigpt dense-2node with micro-batch
// 16 under --mem=600M on 2 nodes. srun: ranks started by `srun` (singletons); mpirun: sbatch/minigpt.sbatch,
// whose mpirun starts its daemons, and so both ranks, in srun step .0.
TEST_CASE("a multi-node OOM ends the job FAILED, the completion record and the output still show the OOM") {
    // srun: slurmstepd and srun report the oom-kill in the job's output; the record says FAILED 1:0.
    const auto srun_out = fixture("oom-srun-2node.out");
    CHECK(trial::diagnose(srun_out).signal == trial::LogSignal::HostOom); // what trial::classify reads
    auto sc = parse_jobcomp(fixture("oom-srun-2node-scontrol.txt"));
    REQUIRE(sc.size() == 1);
    CHECK(sc[0].state == JobState::Failed);
    CHECK(sc[0].exit_code == 1);
    CHECK_FALSE(sc[0].step_oom_killed);       // scontrol has no step detail
    CHECK(classify(sc[0]) == JobEnd::Failed); // the output tells it apart (trial_outcome_test)

    // mpirun: it kills srun when the rank dies, before slurmstepd reports the oom-kill; the output has only
    // mpirun's "exited on signal 9" (the oom-kill line went to the slurmd log only). The job completion
    // record's DerivedExitCode=0:125 says it.
    const auto mpirun_out = fixture("oom-mpirun-2node.out");
    CHECK_FALSE(trial::is_memory(trial::diagnose(mpirun_out).signal));
    auto sm = parse_jobcomp(fixture("oom-mpirun-2node-scontrol.txt"));
    REQUIRE(sm.size() == 1);
    CHECK(sm[0].state == JobState::Failed);
    CHECK(sm[0].exit_code == 137);
    CHECK(classify(sm[0]) == JobEnd::Failed); // nothing tells: accounting or jobcomp must

    auto jc = parse_jobcomp(fixture("oom-2node-jobcomp.txt"));
    REQUIRE(jc.size() == 2);
    for (const auto& r : jc) {
        CHECK(r.state == JobState::Failed);
        CHECK(r.step_oom_killed);
        CHECK(classify(r) == JobEnd::OutOfMemory);
    }
    CHECK(find(jc, "700012").exit_code == 137);

    // sacct: the step's own state.
    auto sa =
        parse_sacct("41|41|FAILED|137:0|n[2-3]|49||2026-12-02T13:25:49|2026-12-02T13:26:38\n"
                    "41.batch|41.batch|FAILED|137:0|n2|49|180M|2026-12-02T13:25:49|2026-12-02T13:26:38\n"
                    "41.0|41.0|OUT_OF_MEMORY|0:125|n[2-3]|48|590M|2026-12-02T13:25:50|2026-12-02T13:26:38\n");
    REQUIRE(sa.size() == 1);
    CHECK(sa[0].step_oom_killed);
    CHECK(classify(sa[0]) == JobEnd::OutOfMemory);
}

// Slurm writes job names unescaped into the completion file; any user's job shares it with ours.
TEST_CASE("a job name cannot crash the completion-file parser or forge another job's record") {
    const std::string tail = " JobState=COMPLETED Partition=debug TimeLimit=5 StartTime=2026-12-02T09:32:43 "
                             "EndTime=2026-12-02T09:32:45 NodeList=n2 NodeCnt=1 ProcCnt=1 WorkDir=/tmp "
                             "ReservationName= Tres=cpu=1 Account= QOS= WcKey= Cluster=unknown "
                             "SubmitTime=2026-12-02T09:32:42 EligibleTime=2026-12-02T09:32:42";
    // The reproducer: a name that ends in an array id that is not a number (stoi threw, the daemon aborted).
    auto rs = parse_jobcomp("JobId=99 UserId=u(1) GroupId=g(1) Name=x JobId=1_x" + tail +
                            " DerivedExitCode=0:0 ExitCode=0:0 \n");
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].job_id == "99");
    CHECK(rs[0].state == JobState::Completed);
    // A name imitating another job's id, or an array task of ours, for a job that is not an array task.
    rs = parse_jobcomp("JobId=98 UserId=u(1) GroupId=g(1) Name=x JobId=7 ArrayJobId=1 ArrayTaskId=2" + tail +
                       " DerivedExitCode=0:0 ExitCode=0:0 \n");
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].job_id == "98");
    CHECK(rs[0].array_job_id.empty());
    // The real array identity in jobcomp's tail is still read, whatever the name says.
    rs = parse_jobcomp("JobId=97 UserId=u(1) GroupId=g(1) Name=y ArrayJobId=5 ArrayTaskId=6 ExitCode=9:0" +
                       tail + " ArrayJobId=1 ArrayTaskId=3 DerivedExitCode=0:0 ExitCode=0:0 \n");
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].job_id == "1_3");
    CHECK(rs[0].exit_code == 0);
}

TEST_CASE("a Slurm output line with a bad number is skipped and counted, never thrown") {
    ParseStats stats;
    auto rs = parse_jobcomp("JobId=1 JobState=FAILED ExitCode=99999999999999:0\n"
                            "JobId=2 JobState=FAILED ExitCode=1:0\n"
                            "Name=no id first JobId=3 JobState=FAILED\n"
                            "JobId=4294967296 JobState=FAILED\n"
                            "JobId=5 JobState=FAILED RunTime=1-xx:00:00\n",
                            &stats);
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].job_id == "2");
    CHECK(stats.skipped == 4);
    CHECK(stats.first_problem.find("jobcomp line 1") != std::string::npos);

    ParseStats sq;
    auto q = parse_squeue("12_x|12|x|RUNNING|None|n1|0:01\n"
                          "13|13|N/A|RUNNING|None|n1|99999999999-00:00:00\n"
                          "too|few\n"
                          "14|14|N/A|RUNNING|None|n1|1:02\n",
                          &sq);
    REQUIRE(q.size() == 1);
    CHECK(q[0].job_id == "14");
    CHECK(q[0].elapsed_s == doctest::Approx(62));
    CHECK(sq.skipped == 3);

    ParseStats sa;
    auto a = parse_sacct("20|20|FAILED|1:0|n1|1e999||2026-01-01T00:00:00|2026-01-01T00:00:04\n"
                         "21|21|FAILED|1:0|n1|4|99999999999999999999T|2026-01-01T00:00:00|x\n"
                         "22|22|FAILED|x:0|n1|4||2026-01-01T00:00:00|x\n"
                         "23|23|FAILED|1:0|n1|4|12M|2026-01-01T00:00:00|x\n",
                         &sa);
    REQUIRE(a.size() == 1);
    CHECK(a[0].job_id == "23");
    CHECK(sa.skipped == 3);
    CHECK_NOTHROW(parse_sacct("short\n"));
}

TEST_CASE("the completion file is read incrementally: only appended whole lines, from the oldest job asked") {
    const std::string path = "/tmp/infrarsi-jobcomp-" + std::to_string(::getpid()) + ".txt";
    std::remove(path.c_str());
    JobCompletionFile f(path);
    f.read_new(0); // absent: nothing, no error
    CHECK(f.records().empty());
    { std::ofstream(path) << "JobId=5 JobState=COMPLETED ExitCode=0:0\nJobId=7 JobState=FAI"; }
    f.read_new(6); // job 5 is older than the oldest asked about: not kept
    CHECK(f.records().empty());
    const auto consumed = f.offset();
    { std::ofstream(path, std::ios::app) << "LED ExitCode=1:0\nJobId=8 JobState=COMPLETED ExitCode=0:0\n"; }
    f.read_new(6);
    REQUIRE(f.records().size() == 2); // the line cut mid-write is read once whole
    CHECK(f.records()[0].job_id == "7");
    CHECK(f.records()[0].state == JobState::Failed);
    CHECK(f.offset() > consumed);
    f.read_new(6); // nothing new
    CHECK(f.records().size() == 2);
    { std::ofstream(path, std::ios::app) << "JobId=7 JobState=COMPLETED ExitCode=0:0\n"; }
    f.read_new(6); // a requeued job's last line wins, its earlier run counted
    REQUIRE(f.records().size() == 2);
    CHECK(f.records()[0].state == JobState::Completed);
    CHECK(f.records()[0].restarts == 1);
    f.read_new(5); // an older job asked about: read again from the start
    CHECK(f.records().size() == 3);
    // Rotated: a new, shorter file.
    std::remove(path.c_str());
    { std::ofstream(path) << "JobId=9 JobState=COMPLETED ExitCode=0:0\n"; }
    f.read_new(5);
    REQUIRE(f.records().size() == 1);
    CHECK(f.records()[0].job_id == "9");
    std::remove(path.c_str());
}

TEST_CASE("polling backs off while nothing changes and returns to the base interval on a change") {
    using std::chrono::milliseconds;
    auto i = next_poll_interval(milliseconds(1000), milliseconds(1000), false);
    CHECK(i == milliseconds(2000));
    for (int k = 0; k < 20; ++k)
        i = next_poll_interval(i, milliseconds(1000), false);
    CHECK(i == kMaxPollInterval);
    CHECK(next_poll_interval(i, milliseconds(1000), true) == milliseconds(1000));
    // A base interval above the cap stays the interval.
    CHECK(next_poll_interval(milliseconds(60000), milliseconds(60000), false) == milliseconds(60000));
}

TEST_CASE("polling backs off while nothing changes, up to its ceiling, and comes back at once on a change") {
    using ms = std::chrono::milliseconds;
    ms i{500};
    i = next_poll_interval(i, ms{500}, false);
    CHECK(i == ms{1000});
    for (int k = 0; k < 10; ++k)
        i = next_poll_interval(i, ms{500}, false);
    CHECK(i == kMaxPollInterval);
    CHECK(next_poll_interval(i, ms{500}, true) == ms{500});
    CHECK(next_poll_interval(ms{500}, ms{30000}, false) == ms{30000}); // a poll above the ceiling stands
}

TEST_CASE("a job's output path is scontrol's last StdOut=, whatever the job's name says") {
    CHECK(parse_scontrol_stdout("JobId=9 JobName=x StdOut=/etc/shadow UserId=u(1) WorkDir=/h StdErr=/h/e "
                                "StdIn=/dev/null StdOut=/h/slurm-9.out Power=") == "/h/slurm-9.out");
}

TEST_CASE("sinfo -N: the nodes a job can start on, each once (a node in two partitions is listed twice)") {
    const std::string out =
        "n1 idle\nn2 mix\nn3 drain\nn4 down*\nn5 idle*\nn6 alloc\nn1 idle\nbroken\nn7 comp\n";
    CHECK(slurm::parse_sinfo_nodes(out) == std::vector<std::string>{"n1", "n2", "n6", "n7"});
    CHECK(slurm::parse_sinfo_nodes("").empty());
}

// The reproducer (tests/fixtures/slurm/rename-*, captured from the local cluster): a running array task
// renames itself with `scontrol update JobName=` to a whole forged completion record ("x JobState=COMPLETED
// ... StartTime=2020-01-01T00:00:00 ... NodeList=n9 ... ArrayJobId=1 ArrayTaskId=7 ... ExitCode=0:0"), sets a
// comment that repeats the keys too, and exits 3. Slurm writes the name unescaped before its own fields.
TEST_CASE(
    "a job that renames itself cannot forge its state, times, node or identity in the completion file") {
    ParseStats stats;
    auto rs = parse_jobcomp(fixture("rename-jobcomp.txt"), &stats);
    CHECK(stats.skipped == 0);
    REQUIRE(rs.size() == 1);
    const auto& r = rs[0];
    CHECK(r.job_id == "3600006_0");
    CHECK(r.state == JobState::Failed);
    CHECK(r.exit_code == 3);
    CHECK(r.node_list == "n1");
    CHECK(r.start_time == "2026-12-06T07:15:02");
    CHECK(r.end_time == "2026-12-06T07:15:10");
    CHECK(r.elapsed_s == doctest::Approx(8));
    CHECK(classify(r) == JobEnd::Failed);
}

TEST_CASE(
    "scontrol's text with a name or comment that repeats Slurm's keys is refused, never read by position") {
    for (const char* name : {"rename-scontrol-running.txt", "rename-scontrol-finished.txt"}) {
        CAPTURE(name);
        ParseStats stats;
        const auto rs = parse_jobcomp(fixture(name), &stats);
        CHECK(rs.empty());
        CHECK(stats.skipped == 1);
        CHECK(stats.first_problem.find("ambiguous") != std::string::npos);
    }
    // Where nothing repeats, scontrol's line is read as before (the head's identity, the one JobState).
    const auto ok = parse_jobcomp(fixture("scontrol-show-job.txt"));
    REQUIRE(ok.size() == 1);
    CHECK(ok[0].state == JobState::Running);
}

TEST_CASE("squeue's JSON gives the renamed job's real state, node, exit and times") {
    ParseStats stats;
    auto running = parse_squeue_json(fixture("rename-squeue-running.json"), &stats);
    const auto& r = find(running, "3600006_0");
    CHECK(r.state == JobState::Running);
    CHECK(r.node_list == "n1");
    CHECK(r.array_job_id == "3600006");
    auto finished = parse_squeue_json(fixture("rename-squeue-finished.json"), &stats);
    const auto& f = find(finished, "3600006_0");
    CHECK(f.state == JobState::Failed);
    CHECK(f.exit_code == 3);
    CHECK(f.exit_signal == 0);
    CHECK(f.node_list == "n1");
    CHECK(f.elapsed_s == doctest::Approx(8));
    // The same capture's other jobs: a cgroup OOM kill (wait status 253: signal 125) and a plain exit.
    CHECK(classify(find(finished, "3600004")) == JobEnd::OutOfMemory);
    CHECK(find(finished, "3600003").exit_code == 3);
    CHECK(stats.skipped == 0);
    // squeue's text format names no free-text field: the renamed task reads as it is.
    const std::string format = squeue_format();
    CHECK(format.find("%j") == std::string::npos);
    CHECK(format.find("%k") == std::string::npos);
    const auto q = parse_squeue(fixture("rename-squeue.txt"));
    REQUIRE(q.size() == 1);
    CHECK(q[0].state == JobState::Running);
    CHECK(q[0].node_list == "n1");
}

TEST_CASE("squeue's JSON nested too deep, or not Slurm's layout, is skipped and counted") {
    ParseStats stats;
    const std::string deep = "{\"jobs\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
    CHECK(parse_squeue_json(deep, &stats).empty());
    CHECK(parse_squeue_json("{\"jobs\": 3}", &stats).empty());
    CHECK(parse_squeue_json("{\"jobs\": [{\"job_id\": -1}, {\"job_id\": 5, \"job_state\": \"RUNNING\"}]}",
                            &stats)
              .size() == 1);
    CHECK(stats.skipped == 3);
}

TEST_CASE("squeue --json is pinned to a data_parser on 24.05 to 25.11, and 22.05 reads the text") {
    CHECK(pinned_data_parser("slurm 24.11.5\n") == "v0.0.41");
    CHECK(pinned_data_parser("24.05.1") == "v0.0.41");
    CHECK(pinned_data_parser("slurm 25.05.0") == "v0.0.41");
    CHECK(pinned_data_parser("slurm 25.11.0") == "v0.0.42");
    CHECK(!pinned_data_parser("slurm 22.05.8"));
    CHECK(!pinned_data_parser("slurm 23.11.10"));
    CHECK(!pinned_data_parser("slurm-wlm 26.05.0"));
    CHECK(!pinned_data_parser(""));
    CHECK(!pinned_data_parser("squeue: error: not a version"));
}

// Slurm 24.11.5, built from source (scripts/build-slurm) and run by scripts/slurm-local --slurm: the same
// commands' outputs (tests/fixtures/slurm/24.11/README.md says how they were captured).
TEST_CASE("Slurm 24.11's sbatch, squeue text, scontrol and sacct -c outputs parse as 22.05's") {
    CHECK(parse_sbatch_parsable(fixture("24.11/sbatch-parsable.txt")) == "1000011");
    CHECK_THROWS_AS(parse_sbatch_parsable(fixture("24.11/sbatch-refused.txt")), Error);
    ParseStats stats;
    const auto q = parse_squeue(fixture("24.11/squeue-array.txt"), &stats);
    REQUIRE(q.size() == 4);
    CHECK(find(q, "1000011_0").state == JobState::Running);
    CHECK(find(q, "1000011_0").node_list == "n1");
    CHECK(find(q, "1000011_3").state == JobState::Pending);
    CHECK(find(q, "1000011_3").reason == "JobArrayTaskLimit");
    // scontrol -o show job: the array identity from the line's head.
    const auto job = parse_jobcomp(fixture("24.11/scontrol-show-job.txt"), &stats);
    REQUIRE(job.size() == 1);
    CHECK(job[0].job_id == "1000011_0");
    CHECK(job[0].state == JobState::Running);
    // sacct -c (the completion file through sacct; it still does not know the array fields).
    const auto sa = parse_sacct(fixture("24.11/sacct-c.txt"), &stats);
    REQUIRE(sa.size() == 4);
    CHECK(classify(find(sa, "1000015")) == JobEnd::OutOfMemory);
    CHECK(find(sa, "1000016").exit_code == 3);
    CHECK(stats.skipped == 0);
}

TEST_CASE("Slurm 24.11's configuration says no accounting as (null), and names the completion file") {
    const auto c = parse_scontrol_config(fixture("24.11/scontrol-show-config.txt"));
    CHECK(c.at("AccountingStorageType") == "(null)");
    CHECK(!accounting_configured(c));
    CHECK(c.at("JobCompType") == "jobcomp/filetxt");
    CHECK(!c.at("JobCompLoc").empty());
    // 22.05's word for the same.
    CHECK(!accounting_configured(parse_scontrol_config(fixture("scontrol-show-config.txt"))));
    CHECK(accounting_configured({{"AccountingStorageType", "accounting_storage/slurmdbd"}}));
    CHECK(!accounting_configured({}));
}

TEST_CASE("Slurm 24.11's completion file gives each array task, the OOM and the step OOM") {
    ParseStats stats;
    const auto rs = parse_jobcomp(fixture("24.11/jobcomp.txt"), &stats);
    CHECK(stats.skipped == 0);
    REQUIRE(rs.size() == 8);
    for (int t = 0; t < 4; ++t)
        CHECK(find(rs, "1000011_" + std::to_string(t)).state == JobState::Completed);
    CHECK(find(rs, "1000011_3").array_job_id == "1000011");
    CHECK(classify(find(rs, "1000015")) == JobEnd::OutOfMemory); // the batch step over --mem
    const auto& failed = find(rs, "1000016");
    CHECK(classify(failed) == JobEnd::Failed);
    CHECK(failed.exit_code == 3);
    // srun's rank OOM-killed: the job FAILED 1:0, DerivedExitCode 0:125.
    const auto& step = find(rs, "1000017");
    CHECK(step.state == JobState::Failed);
    CHECK(step.step_oom_killed);
    CHECK(classify(step) == JobEnd::OutOfMemory);
}

TEST_CASE(
    "Slurm 24.11's squeue --json=v0.0.41: states, exits, the step OOM and a pending array task by task") {
    ParseStats stats;
    const auto active = parse_squeue_json(fixture("24.11/squeue-array.json"), &stats);
    REQUIRE(active.size() == 4); // the running task and the three pending ones, as squeue -r
    const auto& running = find(active, "1000011_0");
    CHECK(running.state == JobState::Running);
    CHECK(running.node_list == "n1");
    CHECK(running.array_job_id == "1000011");
    CHECK(running.start_time.size() == 19);
    for (const char* id : {"1000011_1", "1000011_2", "1000011_3"}) {
        CAPTURE(id);
        const auto& p = find(active, id);
        CHECK(p.state == JobState::Pending);
        CHECK(p.reason == "JobArrayTaskLimit");
        CHECK(p.array_job_id == "1000011");
    }
    // squeue --states=all: every job slurmctld still knows.
    const auto done = parse_squeue_json(fixture("24.11/squeue-finished.json"), &stats);
    CHECK(done.size() == 18);
    CHECK(classify(find(done, "1000015")) == JobEnd::OutOfMemory);
    CHECK(find(done, "1000015").exit_signal == 125);
    CHECK(find(done, "1000016").exit_code == 3);
    CHECK(classify(find(done, "1000016")) == JobEnd::Failed);
    CHECK(find(done, "1000017").step_oom_killed); // derived_exit_code's signal 125
    CHECK(classify(find(done, "1000017")) == JobEnd::OutOfMemory);
    CHECK(classify(find(done, "1000009")) == JobEnd::Timeout);
    CHECK(classify(find(done, "1000008")) == JobEnd::Cancelled);
    const auto& task = find(done, "1000011_3");
    CHECK(task.state == JobState::Completed);
    CHECK(task.elapsed_s == doctest::Approx(4));
    CHECK(task.end_time.size() == 19);
    CHECK(stats.skipped == 0);
    // The same job in both layouts reads the same: v0.0.41's counts and state array, v0.0.38's plain values.
    const std::string v41 = R"({"jobs": [{"job_id": 9, "job_state": ["PENDING", "REQUEUED"],
        "array_job_id": {"set": true, "infinite": false, "number": 0}, "restart_cnt": 1,
        "exit_code": {"status": ["SIGNALED"], "return_code": {"set": false, "infinite": false, "number": 0},
                      "signal": {"id": {"set": true, "infinite": false, "number": 9}, "name": "KILL"}}}]})";
    const std::string v38 =
        R"({"jobs": [{"job_id": 9, "job_state": "REQUEUED", "array_job_id": 0, "restart_cnt": 1, "exit_code": 9}]})";
    for (const auto& text : {v41, v38}) {
        const auto rs = parse_squeue_json(text, &stats);
        REQUIRE(rs.size() == 1);
        CHECK(rs[0].job_id == "9");
        CHECK(rs[0].raw_state == "REQUEUED"); // as squeue's text prints it: the flag before the base state
        CHECK(rs[0].state == JobState::Requeued);
        CHECK(rs[0].exit_signal == 9);
        CHECK(rs[0].restarts == 1);
    }
    // A pending array too large to list task by task stays one record, as squeue without -r shows it.
    const auto big = parse_squeue_json(
        R"({"jobs": [{"job_id": 7, "job_state": ["PENDING"], "array_job_id": {"set": true, "number": 7},
            "array_task_id": {"set": false, "number": 0}, "array_task_string": "0-199999%4"},
           {"job_id": 8, "job_state": ["PENDING"], "array_job_id": {"set": true, "number": 8},
            "array_task_id": {"set": false, "number": 0}, "array_task_string": "1,5-9:2"}]})",
        &stats);
    REQUIRE(big.size() == 5);
    CHECK(big[0].job_id == "7_[0-199999%4]");
    CHECK(big[1].job_id == "8_1");
    CHECK(big[2].job_id == "8_5");
    CHECK(big[3].job_id == "8_7");
    CHECK(big[4].job_id == "8_9");
    CHECK(stats.skipped == 0);
}

TEST_CASE(
    "squeue's JSON: a pending array of 4 million tasks stays one record, as squeue prints it without -r") {
    auto pending = [](int job, const std::string& tasks) {
        return fmt::format(
            R"({{"job_id": {0}, "array_job_id": {{"set": true, "infinite": false, "number": {0}}},
            "array_task_id": {{"set": false, "infinite": false, "number": 0}}, "array_task_string": "{1}",
            "job_state": ["PENDING"]}})",
            job, tasks);
    };
    ParseStats stats;
    const auto jobs = parse_squeue_json(
        R"({"jobs": [)" + pending(1000020, "0-3999999") + "," + pending(1000021, "0-9%2") + "]}", &stats);
    REQUIRE(jobs.size() == 11); // the huge array as one record, the small one task by task
    CHECK(find(jobs, "1000020_[0-3999999]").state == JobState::Pending);
    for (int t = 0; t < 10; ++t)
        CHECK(find(jobs, "1000021_" + std::to_string(t)).state == JobState::Pending);
}
