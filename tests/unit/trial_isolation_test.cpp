// Containment (trial/isolation.cpp): which paths a trial's private view hides and binds back, and, in a child
// process, that a trial cannot reach a sibling campaign or the bank through it.
#include "trial/isolation.hpp"
#include "trial/manifest.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <grp.h>
#include <optional>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using test::TempDir;

namespace {

// <root>/camps/{mine,other}: two campaigns side by side, a data directory and a script beside them, a bank
// of its own, and trial 0 of batch 1 of `mine` with its sandbox.
struct Layout {
    TempDir tmp;
    fs::path root, camps, mine, other, data, bankdir, spool;
    trial::ManifestTask task;
    fs::path manifest;
    Layout() {
        root = fs::canonical(tmp.path);
        camps = root / "camps";
        mine = camps / "mine";
        other = camps / "other";
        data = camps / "data";
        bankdir = root / "bank";
        spool = root / "spool";
        for (const auto& d :
             {mine / "batches/1/0", mine / "batches/1/1", mine / "batches/0/0", mine / "sandboxes/ab12/build",
              mine / "sandboxes/cd34", other / "batches/0/0", data, bankdir, spool})
            fs::create_directories(d);
        std::ofstream(mine / "campaign.db") << "db";
        std::ofstream(other / "campaign.db") << "other db";
        std::ofstream(mine / "batches/0/0/log.txt") << "doctor log\n";
        std::ofstream(data / "tokens.bin") << "tokens";
        std::ofstream(camps / "run.sh") << "echo run\n";
        std::ofstream(bankdir / "bank.sqlite") << "bank";
        task.trial_id = "5";
        task.build = (mine / "sandboxes/ab12/build").string();
        task.workdir = (mine / "batches/1/0").string();
        task.result = (mine / "batches/1/0/result.json").string();
        task.log = (mine / "batches/1/0/log.txt").string();
        manifest = mine / "batches/1/manifest.json";
    }
    trial::ContainmentSite site() const {
        trial::ContainmentSite s;
        s.bank = {bankdir / "bank.sqlite"};
        s.spool = spool;
        return s;
    }
    void write(trial::ManifestTask t) {
        trial::Manifest m;
        m.campaign = "c1";
        m.knobs = {{"DATA", std::nullopt}, {"SCRIPT", std::nullopt}, {"PEEK", std::nullopt}};
        m.tasks = {std::move(t)};
        trial::write_manifest(manifest, m);
    }
};

bool has_bind(const trial::IsolationPlan& p, const fs::path& path, bool read_only) {
    for (const auto& k : p.keep)
        if (k.path == path) return k.read_only == read_only;
    return false;
}

} // namespace

TEST_CASE("the private view hides the campaign, each sibling campaign, the bank's directory and the site's "
          "roots, and binds back the trial directory, its sandbox and manifest read-only") {
    Layout l;
    l.write(l.task);
    const auto plan = trial::isolation_plan(l.manifest, l.task, l.site());
    REQUIRE(plan);
    CHECK(plan->campaign == l.mine);
    // The campaigns' parent itself stays visible, with the user's data and scripts in it.
    CHECK(plan->hide == std::vector<fs::path>{l.bankdir, l.mine, l.other, l.spool});
    CHECK(plan->hide_files.empty());
    CHECK(plan->keep.size() == 3);
    CHECK(has_bind(*plan, l.mine / "batches/1/0", false));
    CHECK(has_bind(*plan, l.mine / "sandboxes/ab12", true));
    CHECK(has_bind(*plan, l.manifest, true));
    CHECK(plan->refused.empty());
}

TEST_CASE("what a task's command, arguments and environment name in a hidden site root is bound back "
          "read-only, a path into another campaign or the bank is not") {
    Layout l;
    const fs::path site = l.root / "site";
    fs::create_directories(site / "third/batches");
    fs::create_directories(site / "data");
    std::ofstream(site / "third/campaign.db") << "third";
    std::ofstream(site / "run.sh") << "echo run\n";
    l.task.command = {"bash", (site / "run.sh").string()};
    l.task.args = {"--data=" + (site / "data").string(), "--plain=" + l.data.string()};
    l.task.env = {{"PEEK", (l.other / "campaign.db").string()},
                  {"SCRIPT", (l.bankdir / "bank.sqlite").string()}};
    l.write(l.task);
    auto s = l.site();
    s.roots.push_back(site);
    const auto plan = trial::isolation_plan(l.manifest, l.task, s);
    REQUIRE(plan);
    CHECK(plan->hide == std::vector<fs::path>{l.bankdir, l.mine, l.other, site, l.spool});
    CHECK(has_bind(*plan, site / "data", true));
    // run.sh's directory holds a campaign: the file alone.
    CHECK(has_bind(*plan, site / "run.sh", true));
    // Nothing to bind for what no tmpfs covers.
    CHECK_FALSE(has_bind(*plan, l.data, true));
    REQUIRE(plan->refused.size() == 2);
    CHECK(plan->refused[0].find("bank/bank.sqlite: inside a campaign or the bank") != std::string::npos);
    CHECK(plan->refused[1].find("other/campaign.db: inside a campaign or the bank") != std::string::npos);
    // Nothing of the spool, whatever the task names.
    l.task.env["PEEK"] = l.spool.string();
    l.write(l.task);
    const auto again = trial::isolation_plan(l.manifest, l.task, s);
    REQUIRE(again);
    CHECK(std::find(again->refused.begin(), again->refused.end(),
                    l.spool.string() + ": inside a campaign or the bank") != again->refused.end());
    for (const auto& k : plan->keep) {
        CHECK(k.path != l.other);
        CHECK(k.path != site);
        CHECK(k.path != site / "third");
    }
}

TEST_CASE("a bank in a directory too shared to hide (the user's home) is covered file by file") {
    Layout l;
    trial::ContainmentSite s;
    s.home = l.camps;
    s.bank = {l.camps / "bank.sqlite"};
    std::ofstream(l.camps / "bank.sqlite") << "bank";
    std::ofstream(l.camps / "bank.sqlite-wal") << "wal";
    l.write(l.task);
    const auto plan = trial::isolation_plan(l.manifest, l.task, s);
    REQUIRE(plan);
    CHECK(plan->hide == std::vector<fs::path>{l.mine, l.other});
    CHECK(plan->hide_files == std::vector<fs::path>{l.camps / "bank.sqlite", l.camps / "bank.sqlite-wal"});
    CHECK(has_bind(*plan, l.mine / "batches/1/0", false));
}

TEST_CASE("a manifest outside a campaign has no plan, the bank files follow the bank's own rule") {
    TempDir tmp;
    fs::create_directories(tmp.path / "x");
    trial::ManifestTask t;
    t.trial_id = "1";
    t.result = (tmp.path / "x/0/result.json").string();
    trial::Manifest m;
    m.campaign = "c1";
    m.tasks = {t};
    trial::write_manifest(tmp.path / "x/manifest.json", m);
    CHECK_FALSE(trial::isolation_plan(tmp.path / "x/manifest.json", t));
    auto env = [](const char* n) -> std::string {
        if (std::string(n) == "INFRARSI_BANK") return "/site/bank.sqlite";
        if (std::string(n) == "XDG_DATA_HOME") return "/home/u/.data";
        return "";
    };
    CHECK(trial::bank_files(env, "/home/u") ==
          std::vector<fs::path>{"/site/bank.sqlite", "/home/u/.data/infrarsi/bank.sqlite",
                                "/home/u/.local/share/infrarsi/bank.sqlite"});
    CHECK(trial::bank_files([](const char* n) { return std::string(n) == "INFRARSI_BANK" ? "off" : ""; }, "")
              .empty());
}

// Runs `isolate` in a child (as `uid` when given: the way slurmstepd runs a task, switched from root, not
// dumpable) that then tries what a hostile workload would; returns what it could do, one word a line.
std::string attack_in_view(const Layout& l, const trial::IsolationPlan& plan, std::optional<uid_t> uid) {
    int pipefd[2];
    REQUIRE(::pipe(pipefd) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(pipefd[0]);
        // The working directory the step started in: the batch directory, hidden.
        if (::chdir((l.mine / "batches/1").c_str()) != 0) ::_exit(2);
        if (uid && (::setgroups(0, nullptr) != 0 || ::setresgid(*uid, *uid, *uid) != 0 ||
                    ::setresuid(*uid, *uid, *uid) != 0))
            ::_exit(3);
        const auto iso = trial::isolate(plan);
        std::string report = iso.in_place ? "IN_PLACE\n" : "NOT " + iso.detail + "\n";
        auto seen = [&](const fs::path& p) {
            std::error_code ec;
            if (fs::exists(p, ec)) report += "SEEN " + p.string() + "\n";
        };
        seen(l.mine / "campaign.db");
        seen(l.mine / "batches/0/0/log.txt");
        seen(l.other / "campaign.db");
        seen(l.bankdir / "bank.sqlite");
        seen("../0/0/log.txt"); // relative to the old working directory
        seen("../../campaign.db");
        for (const auto& f :
             {l.other / "planted", l.bankdir / "planted", l.mine / "planted", l.spool / "planted"})
            if (std::ofstream(f) << "x") report += "WROTE " + f.string() + "\n";
        // Beside the campaigns, the user's own files stay as they are.
        if (std::ifstream(l.data / "tokens.bin").good()) report += "DATA\n";
        if (std::ofstream(l.mine / "batches/1/0/mine.txt") << "ok") report += "OWN\n";
        if (std::ofstream(l.mine / "sandboxes/ab12/planted") << "x") report += "WROTE sandbox\n";
        if (trial::private_view()) report += "VIEW\n";
        (void)!::write(pipefd[1], report.data(), report.size());
        ::_exit(0);
    }
    ::close(pipefd[1]);
    std::string report;
    char buf[4096];
    for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;)
        report.append(buf, static_cast<std::size_t>(n));
    ::close(pipefd[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    return report;
}

void check_contained(const Layout& l, const std::string& report) {
    INFO("child: " << report);
    CHECK(report.find("IN_PLACE") != std::string::npos);
    CHECK(report.find("SEEN") == std::string::npos);
    CHECK(report.find("WROTE") == std::string::npos);
    CHECK(report.find("OWN") != std::string::npos);
    CHECK(report.find("DATA") != std::string::npos);
    CHECK(report.find("VIEW") != std::string::npos);
    // Outside, nothing was planted and the trial's own file is there.
    for (const auto& f :
         {l.other / "planted", l.bankdir / "planted", l.mine / "planted", l.spool / "planted"})
        CHECK_FALSE(fs::exists(f));
    CHECK(test::read_file(l.mine / "batches/1/0/mine.txt") == "ok");
    CHECK_FALSE(trial::private_view()); // the test process itself is not in it
}

TEST_CASE("inside the private view a trial cannot list its campaign, write a sibling campaign, the bank or "
          "the spool, nor escape through its old working directory, it writes its own directory") {
    Layout l;
    l.write(l.task);
    const auto plan = trial::isolation_plan(l.manifest, l.task, l.site());
    REQUIRE(plan);
    const std::string report = attack_in_view(l, *plan, std::nullopt);
    if (report.rfind("NOT ", 0) == 0) {
        // Only where the kernel refuses a mount namespace: said so.
        CHECK(report.find("unshare") != std::string::npos);
        return;
    }
    check_contained(l, report);
}

TEST_CASE("a task switched from root to its user, as slurmstepd starts it, enters the view in a user "
          "namespace of its own") {
    if (::geteuid() != 0) return; // needs root to become another user
    Layout l;
    l.write(l.task);
    const auto plan = trial::isolation_plan(l.manifest, l.task, l.site());
    REQUIRE(plan);
    const uid_t nobody = 65534;
    fs::permissions(l.tmp.path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                    fs::perms::others_read | fs::perms::others_exec);
    REQUIRE(::chown((l.mine / "batches/1/0").c_str(), nobody, nobody) == 0);
    const std::string report = attack_in_view(l, *plan, nobody);
    INFO("child: " << report);
    if (report.rfind("NOT ", 0) == 0) {
        // A kernel without unprivileged user namespaces: the plugin refuses such a trial (exit 98).
        CHECK(report.find("unshare(CLONE_NEWUSER") != std::string::npos);
        return;
    }
    check_contained(l, report);
}
