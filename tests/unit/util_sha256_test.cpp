#include "util/error.hpp"
#include "util/process.hpp"
#include "util/sha256.hpp"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace infrarsi;
namespace fs = std::filesystem;

TEST_CASE("sha256_hex gives the FIPS 180-2 digests") {
    CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha256_hex(std::string("a\0b", 3)) != sha256_hex("a")); // bytes, not a C string
}

TEST_CASE("a file's digest is its bytes' digest and matches coreutils' sha256sum, across read chunks") {
    auto path = fs::temp_directory_path() / ("infrarsi-sha256-" + std::to_string(::getpid()));
    std::string content;
    for (int i = 0; i < 200000; ++i) // 1.3 MB: many 64 KiB reads
        content += std::to_string(i) + "\n";
    std::ofstream(path, std::ios::binary) << content;
    CHECK(sha256_file_hex(path) == sha256_hex(content));
    auto r = run_process({"sha256sum", path.string()});
    REQUIRE(r.ok());
    CHECK(sha256_file_hex(path) == r.out.substr(0, 64));
    fs::remove(path);
}

TEST_CASE("an unreadable file is an error that names it") {
    CHECK_THROWS_WITH_AS(sha256_file_hex("/nonexistent/infrarsi/file"),
                         doctest::Contains("/nonexistent/infrarsi/file"), Error);
}
