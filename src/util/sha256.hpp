#pragma once
// SHA-256 in process (OpenSSL's EVP), as lowercase hex: the same digests as coreutils' sha256sum, without a
// child process per string.
#include <filesystem>
#include <string>
#include <string_view>

#include <cstddef>
#include <memory>

namespace infrarsi {

// One running digest: update with bytes as they are read, then hex() once.
class Sha256 {
  public:
    Sha256();
    ~Sha256();
    Sha256(const Sha256&) = delete;
    Sha256& operator=(const Sha256&) = delete;
    void update(const void* data, std::size_t n);
    std::string hex();

  private:
    struct Ctx;
    std::unique_ptr<Ctx> ctx_;
};

std::string sha256_hex(std::string_view data);
// The digest of a file's bytes, read in chunks. Throws infrarsi::Error naming the file when it cannot be
// read.
std::string sha256_file_hex(const std::filesystem::path& file);

} // namespace infrarsi
