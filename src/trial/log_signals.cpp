#include "trial/log_signals.hpp"

#include "util/error.hpp"
#include "util/text.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>
#include <utility>

namespace infrarsi::trial {

LogSignal parse_log_signal(std::string_view name) {
    if (auto s = log_signal_names.parse(name)) return *s;
    throw Error(fmt::format("unknown log signal '{}'", name), "log signal", log_signal_names.list());
}

namespace {

using sv = std::string_view;

constexpr double kEiB = 1152921504606846976.0; // 2^60: no allocation request is larger
constexpr double kAbsurdCapacityFactor = 1024; // nor 1024x the device it asks of
constexpr std::size_t kMaxReasonBytes = 400;

bool has(sv s, sv needle) {
    return s.find(needle) != sv::npos;
}
bool starts(sv s, sv prefix) {
    return s.substr(0, prefix.size()) == prefix;
}
bool ends(sv s, sv suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool digit(char c) {
    return c >= '0' && c <= '9';
}
bool upper(char c) {
    return c >= 'A' && c <= 'Z';
}
bool alpha(char c) {
    return upper(c) || (c >= 'a' && c <= 'z');
}
bool ident(char c) {
    return alpha(c) || digit(c) || c == '_';
}
// A log line's blanks: spaces and tabs (a carriage return stays, as the line has it).
sv ltrim(sv s) {
    return trim_left(s, " \t");
}
sv rtrim(sv s) {
    return trim_right(s, " \t");
}

// "[rank3]:" / "[default3]:" (torchrun), then one optional space.
bool strip_rank_tag(sv& s) {
    if (s.empty() || s[0] != '[') return false;
    for (sv tag : {sv("rank"), sv("default")}) {
        if (!starts(s.substr(1), tag)) continue;
        std::size_t i = 1 + tag.size(), j = i;
        while (j < s.size() && digit(s[j]))
            ++j;
        if (j == i || j + 1 >= s.size() || s[j] != ']' || s[j + 1] != ':') return false;
        s.remove_prefix(j + 2);
        if (!s.empty() && s[0] == ' ') s.remove_prefix(1);
        return true;
    }
    return false;
}

// srun --label's "3: " (padded with spaces to the widest task id).
bool strip_task_label(sv& s) {
    std::size_t i = 0;
    while (i < s.size() && s[i] == ' ')
        ++i;
    std::size_t j = i;
    while (j < s.size() && digit(s[j]))
        ++j;
    if (j == i || j - i > 6 || j + 1 >= s.size() || s[j] != ':' || s[j + 1] != ' ') return false;
    s.remove_prefix(j + 2);
    return true;
}

// Leading ANSI CSI sequences ("\x1b[31m").
bool strip_ansi(sv& s) {
    bool any = false;
    while (s.size() >= 2 && s[0] == '\x1b' && s[1] == '[') {
        std::size_t i = 2;
        while (i < s.size() && !(s[i] >= 0x40 && s[i] <= 0x7e))
            ++i;
        s.remove_prefix(i < s.size() ? i + 1 : s.size());
        any = true;
    }
    return any;
}

// The line as its writer wrote it: the launchers' and Slurm's prefixes set aside.
sv strip_prefixes(sv s) {
    for (int round = 0; round < 4; ++round) {
        bool any = strip_ansi(s);
        any = strip_rank_tag(s) || any;
        if (starts(s, "stderr: ") || starts(s, "stdout: ")) {
            s.remove_prefix(8);
            any = true;
        }
        any = strip_task_label(s) || any;
        if (!any) break;
    }
    return s;
}

// A Python exception line: "pkg.mod.SomeError: message", or the bare name. `last` is the class name.
struct ExceptionLine {
    bool ok = false;
    sv last;
    sv message;
};

ExceptionLine exception_line(sv content) {
    ExceptionLine e;
    if (content.empty() || !(alpha(content[0]) || content[0] == '_')) return e;
    std::size_t i = 0;
    while (i < content.size() && (ident(content[i]) || content[i] == '.'))
        ++i;
    const sv name = content.substr(0, i);
    if (name.back() == '.') return e;
    const sv rest = rtrim(content.substr(i));
    if (!rest.empty()) {
        if (rest[0] != ':' || (rest.size() > 1 && rest[1] != ' ')) return e;
        e.message = ltrim(rest.substr(1));
    }
    const std::size_t dot = name.rfind('.');
    const sv last = dot == sv::npos ? name : name.substr(dot + 1);
    std::size_t k = 0;
    while (k < last.size() && last[k] == '_')
        ++k;
    if (k == last.size() || !upper(last[k])) return e;
    const bool error = ends(last, "Error") && last.size() > 5; // not a tool's bare "Error: ..."
    if (!(error || ends(last, "Exception") || last == "KeyboardInterrupt" || last == "SystemExit")) return e;
    e.ok = true;
    e.last = last;
    return e;
}

// Python's "path.py:12: SomeWarning: text", its source echo "warnings.warn(", c10's "[W... ] Warning: ...".
bool is_warning(sv line, sv content) {
    const sv body = ltrim(content);
    if (starts(body, "warnings.warn(")) return true;
    if (body.size() > 2 && body[0] == '[' && body[1] == 'W' && (digit(body[2]) || body[2] == ' '))
        return true;
    std::size_t i = 0; // "UserWarning: ..." as the line itself
    while (i < content.size() && (ident(content[i]) || content[i] == '.'))
        ++i;
    if (ends(content.substr(0, i), "Warning") && i < content.size() && content[i] == ':') return true;
    std::size_t pos = 0;
    for (int n = 0; n < 4; ++n) {
        const std::size_t w = line.find("Warning: ", pos);
        if (w == sv::npos) break;
        pos = w + 1;
        std::size_t b = w;
        while (b > 0 && ident(line[b - 1]))
            --b;
        if (b < 3 || line[b - 1] != ' ' || line[b - 2] != ':' || !digit(line[b - 3])) continue;
        std::size_t d = b - 3;
        while (d > 0 && digit(line[d - 1]))
            --d;
        if (d > 0 && line[d - 1] == ':') return true;
    }
    return false;
}

double unit_bytes(sv unit) {
    static constexpr std::array<std::pair<sv, double>, 16> units{{
        {"B", 1.0},
        {"byte", 1.0},
        {"bytes", 1.0},
        {"KiB", 1024.0},
        {"MiB", 1048576.0},
        {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0},
        {"PiB", 1125899906842624.0},
        {"EiB", kEiB},
        {"KB", 1e3},
        {"kB", 1e3},
        {"MB", 1e6},
        {"GB", 1e9},
        {"TB", 1e12},
        {"PB", 1e15},
        {"EB", 1e18},
    }};
    for (const auto& [name, bytes] : units)
        if (name == unit) return bytes;
    return 0;
}

struct Size {
    double bytes = 0;
    std::size_t end = 0; // just past the unit
};

// "2.00 GiB", "273. GiB", "1073741824 bytes" at `pos`; nullopt without digits or a known unit. Digits past
// double's range read as infinity (an absurd request, never a number to keep).
std::optional<Size> parse_size(sv s, std::size_t pos) {
    std::size_t i = pos;
    double v = 0;
    const std::size_t first = i;
    while (i < s.size() && digit(s[i]))
        v = v * 10 + (s[i++] - '0');
    if (i == first) return std::nullopt;
    if (i < s.size() && s[i] == '.') {
        double scale = 0.1;
        for (++i; i < s.size() && digit(s[i]); ++i, scale /= 10)
            v += (s[i] - '0') * scale;
    }
    if (i < s.size() && s[i] == ' ') ++i;
    const std::size_t u = i;
    while (i < s.size() && alpha(s[i]))
        ++i;
    const double unit = unit_bytes(s.substr(u, i - u));
    if (unit == 0) return std::nullopt;
    return Size{v * unit, i};
}

// A size followed by `then`, at `pos`.
std::optional<double> size_then(sv s, std::size_t pos, sv then) {
    auto z = parse_size(s, pos);
    if (!z || !starts(s.substr(z->end), then)) return std::nullopt;
    return z->bytes;
}

// A small non-negative integer at `pos`, and where it ends.
std::optional<std::pair<int, std::size_t>> parse_index(sv s, std::size_t pos) {
    std::size_t i = pos;
    int v = 0;
    while (i < s.size() && digit(s[i]) && i - pos < 6)
        v = v * 10 + (s[i++] - '0');
    if (i == pos || (i < s.size() && digit(s[i]))) return std::nullopt;
    return std::pair{v, i};
}

// The caching allocator's numbers, from either format.
void gpu_numbers(sv l, SignalLine& r) {
    if (const auto p = l.find("Tried to allocate "); p != sv::npos) {
        if (starts(l.substr(p + 18), "more than "))
            r.absurd = true; // "more than 1EB memory"
        else if (auto z = parse_size(l, p + 18))
            r.requested_bytes = z->bytes;
    }
    // 2.1+: "GPU 0 has a total capacity of 79.15 GiB of which ... Of the allocated memory 75.10 GiB is
    // allocated by PyTorch"
    for (std::size_t p = l.find("GPU "); p != sv::npos && !r.gpu; p = l.find("GPU ", p + 1))
        if (auto n = parse_index(l, p + 4); n && starts(l.substr(n->second), " has a total capac"))
            r.gpu = n->first;
    for (sv key : {sv("total capacity of "), sv("total capacty of ")})
        if (const auto p = l.find(key); p != sv::npos && !r.capacity_bytes)
            if (auto z = parse_size(l, p + key.size())) r.capacity_bytes = z->bytes;
    if (const auto p = l.find("Of the allocated memory "); p != sv::npos)
        r.allocated_bytes = size_then(l, p + 24, " is allocated by PyTorch");
    // 1.x: "(GPU 0; 15.78 GiB total capacity; 14.56 GiB already allocated; ..."
    if (const auto p = l.find("(GPU "); p != sv::npos) {
        auto n = parse_index(l, p + 5);
        if (n && starts(l.substr(n->second), "; ")) {
            if (!r.gpu) r.gpu = n->first;
            auto cap = parse_size(l, n->second + 2);
            if (cap && starts(l.substr(cap->end), " total capacity; ")) {
                if (!r.capacity_bytes) r.capacity_bytes = cap->bytes;
                const std::size_t a = cap->end + 17;
                if (auto alloc = size_then(l, a, " already allocated"); alloc && !r.allocated_bytes)
                    r.allocated_bytes = alloc;
            }
        }
    }
}

void host_numbers(sv l, SignalLine& r) {
    for (sv key : {sv("you tried to allocate "), sv("Unable to allocate ")})
        if (const auto p = l.find(key); p != sv::npos && !r.requested_bytes)
            if (auto z = parse_size(l, p + key.size())) r.requested_bytes = z->bytes;
}

bool is_gpu_oom(sv l, const ExceptionLine& e) {
    return has(l, "out of memory. Tried to allocate ") || has(l, "CUDA error: out of memory") ||
           has(l, "cuda runtime error (2) : out of memory") ||
           (has(l, "Cuda failure ") && has(l, "'out of memory'")) || has(l, "CUBLAS_STATUS_ALLOC_FAILED") ||
           (e.ok && (e.last == "OutOfMemoryError" || starts(e.message, "CUDA out of memory")));
}

bool is_slurm_oom(sv l, sv body) {
    // Only slurmstepd's own line (a workload printing the words is not Slurm's report).
    if ((has(l, "oom-kill event") || has(l, "oom_kill event")) && has(l, "Detected ") && has(l, "slurmstepd"))
        return true;
    if (has(l, "slurmstepd") && (has(l, "xceeded job memory limit") || has(l, "xceeded step memory limit") ||
                                 has(l, "exceeded memory limit")))
        return true;
    return starts(body, "srun: error: ") && has(l, ": Out Of Memory");
}

bool is_host_oom(sv l, const ExceptionLine& e) {
    return (has(l, "DefaultCPUAllocator: ") &&
            (has(l, "can't allocate memory") || has(l, "not enough memory"))) ||
           has(l, "std::bad_alloc") || (e.ok && ends(e.last, "MemoryError") && e.last != "OutOfMemoryError");
}

// A line from the distributed machinery, where "reset by peer" and "Broken pipe" mean another rank.
bool distributed(sv l) {
    for (sv k : {sv("gloo"), sv("Gloo"), sv("NCCL"), sv("nccl"), sv("c10d"), sv("TCPStore"),
                 sv("ProcessGroup"), sv("DistBackendError"), sv("DistNetworkError"), sv("DistStoreError")})
        if (has(l, k)) return true;
    return false;
}

bool is_peer_failure(sv l) {
    return has(l, "Connection closed by peer") || has(l, "closed by remote peer") ||
           has(l, "remote process exited or there was a network error") || has(l, "ncclRemoteError") ||
           has(l, "Failed to recv, got 0 bytes") || has(l, "RendezvousClosedError") ||
           ((has(l, "Connection reset by peer") || has(l, "Broken pipe")) && distributed(l));
}

bool is_nccl_timeout(sv l) {
    for (sv k : {sv("Watchdog caught collective operation timeout"),
                 sv("Some NCCL operations have failed or timed out"), sv("Timeout at NCCL work"),
                 sv("detected by watchdog"), sv("Heartbeat monitor timed out"), sv("watchdog got stuck"),
                 sv("NCCL communicator was aborted"), sv("Gloo connectFullMesh failed"), sv("DistStoreError"),
                 sv("DistNetworkError"), sv("RendezvousTimeoutError"), sv("RendezvousConnectionError")})
        if (has(l, k)) return true;
    return has(l, "Timed out waiting ") && has(l, "operation to complete");
}

bool is_launcher_crash(sv l, sv body, const ExceptionLine& e) {
    if (has(l, "ChildFailedError") || (has(l, "failed (exitcode: ") && has(l, "local_rank")) ||
        has(l, "mpirun noticed that process rank") || has(l, "SignalException: Process ") ||
        (has(l, "sigkill_handler") && has(l, "exits with return code")))
        return true;
    if (starts(body, "srun: error: ") && has(l, ": task")) return true;
    if (e.ok && (e.last == "ProcessRaisedException" || e.last == "ProcessExitedException")) return true;
    return has(l, "slurm_script: line ") &&
           (has(l, " Killed") || has(l, "Segmentation fault") || has(l, "Aborted") || has(l, "Bus error"));
}

bool is_crash(sv l, const ExceptionLine& e) {
    return e.ok || has(l, "Segmentation fault") || has(l, "(core dumped)") || has(l, "Fatal Python error") ||
           has(l, "terminate called after throwing") ||
           has(l, "terminate called without an active exception");
}

// An allocation request no device or host could hold, or none that this line's device could.
bool absurd_request(const SignalLine& r) {
    if (!r.requested_bytes) return false;
    const double req = *r.requested_bytes;
    if (!std::isfinite(req) || req > kEiB) return true;
    return r.capacity_bytes && *r.capacity_bytes > 0 && req > kAbsurdCapacityFactor * *r.capacity_bytes;
}

void make_absurd(SignalLine& r) {
    r.signal = LogSignal::Crash;
    r.absurd = true;
    r.requested_bytes.reset();
    r.allocated_bytes.reset();
    r.capacity_bytes.reset();
}

// classify_line without the copy of the line.
SignalLine classify(sv line) {
    SignalLine r;
    const sv l = line.substr(0, kMaxSignalLineBytes);
    if (has(l, "NCCL INFO ")) return r;
    const sv content = strip_prefixes(l);
    if (is_warning(l, content)) return r;
    const sv body = ltrim(content);
    const ExceptionLine e = exception_line(content);

    if (is_gpu_oom(l, e)) {
        r.signal = LogSignal::GpuOom;
        gpu_numbers(l, r);
        if (r.absurd || absurd_request(r)) make_absurd(r);
        return r;
    }
    if (is_slurm_oom(l, body)) {
        r.signal = LogSignal::HostOom;
        r.source = LineSource::Slurm;
        return r;
    }
    if (is_host_oom(l, e)) {
        r.signal = LogSignal::HostOom;
        host_numbers(l, r);
        if (absurd_request(r)) make_absurd(r);
        return r;
    }
    if (is_peer_failure(l)) {
        r.signal = LogSignal::PeerFailure;
        return r;
    }
    if (is_nccl_timeout(l)) {
        r.signal = LogSignal::NcclTimeout;
        return r;
    }
    if (is_launcher_crash(l, body, e)) {
        r.signal = LogSignal::Crash;
        r.source = LineSource::Launcher;
        return r;
    }
    if (is_crash(l, e)) r.signal = LogSignal::Crash;
    return r;
}

// One line for people: trimmed, control characters as spaces, at most kMaxReasonBytes (cut at a character
// boundary).
std::string for_people(sv line) {
    line = rtrim(ltrim(line));
    std::string s;
    const bool cut = line.size() > kMaxReasonBytes;
    std::size_t n = std::min(line.size(), kMaxReasonBytes);
    while (cut && n > 0 && (static_cast<unsigned char>(line[n]) & 0xC0) == 0x80)
        --n; // never end inside a UTF-8 sequence
    s.reserve(n + 3);
    for (char c : line.substr(0, n))
        s.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c);
    if (cut) s += "...";
    return s;
}

struct Reader {
    std::optional<SignalLine> memory;     // the first OOM line before any disruption
    std::optional<SignalLine> slurm_oom;  // Slurm's first OOM report
    std::optional<SignalLine> disruption; // the first timeout, peer failure or absurd OOM report
    std::optional<SignalLine> discounted; // the first OOM report not taken as memory
    std::optional<SignalLine> crash;      // the workload's first crash line
    std::optional<SignalLine> launcher;   // the launcher's first crash line

    static SignalLine keep(SignalLine r, sv line, std::size_t line_no) {
        r.line = std::string(line.substr(0, kMaxSignalLineBytes));
        r.line_no = line_no;
        return r;
    }

    void read(sv line, std::size_t line_no) {
        SignalLine r = classify(line);
        switch (r.signal) {
        case LogSignal::None:
            return;
        case LogSignal::GpuOom:
        case LogSignal::HostOom:
            if (r.source == LineSource::Slurm && !slurm_oom) slurm_oom = keep(r, line, line_no);
            if (memory) return;
            if (!disruption)
                memory = keep(r, line, line_no);
            else if (r.source != LineSource::Slurm && !discounted)
                discounted = keep(r, line, line_no);
            return;
        case LogSignal::NcclTimeout:
        case LogSignal::PeerFailure:
            if (!memory && !disruption) disruption = keep(r, line, line_no);
            return;
        case LogSignal::Crash:
            if (r.absurd) {
                if (memory) return;
                if (!discounted) discounted = keep(r, line, line_no);
                if (!disruption) disruption = keep(r, line, line_no);
                return;
            }
            if (r.source == LineSource::Launcher) {
                if (!launcher) launcher = keep(r, line, line_no);
            } else if (!crash) {
                crash = keep(r, line, line_no);
            }
            return;
        }
    }

    LogDiagnosis verdict() && {
        LogDiagnosis d;
        std::optional<SignalLine>* deciding = nullptr;
        for (auto* candidate : {&memory, &slurm_oom, &disruption, &crash, &launcher})
            if (*candidate) {
                deciding = candidate;
                break;
            }
        if (!deciding) return d;
        d.first = std::move(**deciding);
        d.signal = d.first->signal;
        d.reason = for_people(d.first->line);
        if (d.first->absurd)
            d.reason += " [an absurd allocation request: not counted as memory]";
        else if (discounted && !is_memory(d.signal))
            d.reason +=
                fmt::format(" [the out-of-memory report on line {} came after it: not counted as memory]",
                            discounted->line_no);
        d.discounted = std::move(discounted);
        return d;
    }
};

} // namespace

SignalLine classify_line(std::string_view line) {
    SignalLine r = classify(line);
    r.line = std::string(line.substr(0, kMaxSignalLineBytes));
    return r;
}

LogDiagnosis diagnose(std::string_view job_output) {
    Reader reader;
    std::size_t line_no = 0;
    for (std::size_t pos = 0; pos < job_output.size();) {
        std::size_t end = job_output.find('\n', pos);
        if (end == sv::npos) end = job_output.size();
        const sv line = job_output.substr(pos, end - pos);
        ++line_no;
        // A '\r' inside a line (a progress bar's redraw, or CRLF) starts a new segment of the same line.
        for (std::size_t seg = 0;;) {
            const std::size_t cr = line.find('\r', seg);
            reader.read(line.substr(seg, cr == sv::npos ? sv::npos : cr - seg), line_no);
            if (cr == sv::npos) break;
            seg = cr + 1;
        }
        pos = end + 1;
    }
    return std::move(reader).verdict();
}

nlohmann::json to_json(const LogDiagnosis& d) {
    nlohmann::json j = {{"signal", to_string(d.signal)}, {"reason", d.reason}};
    auto line = [](const SignalLine& l) {
        nlohmann::json k = {
            {"signal", to_string(l.signal)}, {"source", to_string(l.source)}, {"line_no", l.line_no}};
        if (l.absurd) k["absurd"] = true;
        if (l.gpu) k["gpu"] = *l.gpu;
        if (l.requested_bytes) k["requested_bytes"] = *l.requested_bytes;
        if (l.allocated_bytes) k["allocated_bytes"] = *l.allocated_bytes;
        if (l.capacity_bytes) k["capacity_bytes"] = *l.capacity_bytes;
        return k;
    };
    if (d.first) j["first"] = line(*d.first);
    if (d.discounted) j["discounted"] = line(*d.discounted);
    return j;
}

namespace {
SignalLine signal_line_from_json(const nlohmann::json& k) {
    SignalLine l;
    l.signal = log_signal_names.parse(k.value("signal", "none")).value_or(LogSignal::None);
    l.source = line_source_names.parse(k.value("source", "workload")).value_or(LineSource::Workload);
    l.line_no = k.value("line_no", std::size_t{0});
    l.absurd = k.value("absurd", false);
    auto number = [&](const char* key) {
        return k.contains(key) && k[key].is_number() ? std::optional<double>(k[key].get<double>())
                                                     : std::nullopt;
    };
    if (const auto g = number("gpu")) l.gpu = static_cast<int>(*g);
    l.requested_bytes = number("requested_bytes");
    l.allocated_bytes = number("allocated_bytes");
    l.capacity_bytes = number("capacity_bytes");
    return l;
}
} // namespace

LogDiagnosis log_diagnosis_from_json(const nlohmann::json& j) {
    LogDiagnosis d;
    if (!j.is_object()) return d;
    d.signal = log_signal_names.parse(j.value("signal", "none")).value_or(LogSignal::None);
    d.reason = j.value("reason", "");
    if (j.contains("first") && j["first"].is_object()) d.first = signal_line_from_json(j["first"]);
    if (j.contains("discounted") && j["discounted"].is_object())
        d.discounted = signal_line_from_json(j["discounted"]);
    return d;
}

} // namespace infrarsi::trial
