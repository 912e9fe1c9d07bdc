#pragma once
// File descriptors: one owner that closes (UniqueFd), writes and reads that survive EINTR and short counts,
// and the one reader for a file that comes from a user or a job: a regular file (not a FIFO that would hang
// us, not a device), at most a given size, opened without following a final symlink when asked.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace infrarsi {

class UniqueFd {
  public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(const UniqueFd&) = delete;
    UniqueFd& operator=(const UniqueFd&) = delete;
    UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
    UniqueFd& operator=(UniqueFd&& o) noexcept;
    ~UniqueFd() { reset(); }

    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    int release() {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }
    void reset(int fd = -1);
    // close(2) with its result, for writers that must know a deferred write error; errno is set on failure.
    int close();

  private:
    int fd_ = -1;
};

// Writes all of `data`, retrying on EINTR and short writes. Throws infrarsi::Error naming `where`.
void write_all(int fd, std::string_view data, const std::string& where);

// Reads to end of file, at most `max_bytes` (more is an Error). Throws infrarsi::Error naming `where`.
std::string read_all(int fd, std::size_t max_bytes, const std::string& where);

struct ReadLimits {
    std::size_t max_bytes = 4u << 20;
    bool follow_symlink = true; // false: O_NOFOLLOW on the last component
};

// A regular file of at most limits.max_bytes, opened with O_NONBLOCK (a FIFO planted at `path` neither
// blocks the open nor passes the check). Throws infrarsi::Error that says what the file is instead.
std::string read_regular_file(const std::string& path, ReadLimits limits = {});

// The last limits.max_bytes of a regular file (all of it when smaller), opened and checked as
// read_regular_file does, for output where only the end matters (a trial's log.txt): a 2 GiB log costs
// limits.max_bytes of memory, not 2 GiB. Throws infrarsi::Error that says what the file is instead.
std::string read_regular_file_tail(const std::string& path, ReadLimits limits = {});

// Calls `on_line(number, line)` for each line of a regular file (opened and checked as read_regular_file
// does, of any size), read in 64 KiB chunks: memory stays bounded by max_line_bytes. A line longer than that
// is passed cut to max_line_bytes with `cut` true. Line numbers start at 1; the newline is not passed.
void for_each_line(const std::string& path, std::size_t max_line_bytes,
                   const std::function<void(std::size_t number, std::string_view line, bool cut)>& on_line,
                   bool follow_symlink = true);

} // namespace infrarsi
