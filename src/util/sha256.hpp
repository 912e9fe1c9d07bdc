#pragma once
// SHA-256 in process (OpenSSL's EVP), as lowercase hex: the same digests as coreutils' sha256sum, without a
// child process per string.
#include <filesystem>
#include <string>
#include <string_view>

namespace infrarsi {

std::string sha256_hex(std::string_view data);
// The digest of a file's bytes, read in chunks. Throws infrarsi::Error naming the file when it cannot be
// read.
std::string sha256_file_hex(const std::filesystem::path& file);

} // namespace infrarsi
