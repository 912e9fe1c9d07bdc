#include "report/campaign_list.hpp"

#include "campaign/campaign.hpp"
#include "campaign/campaign_lock.hpp"
#include "report/format.hpp"
#include "report/report.hpp"
#include "util/error.hpp"
#include "util/privilege.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <system_error>
#include <unistd.h>

namespace infrarsi::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_campaign(const fs::path& d) {
    std::error_code ec;
    return fs::is_regular_file(d / "campaign.db", ec) && !fs::is_symlink(d / "campaign.db", ec);
}

// The campaign directories at depth 0, 1 and 2 under `root`, in path order; links are not followed.
std::vector<fs::path> campaign_dirs(const fs::path& root) {
    std::vector<fs::path> out;
    if (is_campaign(root)) out.push_back(root);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec)) {
        if (!e.is_directory(ec) || e.is_symlink(ec)) continue;
        if (is_campaign(e.path())) {
            out.push_back(e.path());
            continue;
        }
        std::error_code ec2;
        for (const auto& f : fs::directory_iterator(e.path(), ec2))
            if (f.is_directory(ec2) && !f.is_symlink(ec2) && is_campaign(f.path())) out.push_back(f.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

json describe(const fs::path& d) {
    json e = {{"dir", d.string()}};
    if (::geteuid() == 0) {
        const auto pc = path_control(d);
        if (!pc.root_only()) {
            e["state"] = "not opened";
            e["why"] =
                pc.why.empty() ? fmt::format("uid {} controls it: list it as that user", pc.uid) : pc.why;
            return e;
        }
    }
    try {
        campaign::Campaign c(d, campaign::Campaign::Open::read_only);
        const auto st = status(c);
        e["campaign"] = st["campaign"];
        e["state"] = st["state"];
        e["trials"] = st["trials"];
        e["promotions"] = st["promotions"];
        double best = 0;
        for (const auto& v : c.store().verifications())
            if (v.promoted && v.speedup) best = std::max(best, *v.speedup);
        if (best > 0)
            e["best"] = {{"speedup", best}, {"verified", true}};
        else if (st.contains("best") && st["best"].contains("speedup_vs_baseline"))
            e["best"] = {{"speedup", st["best"]["speedup_vs_baseline"]}, {"verified", false}};
        std::string holder;
        e["driven_by"] = campaign::CampaignLock::try_take(d, &holder) ? json(nullptr) : json(holder);
    } catch (const Error& err) {
        e["state"] = "unreadable";
        e["why"] = err.what();
    }
    return e;
}

} // namespace

json list_campaigns(const fs::path& root) {
    std::error_code ec;
    if (!fs::is_directory(root, ec))
        throw Error("not a directory", root.string(), "a directory holding campaigns (infrarsid's --root)");
    json list = json::array();
    for (const auto& d : campaign_dirs(root))
        list.push_back(describe(d));
    return {{"format", format_json(kListFormat)}, {"root", root.string()}, {"campaigns", list}};
}

std::string render_list(const json& j) {
    std::string out;
    const auto& list = j["campaigns"];
    if (list.empty()) return fmt::format("no campaign under {}\n", j["root"].get<std::string>());
    for (const auto& e : list) {
        std::string line = fmt::format("{}  {}", e["dir"].get<std::string>(), e["state"].get<std::string>());
        if (e.contains("trials"))
            line += fmt::format("  trials {}/{}", e["trials"]["used"].get<int>(),
                                e["trials"]["budget"].get<int>());
        if (e.contains("best"))
            line += fmt::format("  best {:.3f}x ({})", e["best"]["speedup"].get<double>(),
                                e["best"]["verified"].get<bool>() ? "verified" : "search, unverified");
        if (e.contains("driven_by") && !e["driven_by"].is_null())
            line += "  driven by " + e["driven_by"].get<std::string>();
        if (e.contains("why")) line += "  (" + e["why"].get<std::string>() + ")";
        out += line + "\n";
    }
    return out;
}

} // namespace infrarsi::report
