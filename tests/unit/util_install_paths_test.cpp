#include "util/install_paths.hpp"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>

namespace fs = std::filesystem;

TEST_CASE(
    "the trial wrapper and infrarsi are found without an installed prefix (the build tree's fallback)") {
    ::unsetenv("INFRARSI_DATA_DIR");
    ::unsetenv("INFRARSI_BIN");
    CHECK(fs::is_regular_file(infrarsi::trial_script()));
    CHECK(infrarsi::infrarsi_command().filename() == "infrarsi");
}

TEST_CASE("INFRARSI_DATA_DIR and INFRARSI_BIN name the data and the command, over everything else") {
    ::setenv("INFRARSI_DATA_DIR", "/opt/site/share/infrarsi", 1);
    ::setenv("INFRARSI_BIN", "/opt/site/bin/infrarsi", 1);
    CHECK(infrarsi::trial_script() == "/opt/site/share/infrarsi/sbatch/trial.sbatch");
    CHECK(infrarsi::infrarsi_command() == "/opt/site/bin/infrarsi");
    ::unsetenv("INFRARSI_DATA_DIR");
    ::unsetenv("INFRARSI_BIN");
}
