#include "util/fd.hpp"

#include "util/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace infrarsi {

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
}

void UniqueFd::reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

int UniqueFd::close() {
    const int fd = release();
    return fd >= 0 ? ::close(fd) : 0;
}

void write_all(int fd, std::string_view data, const std::string& where) {
    std::size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(std::string("write: ") + std::strerror(n < 0 ? errno : EIO), where);
        done += static_cast<std::size_t>(n);
    }
}

std::string read_all(int fd, std::size_t max_bytes, const std::string& where) {
    std::string out;
    char buf[1 << 16];
    while (true) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(std::string("read: ") + std::strerror(errno), where);
        if (n == 0) return out;
        if (out.size() + static_cast<std::size_t>(n) > max_bytes)
            throw Error("more than " + std::to_string(max_bytes) + " bytes", where,
                        "at most " + std::to_string(max_bytes) + " bytes");
        out.append(buf, static_cast<std::size_t>(n));
    }
}

namespace {

// Opened with O_NONBLOCK (a FIFO planted at `path` neither blocks the open nor passes the check), then
// checked to be a regular file; its size in `size`.
UniqueFd open_regular(const std::string& path, bool follow_symlink, std::size_t& size) {
    int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    if (!follow_symlink) flags |= O_NOFOLLOW;
    UniqueFd fd(::open(path.c_str(), flags));
    if (!fd) {
        const int err = errno;
        if (err == ELOOP && !follow_symlink)
            throw Error("is a symbolic link; refusing to follow it", path, "a regular file");
        throw Error(std::string("cannot open: ") + std::strerror(err), path);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw Error(std::string("fstat: ") + std::strerror(errno), path);
    if (!S_ISREG(st.st_mode)) throw Error("is not a regular file", path, "a regular file");
    size = static_cast<std::size_t>(st.st_size);
    return fd;
}

} // namespace

std::string read_regular_file(const std::string& path, ReadLimits limits) {
    std::size_t size = 0;
    UniqueFd fd = open_regular(path, limits.follow_symlink, size);
    if (size > limits.max_bytes)
        throw Error("is " + std::to_string(size) + " bytes", path,
                    "at most " + std::to_string(limits.max_bytes) + " bytes");
    // Regular files ignore O_NONBLOCK; the limit is checked again while reading (the file may grow).
    return read_all(fd.get(), limits.max_bytes, path);
}

std::string read_regular_file_tail(const std::string& path, ReadLimits limits) {
    std::size_t size = 0;
    UniqueFd fd = open_regular(path, limits.follow_symlink, size);
    const std::size_t from = size > limits.max_bytes ? size - limits.max_bytes : 0;
    std::string out;
    out.resize(size - from);
    // pread to what the size was: bytes the job appends meanwhile are not ours to wait for.
    std::size_t done = 0;
    while (done < out.size()) {
        const std::size_t want = std::min<std::size_t>(out.size() - done, 1u << 16);
        const ssize_t n = ::pread(fd.get(), out.data() + done, want, static_cast<off_t>(from + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(std::string("read: ") + std::strerror(errno), path);
        if (n == 0) break; // truncated meanwhile
        done += static_cast<std::size_t>(n);
    }
    out.resize(done);
    return out;
}

void for_each_line(const std::string& path, std::size_t max_line_bytes,
                   const std::function<void(std::size_t, std::string_view, bool)>& on_line,
                   bool follow_symlink) {
    std::size_t size = 0;
    UniqueFd fd = open_regular(path, follow_symlink, size);
    std::string line;
    bool cut = false;
    std::size_t number = 0;
    char buf[1 << 16];
    while (true) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(std::string("read: ") + std::strerror(errno), path);
        if (n == 0) break;
        for (std::string_view rest(buf, static_cast<std::size_t>(n)); !rest.empty();) {
            const auto nl = rest.find('\n');
            const auto piece = rest.substr(0, nl);
            const std::size_t room = max_line_bytes - line.size();
            if (piece.size() > room) cut = true;
            line.append(piece.substr(0, std::min(room, piece.size())));
            if (nl == std::string_view::npos) break;
            on_line(++number, line, cut);
            line.clear();
            cut = false;
            rest.remove_prefix(nl + 1);
        }
    }
    if (!line.empty() || cut) on_line(++number, line, cut);
}

} // namespace infrarsi
