// libFuzzer: the step-line parsers of every log format (the job writes these lines). The first byte picks
// the format; the rest is the log. Only infrarsi::Error may come out of parse_log. The same log goes through
// the NCCL INFO reader and the doctor's transport check, and the reader of nvidia-smi's compute processes,
// which never throw.
#include "measure/log_format.hpp"
#include "measure/steps.hpp"
#include "trial/gpu_memory.hpp"
#include "trial/nccl_fallback.hpp"
#include "trial/nccl_log.hpp"
#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace infrarsi::measure;
    if (size == 0) return 0;
    const auto& names = log_format_names;
    LogFormat f;
    f.kind = names.entries[data[0] % names.entries.size()].first;
    if (f.kind == LogFormatKind::Regex)
        f.pattern = R"(it (?<step>\d+) loss (?<loss>[0-9.eE+-]+) (?<step_time>[0-9.]+)ms)";
    if (data[0] & 0x80) f.rank = 1;
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        parse_log(text, f);
    } catch (const infrarsi::Error&) {
    }
    parse_step_log(text, "INFRARSI_STEP", "INFRARSI_SUMMARY");
    (void)infrarsi::trial::largest_gpu_bytes(infrarsi::trial::parse_compute_apps(text), {1, 2, 3});
    const auto nccl = infrarsi::trial::read_nccl_log(text);
    for (const auto& f : infrarsi::trial::nccl_fallbacks(nccl, {2, {"mlx5_0"}, (data[0] & 1) != 0}))
        (void)f.message();
    return 0;
}
