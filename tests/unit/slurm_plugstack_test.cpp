// Finding the plugin's spool from the site's plugstack.conf (slurm/plugstack.hpp), so that `infrarsi doctor`
// and `run` take the plugin's evidence without --spool.
#include "slurm/plugstack.hpp"
#include "test_support.hpp"

#include <doctest/doctest.h>
#include <fstream>

using namespace infrarsi;
using namespace infrarsi::slurm;
namespace fs = std::filesystem;

namespace {
void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
}
} // namespace

TEST_CASE(
    "plugstack.conf lines: plugins with their arguments and includes, comments and other lines skipped") {
    const auto s = parse_plugstack("# site plugins\n"
                                   "required /usr/lib/slurm/other.so a=1   # trailing comment\n"
                                   "\n"
                                   "optional  /opt/infrarsi/lib/infrarsi.so spool=/srv/spool  nccl=yes\n"
                                   "include /etc/slurm/plugstack.conf.d/*.conf\n"
                                   "garbage line\n");
    REQUIRE(s.plugins.size() == 2);
    CHECK(s.plugins[0].required);
    CHECK(s.plugins[0].plugin == "/usr/lib/slurm/other.so");
    CHECK(s.plugins[0].args == std::vector<std::string>{"a=1"});
    CHECK_FALSE(s.plugins[1].required);
    CHECK(s.plugins[1].args == std::vector<std::string>{"spool=/srv/spool", "nccl=yes"});
    CHECK(s.includes == std::vector<std::string>{"/etc/slurm/plugstack.conf.d/*.conf"});
}

TEST_CASE("the plugin's spool: its spool= argument, its default without one, through an include") {
    test::TempDir t;
    write(t.path / "a.conf", "optional /x/infrarsi.so spool=/data/spool default_mode=record\n");
    CHECK(plugstack_spool(t.path / "a.conf") == "/data/spool");
    write(t.path / "b.conf", "required infrarsi.so\n");
    CHECK(plugstack_spool(t.path / "b.conf") == kDefaultPluginSpool);
    // Another plugin whose name merely contains ours is not ours.
    write(t.path / "c.conf", "required /x/not-infrarsi.so.bak spool=/nope\n");
    CHECK_FALSE(plugstack_spool(t.path / "c.conf"));
    // Included files, relative to the including file's directory.
    write(t.path / "d.conf", "include plugstack.d/*.conf\n");
    write(t.path / "plugstack.d/10-other.conf", "optional /x/other.so\n");
    write(t.path / "plugstack.d/20-infrarsi.conf", "optional /x/infrarsi.so spool=/from/include\n");
    CHECK(plugstack_spool(t.path / "d.conf") == "/from/include");
    // An include of itself ends.
    write(t.path / "loop.conf", "include " + (t.path / "loop.conf").string() + "\n");
    CHECK_FALSE(plugstack_spool(t.path / "loop.conf"));
    CHECK_FALSE(plugstack_spool(t.path / "missing.conf"));
}

TEST_CASE("spool discovery: --spool, then $INFRARSI_SPOOL, then Slurm's PlugStackConfig, a missing spool is "
          "not taken") {
    test::TempDir t;
    const fs::path spool = t.path / "spool";
    fs::create_directories(spool);
    write(t.path / "etc/plugstack.conf", "optional /p/infrarsi.so spool=" + spool.string() + "\n");
    std::map<std::string, std::string> config = {
        {"PlugStackConfig", (t.path / "etc/plugstack.conf").string()}};
    CHECK(discover_plugin_spool("/given", "/env", config).spool == "/given");
    CHECK(discover_plugin_spool("", "/env", config).spool == "/env");
    const auto found = discover_plugin_spool("", "", config);
    CHECK(found.spool == spool.string());
    CHECK(found.how.find("plugstack.conf") != std::string::npos);
    // No PlugStackConfig: the file beside slurm.conf.
    CHECK(discover_plugin_spool("", "", {{"SLURM_CONF", (t.path / "etc/slurm.conf").string()}}).spool ==
          spool.string());
    // A spool that is not a directory here (another host's path): none, and why.
    write(t.path / "etc/plugstack.conf", "optional /p/infrarsi.so spool=/nonexistent/spool\n");
    const auto gone = discover_plugin_spool("", "", config);
    CHECK(gone.spool.empty());
    CHECK(gone.how.find("/nonexistent/spool") != std::string::npos);
    CHECK(discover_plugin_spool("", "", {}).spool.empty());
}
