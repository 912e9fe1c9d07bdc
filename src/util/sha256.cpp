#include "util/sha256.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <openssl/evp.h>
#include <unistd.h>

namespace infrarsi {

struct Sha256::Ctx {
    struct Free {
        void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
    };
    std::unique_ptr<EVP_MD_CTX, Free> md{EVP_MD_CTX_new()};
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
    if (!ctx_->md || EVP_DigestInit_ex(ctx_->md.get(), EVP_sha256(), nullptr) != 1)
        throw Error("cannot start a SHA-256 digest", "OpenSSL EVP");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t n) {
    if (EVP_DigestUpdate(ctx_->md.get(), data, n) != 1) throw Error("SHA-256 update failed", "OpenSSL EVP");
}

std::string Sha256::hex() {
    std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_->md.get(), md.data(), &len) != 1)
        throw Error("SHA-256 final failed", "OpenSSL EVP");
    static constexpr char digits[] = "0123456789abcdef";
    std::string out(2 * len, '0');
    for (unsigned int i = 0; i < len; ++i) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 0xf];
    }
    return out;
}

std::string sha256_hex(std::string_view data) {
    Sha256 h;
    h.update(data.data(), data.size());
    return h.hex();
}

std::string sha256_file_hex(const std::filesystem::path& file) {
    UniqueFd in(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in)
        throw Error(std::string("cannot read: ") + std::strerror(errno), file.string(), "a readable file");
    Sha256 h;
    std::array<char, 1 << 16> buf;
    while (true) {
        ssize_t n = ::read(in.get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            throw Error(std::string("cannot read: ") + std::strerror(errno), file.string(),
                        "a readable file");
        if (n == 0) break;
        h.update(buf.data(), static_cast<std::size_t>(n));
    }
    return h.hex();
}

} // namespace infrarsi
