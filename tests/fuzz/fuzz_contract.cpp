// libFuzzer: the contract loader (TOML, numbers, times, sizes, knobs, constraints) on hostile files. Only
// infrarsi::Error may come out. The file lives in a private temporary directory (contracts name paths
// relative to themselves; most are refused as missing, which is an Error too).
#include "contract/contract.hpp"
#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {
const std::filesystem::path& file() {
    static const std::filesystem::path f = [] {
        std::string dir = (std::filesystem::temp_directory_path() / "infrarsi-fuzz-contract-XXXXXX").string();
        if (!::mkdtemp(dir.data())) std::abort();
        return std::filesystem::path(dir) / "fuzz.contract.toml";
    }();
    return f;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    {
        std::ofstream out(file(), std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    try {
        infrarsi::contract::load(file());
    } catch (const infrarsi::Error&) {
    }
    for (const char* s : {"", "M"}) {
        try {
            infrarsi::contract::parse_memory(std::string(reinterpret_cast<const char*>(data), size) + s);
        } catch (const infrarsi::Error&) {
        }
    }
    try {
        infrarsi::contract::parse_time(std::string(reinterpret_cast<const char*>(data), size));
    } catch (const infrarsi::Error&) {
    }
    return 0;
}
