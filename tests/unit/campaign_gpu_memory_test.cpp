// A contract with a per-GPU memory limit (`[resources] gpu_mem`): the memory that decides is the GPU's, as
// the job's step lines report it; a GPU out-of-memory is censored at that limit (peak > gpu_mem); the
// host's peak stays in the measurements. On stepload (tests/fixtures/stepload/train.sh) in its GPU mode:
// chunk x 300 MiB of device memory, PyTorch's CUDA OOM message above 500 MiB.
#include "campaign/campaign.hpp"
#include "contract/contract.hpp"
#include "report/report.hpp"
#include "stepload_campaign.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;
using store::TrialKind;

TEST_CASE("with gpu_mem, a trial's memory is the GPU figure of its step lines and a GPU OOM is censored at "
          "gpu_mem, not at the host's limit") {
    test::TempDir d("infrarsi-gpu-mem");
    campaign::Campaign c(test::stepload_campaign(
        d, {{"mem = \"200M\"", "mem = \"200M\"\ngpu_mem = \"500M\""},
            {"STEPLOAD_STEP_S = \"0.2\"", "STEPLOAD_STEP_S = \"0.2\"\nSTEPLOAD_GPU_MIB_PER_CHUNK = "
                                          "\"300\"\nSTEPLOAD_GPU_LIMIT_MIB = \"500\""},
            {"[patches]\ncatalog = \"stepload-patches/catalog.toml\"\ncandidates = [\"fast\"]\neditable = "
             "[\"kernel.sh\"]\nprotected = [\"train.sh\"]",
             ""}}));
    CHECK(contract::modeled_memory_limit_bytes(c.contract().resources) == 500ll << 20);
    CHECK(contract::modeled_memory_limit_text(c.contract().resources) == "500M");
    c.run(test::local_run_options());
    REQUIRE(c.finished());
    int ok = 0, oom = 0;
    for (const auto& t : c.store().trials({.state = store::TrialState::Finished})) {
        const auto chunk = t.candidate["knobs"]["chunk"].get<int>();
        if (chunk == 1) {
            REQUIRE(t.outcome == trial::Outcome::Ok);
            REQUIRE(t.peak_memory_bytes);
            CHECK(*t.peak_memory_bytes == doctest::Approx(300.0 * (1 << 20)));
            CHECK(t.measurements.gpu_memory_source == trial::GpuMemorySource::StepLines);
            // The host's peak is kept beside it (the local scheduler's reading of the trial's processes).
            CHECK(t.measurements.host_peak_bytes.has_value());
            ++ok;
        } else {
            INFO(store::outcome_name(t) << ": " << t.detail);
            CHECK(t.outcome == trial::Outcome::OutOfMemory);
            REQUIRE(t.peak_memory_bytes);
            CHECK(*t.peak_memory_bytes == doctest::Approx(500.0 * (1 << 20))); // censored at gpu_mem
            REQUIRE(t.measurements.log_signal);
            CHECK(t.measurements.log_signal->signal == trial::LogSignal::GpuOom);
            ++oom;
        }
    }
    // The report says which memory it is.
    const auto r = report::build(c);
    CHECK(r["sources"]["memory"].get<std::string>().find("gpu_mem 500M per GPU") != std::string::npos);
    CHECK(ok >= 3);  // the doctor's
    CHECK(oom == 1); // the one other setting, tried once: the censored model does not try it again
}
