// libFuzzer: `infrarsi bank import` of a hostile export file into a real (temporary) bank. Only
// infrarsi::Error may come out.
#include "bank/experience_bank.hpp"
#include "util/error.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

namespace {
const std::filesystem::path& dir() {
    static const std::filesystem::path d = [] {
        std::string t = (std::filesystem::temp_directory_path() / "infrarsi-fuzz-bank-XXXXXX").string();
        if (!::mkdtemp(t.data())) std::abort();
        return std::filesystem::path(t);
    }();
    return d;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static auto bank = std::make_unique<infrarsi::bank::ExperienceBank>((dir() / "bank.db").string());
    const auto file = dir() / "export.json";
    {
        std::ofstream out(file, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    try {
        bank->import_from(file.string());
    } catch (const infrarsi::Error&) {
    }
    return 0;
}
