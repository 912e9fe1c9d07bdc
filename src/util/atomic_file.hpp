#pragma once
// Replacing a file so that a reader (or a restart after a crash or a full disk) sees the old content or the
// new one, never a part: write a temporary file beside it, check every write, fsync, rename over the target,
// fsync the directory.
#include <filesystem>
#include <string_view>

namespace infrarsi {

// Throws infrarsi::Error naming the file and the system's reason; the target is then unchanged.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

} // namespace infrarsi
