// The failure-line classifier against real-format lines (tests/fixtures/logs/failure-lines.tsv) and whole
// job logs (tests/fixtures/logs/failures/*.log).
#include "trial/log_signals.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace infrarsi;
using trial::LineSource;
using trial::LogSignal;

namespace {

constexpr double KiB = 1024.0, MiB = KiB * 1024, GiB = MiB * 1024;

std::string fixture(const std::string& name) {
    std::ifstream in(std::string(INFRARSI_FIXTURES) + "/logs/" + name, std::ios::binary);
    REQUIRE_MESSAGE(in.good(), "missing fixture " << name);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct Row {
    int line_no = 0;
    LogSignal expected = LogSignal::None;
    std::string line;
};

// expected_signal<TAB>line; '#' starts a comment, blank lines are skipped.
std::vector<Row> corpus() {
    std::istringstream in(fixture("failure-lines.tsv"));
    std::vector<Row> rows;
    std::string text;
    for (int n = 1; std::getline(in, text); ++n) {
        if (text.empty() || text[0] == '#') continue;
        const auto tab = text.find('\t');
        REQUIRE_MESSAGE(tab != std::string::npos, "failure-lines.tsv:" << n << ": no tab");
        const auto expected = trial::log_signal_names.parse(text.substr(0, tab));
        REQUIRE_MESSAGE(expected.has_value(), "failure-lines.tsv:" << n << ": unknown signal");
        rows.push_back({n, *expected, text.substr(tab + 1)});
    }
    return rows;
}

} // namespace

TEST_CASE("every log signal has one name that reads back as itself") {
    for (const auto& [s, name] : trial::log_signal_names.entries) {
        CHECK(trial::to_string(s) == name);
        CHECK(trial::parse_log_signal(name) == s);
    }
    CHECK(trial::to_string(LogSignal::GpuOom) == "gpu_oom");
    CHECK(trial::to_string(LineSource::Slurm) == "slurm");
    CHECK_THROWS_WITH_AS(trial::parse_log_signal("oom"), doctest::Contains("none, host_oom, gpu_oom"), Error);
    CHECK(trial::is_memory(LogSignal::HostOom));
    CHECK(trial::is_memory(LogSignal::GpuOom));
    CHECK_FALSE(trial::is_memory(LogSignal::NcclTimeout));
}

TEST_CASE("the corpus of real failure lines is classified as expected, every line") {
    const auto rows = corpus();
    std::size_t hits = 0;
    std::set<LogSignal> families;
    std::size_t none = 0;
    std::ostringstream misses;
    for (const auto& row : rows) {
        const auto got = trial::classify_line(row.line);
        families.insert(row.expected);
        if (row.expected == LogSignal::None) ++none;
        if (got.signal == row.expected) {
            ++hits;
            continue;
        }
        misses << "\n  failure-lines.tsv:" << row.line_no << ": expected " << trial::to_string(row.expected)
               << ", got " << trial::to_string(got.signal) << ": " << row.line.substr(0, 160);
    }
    const double pct =
        rows.empty() ? 0.0 : 100.0 * static_cast<double>(hits) / static_cast<double>(rows.size());
    std::ostringstream summary;
    summary.setf(std::ios::fixed);
    summary.precision(1);
    summary << "log signal corpus: " << hits << "/" << rows.size() << " lines classified as expected (" << pct
            << "%)";
    MESSAGE(summary.str() << misses.str());
    CHECK(hits == rows.size());
    CHECK(rows.size() >= 40);
    CHECK(none >= 12);
    CHECK(families.size() == trial::log_signal_names.entries.size()); // every family has lines
}

TEST_CASE("a CUDA out-of-memory line gives the device, the request, what PyTorch held and the capacity") {
    SUBCASE("2.1+: 'GPU 0 has a total capacity of ... Of the allocated memory ... is allocated by PyTorch'") {
        const auto r = trial::classify_line(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity "
            "of 79.15 GiB of which 1.23 GiB is free. Process 12345 has 77.9 GiB memory in use. Of the "
            "allocated "
            "memory 75.10 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but unallocated.");
        CHECK(r.signal == LogSignal::GpuOom);
        CHECK(r.source == LineSource::Workload);
        CHECK_FALSE(r.absurd);
        CHECK(r.gpu == 0);
        REQUIRE(r.requested_bytes);
        CHECK(*r.requested_bytes == doctest::Approx(2 * GiB));
        REQUIRE(r.allocated_bytes);
        CHECK(*r.allocated_bytes == doctest::Approx(75.10 * GiB));
        REQUIRE(r.capacity_bytes);
        CHECK(*r.capacity_bytes == doctest::Approx(79.15 * GiB));
    }
    SUBCASE("2.1's 'total capacty', behind srun's task label") {
        const auto r = trial::classify_line(
            "3: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 3 has a "
            "total "
            "capacty of 4.00 GiB of which 41.56 MiB is free. Including non-PyTorch memory, this process has "
            "3.44 "
            "GiB memory in use. Of the allocated memory 2.58 GiB is allocated by PyTorch, and 1.90 MiB is "
            "reserved by PyTorch but unallocated.");
        CHECK(r.signal == LogSignal::GpuOom);
        CHECK(r.gpu == 3);
        CHECK(*r.requested_bytes == doctest::Approx(32 * MiB));
        CHECK(*r.allocated_bytes == doctest::Approx(2.58 * GiB));
        CHECK(*r.capacity_bytes == doctest::Approx(4 * GiB));
    }
    SUBCASE("1.x: '(GPU 1; 10.76 GiB total capacity; 9.20 GiB already allocated; ...)'") {
        const auto r = trial::classify_line(
            "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 1; 10.76 GiB total "
            "capacity; "
            "9.20 GiB already allocated; 200.56 MiB free; 9.45 GiB reserved in total by PyTorch)");
        CHECK(r.signal == LogSignal::GpuOom);
        CHECK(r.gpu == 1);
        CHECK(*r.requested_bytes == doctest::Approx(512 * MiB));
        CHECK(*r.allocated_bytes == doctest::Approx(9.20 * GiB));
        CHECK(*r.capacity_bytes == doctest::Approx(10.76 * GiB));
        CHECK(r.line_no == 0);
    }
    SUBCASE("1.0's 'cached', with KiB") {
        const auto r = trial::classify_line("RuntimeError: CUDA out of memory. Tried to allocate 24.00 MiB "
                                            "(GPU 0; 3.95 GiB total capacity; 3.46 "
                                            "GiB already allocated; 1.06 MiB free; 60.00 KiB cached)");
        CHECK(r.gpu == 0);
        CHECK(*r.requested_bytes == doctest::Approx(24 * MiB));
        CHECK(*r.allocated_bytes == doctest::Approx(3.46 * GiB));
    }
    SUBCASE("the CUDA-error and NCCL forms carry no numbers") {
        for (const char* line :
             {"RuntimeError: CUDA error: out of memory",
              "node1:12345:12400 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'"}) {
            const auto r = trial::classify_line(line);
            CHECK(r.signal == LogSignal::GpuOom);
            CHECK_FALSE(r.gpu);
            CHECK_FALSE(r.requested_bytes);
            CHECK_FALSE(r.capacity_bytes);
        }
    }
}

TEST_CASE("a host out-of-memory line gives the request where it states one") {
    auto r = trial::classify_line(
        "RuntimeError: [enforce fail at alloc_cpu.cpp:83] data. DefaultCPUAllocator: can't "
        "allocate memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot "
        "allocate memory)");
    CHECK(r.signal == LogSignal::HostOom);
    CHECK(*r.requested_bytes == doctest::Approx(1073741824.0));
    CHECK_FALSE(r.gpu);
    r = trial::classify_line(
        "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 7.45 GiB for an array "
        "with shape (1000000000,) and data type float64");
    CHECK(r.signal == LogSignal::HostOom);
    CHECK(*r.requested_bytes == doctest::Approx(7.45 * GiB));
    r = trial::classify_line(
        "slurmstepd: error: Detected 1 oom_kill event in StepId=12.batch. Some of the step "
        "tasks have been OOM Killed.");
    CHECK(r.signal == LogSignal::HostOom);
    CHECK(r.source == LineSource::Slurm);
    CHECK_FALSE(r.requested_bytes);
    // Units as written: KB..EB are powers of 1000, EiB a power of 1024.
    r = trial::classify_line("MemoryError: Unable to allocate 3 GB for an array with shape (3000000000,)");
    CHECK(*r.requested_bytes == doctest::Approx(3e9));
}

TEST_CASE("MemoryError counts as the exception line itself, not as a word in other text") {
    CHECK(trial::classify_line("MemoryError").signal == LogSignal::HostOom);
    CHECK(trial::classify_line("MemoryError: ").signal == LogSignal::HostOom);
    CHECK(trial::classify_line("[rank1]: MemoryError").signal == LogSignal::HostOom);
    CHECK(trial::classify_line("class MemoryErrorHandler(logging.Handler):").signal == LogSignal::None);
    CHECK(trial::classify_line("    raise MemoryError").signal ==
          LogSignal::None); // a traceback's source line
    CHECK(trial::classify_line("logged a MemoryError at step 3").signal == LogSignal::None);
    CHECK(trial::classify_line("Error: no such file").signal ==
          LogSignal::None); // a tool's label, not Python
}

TEST_CASE("an absurd allocation request is a crash line, never a memory observation") {
    auto r = trial::classify_line(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.");
    CHECK(r.signal == LogSignal::Crash);
    CHECK(r.absurd);
    CHECK_FALSE(r.requested_bytes);
    // Over 1 EiB, and over 1024x the stated capacity.
    r = trial::classify_line(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 EiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 78.02 GiB is free.");
    CHECK((r.signal == LogSignal::Crash && r.absurd));
    r = trial::classify_line(
        "RuntimeError: CUDA out of memory. Tried to allocate 98304.00 GiB (GPU 0; 15.78 GiB total "
        "capacity; 1.02 GiB already allocated; 14.10 GiB free; 1.10 GiB reserved in total by "
        "PyTorch)");
    CHECK((r.signal == LogSignal::Crash && r.absurd));
    CHECK(r.gpu == 0);
    CHECK_FALSE(r.capacity_bytes);
    // Large but possible: 171x the device (a real report), still memory.
    r = trial::classify_line(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 13535.27 GiB. GPU 0 has "
        "a total capacity of 79.14 GiB of which 61.76 GiB is free.");
    CHECK(r.signal == LogSignal::GpuOom);
    CHECK_FALSE(r.absurd);
    // More digits than a double holds: absurd, no number kept.
    r = trial::classify_line("DefaultCPUAllocator: can't allocate memory: you tried to allocate " +
                             std::string(400, '9') + " bytes.");
    CHECK((r.signal == LogSignal::Crash && r.absurd));
}

TEST_CASE("whole log: an OOM after an NCCL timeout is not this candidate's memory") {
    const auto d = trial::diagnose(fixture("failures/nccl-timeout-then-oom.log"));
    CHECK(d.signal == LogSignal::NcclTimeout);
    REQUIRE(d.first);
    CHECK(d.first->line_no == 4);
    CHECK(d.first->line.find("Watchdog caught collective operation timeout") != std::string::npos);
    REQUIRE(d.discounted);
    CHECK(d.discounted->signal == LogSignal::GpuOom);
    CHECK(d.discounted->line_no == 14);
    CHECK(*d.discounted->requested_bytes == doctest::Approx(20 * GiB)); // kept for people, not learned
    CHECK(d.reason.find("Watchdog caught collective operation timeout") != std::string::npos);
    CHECK(d.reason.find("line 14 came after it: not counted as memory") != std::string::npos);
}

TEST_CASE("whole log: torchrun's footer gives way to the rank's own exception line") {
    const auto d = trial::diagnose(fixture("failures/torchrun-rank-error.log"));
    CHECK(d.signal == LogSignal::Crash);
    REQUIRE(d.first);
    CHECK(d.first->source == LineSource::Workload);
    CHECK(d.first->line_no == 17);
    CHECK(d.reason ==
          "[rank1]: RuntimeError: The size of tensor a (2048) must match the size of tensor b (1024) "
          "at non-singleton dimension 3");
    CHECK_FALSE(d.discounted);
    // The footer alone (the rank's output went elsewhere): the launcher's line is the reason.
    const auto footer =
        trial::diagnose("E0801 13:23:20.000000 32974 torch/distributed/elastic/multiprocessing/"
                        "api.py:874] failed (exitcode: 1) local_rank: 1 (pid: 33052) of binary: "
                        "/usr/bin/python3\n"
                        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
                        "  traceback : To enable traceback see: "
                        "https://pytorch.org/docs/stable/elastic/errors.html\n");
    CHECK(footer.signal == LogSignal::Crash);
    REQUIRE(footer.first);
    CHECK(footer.first->source == LineSource::Launcher);
    CHECK(footer.first->line_no == 1);
}

TEST_CASE("whole log: a CUDA OOM in a traceback, behind progress-bar redraws, with its numbers") {
    const auto d = trial::diagnose(fixture("failures/cuda-oom-traceback.log"));
    CHECK(d.signal == LogSignal::GpuOom);
    REQUIRE(d.first);
    CHECK(d.first->line_no == 15);
    CHECK(d.first->gpu == 1);
    CHECK(*d.first->requested_bytes == doctest::Approx(3.91 * GiB));
    CHECK(*d.first->allocated_bytes == doctest::Approx(35.62 * GiB));
    CHECK(*d.first->capacity_bytes == doctest::Approx(39.38 * GiB));
    CHECK(d.reason.rfind("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.", 0) == 0);
    CHECK(d.reason.size() <= 403);
}

TEST_CASE("whole log: Slurm's oom_kill report is a host OOM, though torchrun reported a SIGKILL first") {
    const auto d = trial::diagnose(fixture("failures/slurm-host-oom.log"));
    CHECK(d.signal == LogSignal::HostOom);
    REQUIRE(d.first);
    CHECK(d.first->source == LineSource::Slurm);
    CHECK(d.first->line_no == 27);
    CHECK(d.reason.rfind("slurmstepd: error: Detected 1 oom_kill event in StepId=4197661.batch", 0) == 0);
}

TEST_CASE("the job-level rule, line by line") {
    const std::string oom =
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.23 GiB is free.\n";
    const std::string timeout =
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600012 "
        "milliseconds before timing out.\n";
    const std::string peer =
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed "
        "by peer [10.0.0.2]:10895\n";
    const std::string huge =
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate more than 1EB memory.\n";
    const std::string crash = "RuntimeError: CUDA error: an illegal memory access was encountered\n";
    const std::string slurm =
        "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks "
        "have been OOM Killed.\n";

    SUBCASE("nothing") {
        const auto d = trial::diagnose("iter 10: loss 2.3100, time 120.50ms, mfu 21.30%\n");
        CHECK(d.signal == LogSignal::None);
        CHECK_FALSE(d.first);
        CHECK(d.reason.empty());
        CHECK(trial::diagnose("").signal == LogSignal::None);
    }
    SUBCASE("an OOM before a timeout is memory") {
        const auto d = trial::diagnose(oom + timeout);
        CHECK(d.signal == LogSignal::GpuOom);
        CHECK(*d.first->requested_bytes == doctest::Approx(2 * GiB));
        CHECK_FALSE(d.discounted);
    }
    SUBCASE("an OOM after another rank's failure is not") {
        const auto d = trial::diagnose(peer + oom);
        CHECK(d.signal == LogSignal::PeerFailure);
        REQUIRE(d.discounted);
        CHECK(d.discounted->line_no == 2);
    }
    SUBCASE("an absurd request first: a crash, and the OOMs after it are not memory either") {
        const auto d = trial::diagnose(huge + oom);
        CHECK(d.signal == LogSignal::Crash);
        REQUIRE(d.first);
        CHECK(d.first->absurd);
        CHECK(d.discounted->line_no == 1);
        CHECK(d.reason.find("absurd allocation request: not counted as memory") != std::string::npos);
    }
    SUBCASE("an absurd request after a timeout: the timeout") {
        const auto d = trial::diagnose(timeout + huge);
        CHECK(d.signal == LogSignal::NcclTimeout);
        CHECK(d.discounted->absurd);
    }
    SUBCASE("an OOM beats a crash line before it") {
        CHECK(trial::diagnose(crash + oom).signal == LogSignal::GpuOom);
        CHECK(trial::diagnose(crash).signal == LogSignal::Crash);
    }
    SUBCASE("Slurm's oom_kill report decides even after a timeout") {
        const auto d = trial::diagnose(timeout + oom + slurm);
        CHECK(d.signal == LogSignal::HostOom);
        CHECK(d.first->source == LineSource::Slurm);
        CHECK(d.first->line_no == 3);
        CHECK(d.discounted->line_no == 2); // the GPU OOM after the timeout is still not memory
    }
    SUBCASE("CRLF and bare carriage returns split segments of one line") {
        const auto d = trial::diagnose("iter 1\r\n 10%|#   | 1/10\r" + crash);
        CHECK(d.signal == LogSignal::Crash);
        CHECK(d.first->line_no == 2);
        CHECK(d.reason == "RuntimeError: CUDA error: an illegal memory access was encountered");
    }
}

TEST_CASE("hostile output: never throws, reads only the head of a long line, stays linear") {
    // An 8 MB line that repeats the start of an OOM line, then a real one on the next line.
    std::string log;
    while (log.size() < (8u << 20))
        log += "CUDA out of memory. Tried to allocate ";
    log += "\nMemoryError\n";
    trial::LogDiagnosis d;
    CHECK_NOTHROW(d = trial::diagnose(log));
    CHECK(d.signal == LogSignal::GpuOom); // the first line's head is an OOM report without numbers
    CHECK(d.first->line.size() == trial::kMaxSignalLineBytes);
    CHECK_FALSE(d.first->requested_bytes);

    // Binary junk, NULs, lone carriage returns, unterminated numbers and prefixes.
    std::string junk;
    for (int i = 0; i < 200000; ++i)
        junk.push_back(static_cast<char>((i * 7919) % 256));
    junk += std::string("\0\0\r\r\n[rank", 10) + "\n[rank1]:\n7:\n\x1b[\nTried to allocate \nGPU \n(GPU 1; 2";
    CHECK_NOTHROW(d = trial::diagnose(junk));
    CHECK_NOTHROW(trial::classify_line(junk));

    // A million short lines, each tested against every family.
    std::string many;
    for (int i = 0; i < 1000000; ++i)
        many += "iter 10: loss 2.3100, time 120.50ms\n";
    CHECK_NOTHROW(d = trial::diagnose(many));
    CHECK(d.signal == LogSignal::None);

    // The reason is one printable line, cut at a character boundary.
    const std::string wide =
        "RuntimeError: " + std::string(10, '\t') + std::string(375, 'x') + "\xc3\xa9" + std::string(600, 'y');
    d = trial::diagnose(wide);
    CHECK(d.reason == "RuntimeError: " + std::string(10, ' ') + std::string(375, 'x') + "...");
}
