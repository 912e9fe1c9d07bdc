#include "trial/nccl_log.hpp"

#include "util/text.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

namespace infrarsi::trial {
namespace {

using sv = std::string_view;

bool starts(sv s, sv prefix) {
    return s.substr(0, prefix.size()) == prefix;
}
bool has(sv s, sv part) {
    return s.find(part) != sv::npos;
}
// A phrase of NCCL's: without the blanks around it and its sentence's final dots.
sv phrase(sv s) {
    return trim_right(trim_left(s, " \t"), " \t\r.");
}

// What is kept of the job's text: NCCL writes ASCII; any other byte (a control character, a byte of another
// encoding) becomes '?', so a kept string is printable and valid UTF-8 wherever it is recorded.
std::string kept(sv s) {
    std::string out(s);
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    return out;
}

NcclLine evidence(std::size_t line_no, sv line) {
    return {line_no, kept(phrase(line.substr(0, kMaxNcclEvidenceBytes)))};
}

// Evidence lines kept of each kind: the first few say it; a job printing the same line per rank and channel
// must not grow the record without bound.
constexpr std::size_t kMaxKeptLines = 16;
void note(std::vector<NcclLine>& lines, std::size_t line_no, sv line) {
    if (lines.size() < kMaxKeptLines) lines.push_back(evidence(line_no, line));
}

// "2.19.3" of "NCCL version 2.19.3+cuda12.3".
std::string version_of(sv line) {
    const auto at = line.find("NCCL version ");
    if (at == sv::npos) return {};
    sv v = line.substr(at + 13);
    std::size_t n = 0;
    while (n < v.size() && (std::isdigit(static_cast<unsigned char>(v[n])) || v[n] == '.'))
        ++n;
    return kept(v.substr(0, std::min<std::size_t>(n, 32)));
}

// The transport class of a channel's "via ..." text.
std::string transport_of(sv via) {
    if (starts(via, "P2P")) return "P2P";
    if (starts(via, "SHM") || starts(via, "direct shared memory")) return "SHM";
    if (starts(via, "NET/")) {
        sv rest = via.substr(4);
        const auto slash = rest.find('/');
        return "NET/" + kept(phrase(rest.substr(0, std::min<std::size_t>(slash, 64))));
    }
    if (starts(via, "CollNet")) return "CollNet";
    const auto end = via.find_first_of(" /");
    return kept(via.substr(0, std::min<std::size_t>(end, 64)));
}

// The dlerror of a plugin load names the library that could not be opened first: the plugin itself (not
// installed: NCCL goes on with its own transports, as it should) or another one (the plugin is there and a
// library it needs is not).
bool names_the_plugin_itself(sv error) {
    error = phrase(error);
    if (starts(error, "dlerror=")) error.remove_prefix(8);
    return starts(error, "libnccl-net") && has(error, "cannot open shared object file");
}

void read_plugin_message(NcclLog& log, sv body, std::size_t line_no, sv line, std::vector<NcclLine>& absent) {
    if (starts(body, "Failed to find ncclNetPlugin")) {
        note(log.plugin_failures, line_no, line);
    } else if (starts(body, "Failed to find ncclCollNetPlugin")) {
        // CollNet (SHARP) is optional: a plugin without it serves point-to-point traffic all the same.
    } else if (starts(body, "Loaded net plugin") || starts(body, "Loaded collnet plugin")) {
        log.plugin_loaded = true;
    } else if (starts(body, "Plugin load")) {
        // "Plugin load (libnccl-net.so) returned 2 : <dlerror>", "Plugin load returned 2 : <dlerror> : when
        // loading libnccl-net.so"
        const auto colon = body.find(" : ");
        const sv error = colon == sv::npos ? sv{} : body.substr(colon + 3);
        if (names_the_plugin_itself(error))
            note(absent, line_no, line);
        else
            note(log.plugin_failures, line_no, line);
    } else if (starts(body, "dlerror=")) {
        if (names_the_plugin_itself(body))
            note(absent, line_no, line);
        else
            note(log.plugin_failures, line_no, line);
    } else if (starts(body, "No plugin found") || starts(body, "Could not find:")) {
        note(absent, line_no, line);
    } else if (starts(body, "libnccl-net") && has(body, ": ")) {
        // 2.23+: "NET/Plugin: libnccl-net-x.so: <dlerror>", printed only when the error is not "no such
        // file" for the plugin itself.
        note(log.plugin_failures, line_no, line);
    }
}

} // namespace

std::size_t NcclLog::net_channels() const {
    std::size_t n = 0;
    for (const auto& [transport, count] : channels)
        if (starts(transport, "NET/") || transport == "CollNet") n += count;
    return n;
}

NcclLog read_nccl_log(std::string_view output) {
    NcclLog log;
    std::vector<NcclLine> absent; // "no plugin" lines: a failure only where NCCL_NET_PLUGIN asked for one
    std::size_t line_no = 0;
    std::size_t pos = 0;
    while (pos <= output.size()) {
        auto end = output.find('\n', pos);
        if (end == sv::npos) end = output.size();
        const sv line = output.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (line.empty()) {
            if (end == output.size()) break;
            continue;
        }
        if (log.version.empty() && has(line, "NCCL version ")) log.version = version_of(line);
        if (has(line, "Failed to open libibverbs")) log.ib_absent = true;
        const auto at = line.find("NCCL INFO ");
        if (at == sv::npos) {
            if (end == output.size()) break;
            continue;
        }
        ++log.info_lines;
        const sv m = phrase(line.substr(at + 10));
        if (starts(m, "Using network ")) {
            const std::string net = kept(phrase(m.substr(14, 64)));
            log.networks.insert(net);
            if (net == "Socket" && log.socket_choice.line_no == 0)
                log.socket_choice = evidence(line_no, line);
        } else if (starts(m, "Assigned NET plugin ")) {
            sv name = m.substr(20);
            const auto to = name.find(" to comm");
            const std::string net = kept(phrase(name.substr(0, std::min<std::size_t>(to, 64))));
            log.networks.insert(net);
            if (net == "Socket" && log.socket_choice.line_no == 0)
                log.socket_choice = evidence(line_no, line);
        } else if (starts(m, "NET/IB") && has(m, "No device found")) {
            log.ib_absent = true;
        } else if (starts(m, "NET/IB") && has(m, "Using ")) {
            sv list = m.substr(m.find("Using ") + 6);
            list = list.substr(0, list.find(';'));
            std::size_t i = 0;
            while (i < list.size()) {
                const auto open = list.find('[', i);
                if (open == sv::npos) break;
                const auto close = list.find(']', open);
                if (close == sv::npos) break;
                auto stop = list.find_first_of(" [", close + 1);
                const sv dev = phrase(list.substr(close + 1, stop == sv::npos ? sv::npos : stop - close - 1));
                if (!dev.empty() && has(dev, ":") && log.ib_devices.size() < 64 &&
                    std::find(log.ib_devices.begin(), log.ib_devices.end(), kept(dev)) ==
                        log.ib_devices.end())
                    log.ib_devices.push_back(kept(dev.substr(0, 64)));
                i = stop == sv::npos ? list.size() : stop;
            }
        } else if (starts(m, "NET/Plugin")) {
            sv body = m.substr(10);
            while (!body.empty() && (body.front() == ' ' || body.front() == ':'))
                body.remove_prefix(1);
            read_plugin_message(log, body, line_no, line, absent);
        } else if (starts(m, "Successfully loaded external network plugin") || starts(m, "NET/OFI Using") ||
                   starts(m, "NET/OFI Selected Provider")) {
            log.plugin_loaded = true;
        } else if (starts(m, "External network plugin") && has(m, "is unsupported")) {
            note(log.plugin_failures, line_no, line);
        } else if (starts(m, "Failed to initialize NET plugin ")) {
            const sv name = phrase(m.substr(32));
            if (name != "IB" && name != "Socket") note(log.plugin_failures, line_no, line);
        } else if (starts(m, "NCCL_") && has(m, " set by environment to ")) {
            const auto s = m.find(" set by environment to ");
            if (log.environment.size() < 256)
                log.environment[kept(m.substr(0, std::min<std::size_t>(s, 64)))] =
                    kept(phrase(m.substr(s + 23, 256)));
        } else if ((starts(m, "Channel ") || starts(m, "Ring ")) && has(m, " via ")) {
            const std::string t = transport_of(m.substr(m.find(" via ") + 5));
            if (log.channels.count(t) || log.channels.size() < 64) ++log.channels[t];
            if (t == "NET/Socket" && log.first_socket_channel.line_no == 0)
                log.first_socket_channel = evidence(line_no, line);
            if (t == "SHM" && log.first_shm_channel.line_no == 0)
                log.first_shm_channel = evidence(line_no, line);
        }
        if (end == output.size()) break;
    }
    // A plugin asked for by name (NCCL_NET_PLUGIN, not "none") that NCCL did not find failed to load.
    if (const auto it = log.environment.find("NCCL_NET_PLUGIN");
        it != log.environment.end() && it->second != "none" && !it->second.empty() && !log.plugin_loaded)
        for (auto& l : absent)
            if (log.plugin_failures.size() < kMaxKeptLines) log.plugin_failures.push_back(std::move(l));
    return log;
}

nlohmann::json to_json(const NcclLog& log) {
    auto line = [](const NcclLine& l) {
        return l.line_no ? nlohmann::json{{"line", l.line_no}, {"text", l.text}} : nlohmann::json();
    };
    nlohmann::json failures = nlohmann::json::array();
    for (const auto& f : log.plugin_failures)
        failures.push_back(line(f));
    return {{"info_lines", log.info_lines},
            {"version", log.version},
            {"networks", log.networks},
            {"ib_devices", log.ib_devices},
            {"ib_absent", log.ib_absent},
            {"plugin_loaded", log.plugin_loaded},
            {"plugin_failures", failures},
            {"environment", log.environment},
            {"channels", log.channels},
            {"first_socket_channel", line(log.first_socket_channel)},
            {"first_shm_channel", line(log.first_shm_channel)},
            {"socket_choice", line(log.socket_choice)}};
}

} // namespace infrarsi::trial
