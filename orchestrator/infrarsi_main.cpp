// The `infrarsi` command: parses arguments and calls the core library. No logic lives here.
#include "infrarsi/build_info.hpp"
#include "util/error.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

int main(int argc, char** argv) {
    CLI::App app{"infrarsi: turn a Slurm training job into a verified faster one"};
    app.set_version_flag("--version", std::string("infrarsi ") + infrarsi::build::version);
    app.require_subcommand(0, 1);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        if (app.get_subcommands().empty()) {
            fmt::print("{}", app.help());
            return 0;
        }
    } catch (const infrarsi::Error& e) {
        fmt::print(stderr, "infrarsi: {}\n", e.what());
        return 1;
    }
    return 0;
}
