#include "util/atomic_file.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace infrarsi {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const char* what, int err) {
    throw Error(std::string(what) + ": " + std::strerror(err), path.string());
}

} // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
    const std::filesystem::path tmp = path.string() + ".tmp";
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) fail(tmp, "cannot create", errno);
    try {
        write_all(fd.get(), content, tmp.string());
    } catch (const Error&) {
        fd.reset();
        ::unlink(tmp.c_str());
        throw;
    }
    const int synced = ::fsync(fd.get());
    const int sync_err = errno;
    const int closed = fd.close();
    if (synced != 0 || closed != 0) {
        const int err = synced != 0 ? sync_err : errno;
        ::unlink(tmp.c_str());
        fail(tmp, "cannot write", err);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail(path, "cannot replace", err);
    }
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    if (UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); dfd) ::fsync(dfd.get());
}

} // namespace infrarsi
