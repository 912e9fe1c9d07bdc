// libFuzzer: the readers of files a job or a user can write: the batch manifest, result.json, a tune
// request, an allocation record line, each through the bounded JSON parse its reader uses. The first byte
// picks the reader. Only infrarsi::Error may come out (seeds: tests/fuzz/CMakeLists.txt, deep and huge ones).
#include "node/allocation_record.hpp"
#include "trial/manifest.hpp"
#include "trial/result.hpp"
#include "trial/tune_request.hpp"
#include "util/bounded_json.hpp"
#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    try {
        switch (data[0] % 4) {
        case 0:
            infrarsi::trial::parse_manifest(text, "fuzz");
            break;
        case 1: // as read_result reads it
            infrarsi::trial::result_from_json(
                infrarsi::parse_bounded_json(text, "fuzz", "a result",
                                             {.max_bytes = infrarsi::trial::kMaxResultBytes}),
                "fuzz");
            break;
        case 2: // as read_tune_request reads it
            infrarsi::trial::tune_request_from_json(infrarsi::parse_bounded_json(
                text, "fuzz", "a tune request", {.max_bytes = infrarsi::trial::kMaxTuneRequestBytes}));
            break;
        default:
            infrarsi::node::parse_record_line(text);
        }
    } catch (const infrarsi::Error&) {
    }
    return 0;
}
