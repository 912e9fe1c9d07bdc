// apply's sbatch snippet is sourced by a shell: values with a space, quotes or $(...) stay values.
#include "report/report.hpp"
#include "util/process.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;

TEST_CASE("the sbatch snippet quotes every value: sourcing it neither splits one nor runs $(...)") {
    const fs::path dir = fs::temp_directory_path() / ("infrarsi-snippet-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string ran = (dir / "ran").string();
    const std::map<std::string, std::string> env{
        {"A", "v w"}, {"B", "$(touch " + ran + ")"}, {"C", "it's \"q\" `x` $HOME \\"}, {"D", ""}};
    const fs::path snippet = dir / "snippet.sh";
    std::ofstream(snippet) << report::sbatch_snippet(env, false);
    auto r = run_process({"/bin/sh", "-c",
                          ". \"$1\" && printf '%s\\n%s\\n%s\\n[%s]\\n' \"$A\" \"$B\" \"$C\" \"$D\"", "sh",
                          snippet.string()});
    REQUIRE(r.ok());
    CHECK(r.out == "v w\n$(touch " + ran + ")\nit's \"q\" `x` $HOME \\\n[]\n");
    CHECK_FALSE(fs::exists(ran));
    fs::remove_all(dir);
}
