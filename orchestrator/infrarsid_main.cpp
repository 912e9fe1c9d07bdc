// The `infrarsid` daemon: runs campaigns in the background until their budgets end. Thin over src/.
#include "infrarsi/build_info.hpp"
#include "util/error.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

int main(int argc, char** argv) {
    CLI::App app{"infrarsid: the InfraRSI campaign daemon"};
    app.set_version_flag("--version", std::string("infrarsid ") + infrarsi::build::version);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    fmt::print("{}", app.help());
    return 0;
}
