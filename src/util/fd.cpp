#include "util/fd.hpp"

#include "util/error.hpp"

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

std::string read_regular_file(const std::string& path, ReadLimits limits) {
    int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    if (!limits.follow_symlink) flags |= O_NOFOLLOW;
    UniqueFd fd(::open(path.c_str(), flags));
    if (!fd) {
        const int err = errno;
        if (err == ELOOP && !limits.follow_symlink)
            throw Error("is a symbolic link; refusing to follow it", path, "a regular file");
        throw Error(std::string("cannot open: ") + std::strerror(err), path);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw Error(std::string("fstat: ") + std::strerror(errno), path);
    if (!S_ISREG(st.st_mode)) throw Error("is not a regular file", path, "a regular file");
    if (static_cast<std::size_t>(st.st_size) > limits.max_bytes)
        throw Error("is " + std::to_string(st.st_size) + " bytes", path,
                    "at most " + std::to_string(limits.max_bytes) + " bytes");
    // Regular files ignore O_NONBLOCK; the limit is checked again while reading (the file may grow).
    return read_all(fd.get(), limits.max_bytes, path);
}

} // namespace infrarsi
