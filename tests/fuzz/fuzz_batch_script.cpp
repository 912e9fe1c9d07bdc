// libFuzzer: the reader of a user's batch script (`infrarsi init --from`: a small shell lexer with quotes,
// parameter expansions, arrays, command strings, loops) and the knob discovery on what it read. Only
// infrarsi::Error may come out.
#include "contract/batch_script.hpp"
#include "contract/knob_discovery.hpp"
#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto s = infrarsi::contract::read_batch_script(
            std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.sbatch");
        (void)infrarsi::contract::discover_knobs(s, {8, 4, 16});
    } catch (const infrarsi::Error&) {
    }
    return 0;
}
