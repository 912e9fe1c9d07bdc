#include "report/bank_report.hpp"

#include "report/format.hpp"
#include "space/space.hpp"

#include <fmt/core.h>

namespace infrarsi::report {

nlohmann::json describe_bank(bank::ExperienceBank& b, const bank::HardwareKey& here) {
    nlohmann::json out = {
        {"format", format_json(kBankFormat)}, {"bank", b.db().path()}, {"hardware", nlohmann::json::array()}};
    auto findings_of = [&](std::int64_t hw_id) {
        nlohmann::json list = nlohmann::json::array();
        store::Statement s(b.db(),
                           "SELECT uid, workload, kind, verified, content, campaign, origin, created "
                           "FROM findings WHERE hardware_id = ? ORDER BY verified DESC, created DESC");
        s.bind(1, hw_id);
        while (s.step())
            list.push_back({{"uid", s.text(0).substr(0, 12)},
                            {"workload", s.text(1)},
                            {"kind", s.text(2)},
                            {"verified", s.integer(3) != 0},
                            {"content", nlohmann::json::parse(s.text(4))},
                            {"campaign", s.text(5)},
                            {"origin", s.text(6)},
                            {"created", s.real(7)}});
        return list;
    };
    for (const auto& h : b.hardware(here)) {
        const auto& t = h.key.topology;
        out["hardware"].push_back(
            {{"fingerprint", h.fingerprint},
             {"similarity", h.similarity},
             {"seen", h.similarity >= bank::kSeenHardwareSimilarity},
             {"summary", fmt::format("{} packages, {} cores, {} PUs, {} NUMA, {:.1f} GiB, {} GPUs, {} NICs",
                                     t.packages, t.cores, t.pus, t.numa_nodes, t.memory_bytes / 1073741824.0,
                                     t.gpus.size(), t.nics.size())},
             {"stack", bank::to_json(h.key)["stack"]},
             {"nodes", h.nodes},
             {"noise_records", h.noise_records},
             {"findings", findings_of(h.id)}});
    }
    return out;
}

std::string render_bank(const nlohmann::json& j) {
    std::string s = fmt::format("experience bank {}\n", j["bank"].get<std::string>());
    if (j["hardware"].empty()) return s + "  empty: campaigns add their findings when they finish\n";
    for (const auto& h : j["hardware"]) {
        s += fmt::format("\nhardware {} (similarity to this machine {:.2f}{}): {}\n",
                         h["fingerprint"].get<std::string>(), h["similarity"].get<double>(),
                         h["seen"].get<bool>() ? "" : ", unseen", h["summary"].get<std::string>());
        s += fmt::format("  stack: {}; nodes: {}; noise records: {}\n", h["stack"].dump(), h["nodes"].dump(),
                         h["noise_records"].get<int>());
        for (const auto& f : h["findings"]) {
            auto c = f["content"];
            std::string what;
            if (f["kind"] == "knob_setting") {
                what = fmt::format("{} -> {:.3f}x (lower bound {:.3f}x)",
                                   c.contains("candidate")
                                       ? space::Candidate::from_json(c["candidate"]).describe()
                                       : c.value("knobs", nlohmann::json()).dump(),
                                   c.value("speedup", 0.0), c.value("lo", 0.0));
                if (c.contains("memory_ratio") && c.contains("limit_bytes"))
                    what +=
                        fmt::format(", peak {:.2f} of a {:.0f} MiB limit", c["memory_ratio"].get<double>(),
                                    c["limit_bytes"].get<double>() / 1048576);
            } else
                what = c.dump();
            s += fmt::format("  {} {:<17} {:<22} {} [{} from {}]\n",
                             f["verified"].get<bool>() ? "prior   " : "evidence",
                             f["kind"].get<std::string>(), f["workload"].get<std::string>(), what,
                             f["campaign"].get<std::string>(), f["origin"].get<std::string>());
        }
    }
    return s;
}

} // namespace infrarsi::report
