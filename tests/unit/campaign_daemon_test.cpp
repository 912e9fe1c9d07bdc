// The daemon drives every campaign of a user: a bug met by one of them (an exception that is not an
// infrarsi::Error) stops that campaign, logged, and never the daemon or the others.
#include "campaign/campaign_lock.hpp"
#include "campaign/daemon.hpp"
#include "util/error.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace infrarsi;
using namespace std::chrono_literals;

namespace {
struct TempDir {
    fs::path path;
    TempDir() {
        std::string t = (fs::temp_directory_path() / "infrarsi-daemon-XXXXXX").string();
        path = ::mkdtemp(t.data());
    }
    ~TempDir() { fs::remove_all(path); }
};
} // namespace

TEST_CASE("an unexpected exception in one campaign marks it failed while the daemon finishes the others") {
    TempDir d;
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", d.path / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", d.path / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", d.path / "toyload.contract.toml");
    campaign::Campaign::init(d.path / "toyload.contract.toml", d.path / "root" / "bad");
    campaign::Campaign::init(d.path / "toyload.contract.toml", d.path / "root" / "good");
    {
        // Internal state that is not JSON: reading it throws nlohmann's parse_error, not an infrarsi::Error.
        campaign::Campaign bad(d.path / "root" / "bad");
        bad.store().set_meta("requeue", "{not json");
    }
    campaign::DaemonOptions o;
    o.root = d.path / "root";
    o.once = true;
    o.idle = 0s;
    o.run.verbose = false;
    o.run.scheduler = "local";
    o.run.poll = 50ms;
    std::atomic<bool> stop{false};
    CHECK(campaign::run_daemon(o, stop) == 1);
    campaign::Campaign good(d.path / "root" / "good");
    CHECK(good.finished());
    campaign::Campaign bad(d.path / "root" / "bad");
    CHECK_FALSE(bad.finished());
}

TEST_CASE("a campaign lock is exclusive, names its holder, and is free again once released") {
    TempDir d;
    std::optional<campaign::CampaignLock> first;
    first.emplace(d.path);
    // flock conflicts between open files, in one process as between two: a second `infrarsi run`.
    const std::string says = "in use by pid " + std::to_string(::getpid());
    CHECK_THROWS_WITH_AS(campaign::CampaignLock{d.path}, doctest::Contains(says.c_str()), Error);
    std::string holder;
    CHECK_FALSE(campaign::CampaignLock::try_take(d.path, &holder).has_value());
    CHECK(holder == "pid " + std::to_string(::getpid()));
    first.reset();
    CHECK(campaign::CampaignLock::try_take(d.path, &holder).has_value());
}

TEST_CASE("the daemon skips a campaign another process drives") {
    TempDir d;
    const fs::path fx = INFRARSI_FIXTURES;
    fs::copy(fx / "toyload", d.path / "toyload", fs::copy_options::recursive);
    fs::copy(fx / "toyload-patches", d.path / "toyload-patches", fs::copy_options::recursive);
    fs::copy_file(fx / "toyload.contract.toml", d.path / "toyload.contract.toml");
    campaign::Campaign::init(d.path / "toyload.contract.toml", d.path / "root" / "busy");
    campaign::CampaignLock held(d.path / "root" / "busy");
    campaign::DaemonOptions o;
    o.root = d.path / "root";
    o.once = true;
    o.idle = 0s;
    o.run.verbose = false;
    o.run.scheduler = "local";
    std::atomic<bool> stop{false};
    CHECK(campaign::run_daemon(o, stop) == 0);
    campaign::Campaign busy(d.path / "root" / "busy");
    CHECK(busy.store().trials({}).empty()); // nothing submitted beside the holder
}
