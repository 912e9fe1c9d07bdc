#include "util/file_digest.hpp"

#include "util/bounded_child.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"
#include "util/sha256.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi {

FileDigest digest_file(const std::string& path, std::uint64_t max_bytes) {
    FileDigest d;
    // O_NONBLOCK: a FIFO planted at the path neither blocks the open nor passes the check below.
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY));
    if (!fd) {
        const int err = errno;
        if (err == ENOENT) return d;
        d.problem = err == ELOOP ? "a symbolic link" : std::string("cannot open: ") + std::strerror(err);
        return d;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
        d.problem = std::string("fstat: ") + std::strerror(errno);
        return d;
    }
    if (!S_ISREG(st.st_mode)) {
        d.problem = "not a regular file";
        return d;
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
        d.problem = fmt::format("{} bytes, over the {} bytes read", st.st_size, max_bytes);
        return d;
    }
    Sha256 h;
    std::array<char, 1 << 16> buf;
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            d.problem = std::string("cannot read: ") + std::strerror(errno);
            return d;
        }
        if (n == 0) break;
        d.size += static_cast<std::uint64_t>(n);
        if (d.size > max_bytes) { // it grew while being read
            d = FileDigest{};
            d.problem = fmt::format("grew past the {} bytes read", max_bytes);
            return d;
        }
        h.update(buf.data(), static_cast<std::size_t>(n));
    }
    d.present = true;
    d.sha256 = h.hex();
    return d;
}

nlohmann::json to_json(const FileDigest& d) {
    nlohmann::json j = {{"present", d.present}};
    if (d.present) {
        j["size"] = d.size;
        j["sha256"] = d.sha256;
    }
    if (!d.problem.empty()) j["problem"] = d.problem;
    return j;
}

FileDigest file_digest_from_json(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) throw Error("a file digest must be an object", where);
    FileDigest d;
    d.present = json_field<bool>(j, "present", where);
    if (d.present) {
        d.size = json_field<std::uint64_t>(j, "size", where);
        d.sha256 = json_field<std::string>(j, "sha256", where);
        if (d.sha256.size() != 64 || d.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
            throw Error("'sha256' is not a SHA-256 in hex", where, "64 lowercase hex digits");
    }
    if (j.contains("problem")) d.problem = json_field<std::string>(j, "problem", where);
    return d;
}

std::vector<FileDigest> digest_files_as(const Account& account, const std::vector<FileToDigest>& files,
                                        std::chrono::milliseconds timeout) {
    std::vector<FileDigest> out(files.size());
    const auto fail_all = [&](const std::string& why) {
        for (auto& d : out)
            d = FileDigest{false, 0, "", why};
        return out;
    };
    ChildOutput child;
    try {
        // In a child bounded in time (a FIFO or a slow filesystem cannot hold the caller), as the files' user
        // (root's own job: no one to drop to).
        child = run_in_child(
            [&] {
                if (account.uid != 0) drop_to(account);
                nlohmann::json j = nlohmann::json::array();
                for (const auto& f : files)
                    j.push_back(to_json(digest_file(f.path, f.max_bytes)));
                return j.dump();
            },
            timeout, 1u << 20); // far more than a digest per file: more is not the child we started
    } catch (const std::exception& e) {
        return fail_all(e.what());
    }
    if (child.end == ChildEnd::timed_out)
        return fail_all(fmt::format("not read within {} ms", timeout.count()));
    if (child.end != ChildEnd::finished)
        return fail_all(
            fmt::format("the reading child failed (could not drop to uid {}, or it died)", account.uid));
    try {
        const auto j = nlohmann::json::parse(child.out);
        if (!j.is_array() || j.size() != files.size()) throw std::runtime_error("not one digest per file");
        for (std::size_t i = 0; i < files.size(); ++i)
            out[i] = file_digest_from_json(j[i], "the reading child");
    } catch (const std::exception&) {
        return fail_all("the reading child reported nothing");
    }
    return out;
}

std::string digest_difference(const FileDigest& recorded, const FileDigest& now) {
    const auto describe = [](const FileDigest& d) {
        if (d.present) return fmt::format("{} bytes, sha256 {}", d.size, d.sha256.substr(0, 12));
        if (!d.problem.empty()) return "unreadable (" + d.problem + ")";
        return std::string("absent");
    };
    if (recorded.present != now.present || recorded.size != now.size || recorded.sha256 != now.sha256 ||
        (!recorded.present && recorded.problem.empty() != now.problem.empty()))
        return describe(recorded) + " when the trial ended, now " + describe(now);
    return {};
}

} // namespace infrarsi
