#include "util/install_paths.hpp"

#include <cstdlib>
#include <infrarsi/build_info.hpp>
#include <system_error>

namespace infrarsi {

namespace fs = std::filesystem;

namespace {

fs::path self_dir() {
    std::error_code ec;
    auto exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path{} : exe.parent_path();
}

bool is_executable(const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) &&
           (fs::status(p, ec).permissions() & fs::perms::owner_exec) != fs::perms::none;
}

} // namespace

fs::path infrarsi_command() {
    if (const char* b = std::getenv("INFRARSI_BIN"); b && *b) return b;
    if (auto dir = self_dir(); !dir.empty() && is_executable(dir / "infrarsi")) return dir / "infrarsi";
    return fs::path(build::binary_dir) / "orchestrator" / "infrarsi";
}

fs::path data_dir() {
    if (const char* d = std::getenv("INFRARSI_DATA_DIR"); d && *d) return d;
    if (auto dir = self_dir(); !dir.empty()) {
        auto share = dir.parent_path() / "share" / "infrarsi";
        std::error_code ec;
        if (fs::is_regular_file(share / "sbatch" / "trial.sbatch", ec)) return share;
    }
    return build::source_dir;
}

fs::path trial_script() {
    return data_dir() / "sbatch" / "trial.sbatch";
}

} // namespace infrarsi
