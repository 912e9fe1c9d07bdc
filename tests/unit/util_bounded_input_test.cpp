// The bounded readers of outside input (util/bounded_json.hpp, util/toml_limits.hpp, util/fd.hpp): JSON
// nested a million levels deep is refused while it is parsed, before any deep value exists (its dump, copy or
// destruction would recurse and crash the process); a TOML key of 300k dotted parts is refused before toml++
// sees it; a 2 GiB sparse log costs only the tail that is read; a FIFO neither blocks nor passes as a file.
#include "util/bounded_json.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"
#include "util/toml_limits.hpp"

#include "test_support.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>
#include <vector>

using namespace infrarsi;
using test::TempDir;

namespace {

std::string nested_arrays(std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
}

} // namespace

TEST_CASE("JSON nested a million levels deep is refused while it is parsed, with where and the limit") {
    const std::string deep = nested_arrays(1'000'000);
    CHECK_THROWS_WITH_AS(
        parse_bounded_json(deep, "m.json", "a manifest", {.max_bytes = 8u << 20}),
        "m.json: JSON nested more than 64 levels deep (expected at most 64 levels: a manifest)", Error);
    // Deep inside a field of an object (a manifest's "version", a task's "candidate").
    std::string field = R"({"format": "x", "version": )";
    for (int i = 0; i < 300'000; ++i)
        field += R"({"a": )";
    field += "1" + std::string(300'000, '}') + "}";
    CHECK_THROWS_WITH_AS(parse_bounded_json(field, "f", "x", {.max_bytes = 8u << 20}),
                         doctest::Contains("nested more than 64 levels"), Error);
    // The limit itself is allowed; one level more is not.
    CHECK(parse_bounded_json(nested_arrays(64), "f", "x").size() == 1);
    CHECK_THROWS_AS(parse_bounded_json(nested_arrays(65), "f", "x"), Error);
    CHECK(parse_bounded_json(nested_arrays(3), "f", "x", {.max_depth = 3}).size() == 1);
    CHECK_THROWS_AS(parse_bounded_json(nested_arrays(4), "f", "x", {.max_depth = 3}), Error);
}

TEST_CASE("bounded JSON is parsed as nlohmann parses it, and oversized or malformed input is a clear error") {
    const std::string text =
        R"({"a": [1, -2, 18446744073709551615, 1.5, "s", null, true, {"b": {}}, []], "c": {"d": [[{}]]},
            "a2": "last", "a2": "wins"})";
    CHECK(parse_bounded_json(text, "f", "x") == nlohmann::json::parse(text));
    CHECK(parse_bounded_json("7", "f", "x") == 7);
    // A long flat array stays linear (nlohmann's callback parser rescans the parent at each close).
    std::string flat = "[";
    for (int i = 0; i < 200'000; ++i)
        flat += R"({"k": "v"},)";
    flat += "1]";
    CHECK(parse_bounded_json(flat, "f", "x", {.max_bytes = 8u << 20}).size() == 200'001);
    CHECK_THROWS_WITH_AS(parse_bounded_json(std::string(5u << 20, ' '), "big.json", "a result"),
                         doctest::Contains("big.json: is 5242880 bytes of JSON"), Error);
    CHECK_THROWS_WITH_AS(parse_bounded_json(R"({"a": tru})", "bad.json", "a result"),
                         doctest::Contains("bad.json: not valid JSON"), Error);
    CHECK_THROWS_WITH_AS(parse_bounded_json(R"({"a": 1} x)", "f", "a result"),
                         doctest::Contains("not valid JSON"), Error);
    CHECK_THROWS_AS(parse_bounded_json("[[1,2", "f", "x"), Error);
    CHECK_THROWS_AS(parse_bounded_json("", "f", "x"), Error);
}

TEST_CASE("a JSON file is read bounded: a FIFO does not block and is refused, a deep file is refused") {
    TempDir d("infrarsi-bounded");
    const auto fifo = (d.path / "result.json").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(read_bounded_json(fifo, "a result"), doctest::Contains("not a regular file"), Error);
    const auto deep = (d.path / "deep.json").string();
    std::ofstream(deep) << nested_arrays(1'000'000);
    CHECK_THROWS_WITH_AS(read_bounded_json(deep, "a result", {.max_bytes = 4u << 20}),
                         doctest::Contains("nested more than"), Error);
    CHECK_THROWS_WITH_AS(read_bounded_json(deep, "a result", {.max_bytes = 1u << 20}),
                         doctest::Contains("2000000 bytes"), Error);
}

TEST_CASE("the tail of a 2 GiB sparse log is read without reading the rest, and a FIFO is refused at once") {
    TempDir d("infrarsi-bounded");
    const auto log = (d.path / "log.txt").string();
    {
        UniqueFd f(::open(log.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
        REQUIRE(f);
        REQUIRE(::ftruncate(f.get(), off_t(2) << 30) == 0);
        REQUIRE(::pwrite(f.get(), "last line\n", 10, (off_t(2) << 30) - 10) == 10);
    }
    const auto tail = read_regular_file_tail(log, {.max_bytes = 64});
    REQUIRE(tail.size() == 64);
    CHECK(tail.substr(54) == "last line\n");
    CHECK(tail.substr(0, 54) == std::string(54, '\0'));
    CHECK(read_regular_file_tail(log, {.max_bytes = 64, .follow_symlink = false}) == tail);
    // The whole-file reader refuses it by its size, before reading.
    CHECK_THROWS_WITH_AS(read_regular_file(log, {.max_bytes = 1u << 20}),
                         doctest::Contains("2147483648 bytes"), Error);
    const auto small = (d.path / "small.txt").string();
    std::ofstream(small) << "abc\n";
    CHECK(read_regular_file_tail(small, {.max_bytes = 64}) == "abc\n");
    const auto fifo = (d.path / "fifo.txt").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(read_regular_file_tail(fifo), doctest::Contains("not a regular file"), Error);
    const auto link = (d.path / "link.txt").string();
    REQUIRE(::symlink(small.c_str(), link.c_str()) == 0);
    CHECK_THROWS_WITH_AS(read_regular_file_tail(link, {.follow_symlink = false}),
                         doctest::Contains("symbolic link"), Error);
}

TEST_CASE("lines are read in bounded chunks: an over-long line is passed cut and says so") {
    TempDir d("infrarsi-bounded");
    const auto path = (d.path / "records.jsonl").string();
    std::ofstream(path) << "one\n\n" << std::string(200'000, 'x') << "\nlast";
    std::vector<std::tuple<std::size_t, std::string, bool>> seen;
    for_each_line(path, 1000, [&](std::size_t n, std::string_view line, bool cut) {
        seen.emplace_back(n, std::string(line), cut);
    });
    REQUIRE(seen.size() == 4);
    CHECK(seen[0] == std::tuple<std::size_t, std::string, bool>{1, "one", false});
    CHECK(seen[1] == std::tuple<std::size_t, std::string, bool>{2, "", false});
    CHECK(seen[2] == std::tuple<std::size_t, std::string, bool>{3, std::string(1000, 'x'), true});
    CHECK(seen[3] == std::tuple<std::size_t, std::string, bool>{4, "last", false});
    const auto fifo = (d.path / "fifo").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(for_each_line(fifo, 10, [](std::size_t, std::string_view, bool) {}),
                         doctest::Contains("not a regular file"), Error);
}

TEST_CASE("a TOML key of 300k dotted parts or arrays nested too deep are refused before toml++ parses them") {
    std::string key = "a";
    for (int i = 0; i < 300'000; ++i)
        key += ".a";
    CHECK_THROWS_WITH_AS(check_toml_limits("name = \"x\"\n" + key + " = 1\n", "c.toml"),
                         "c.toml:2: a key of more than 32 dotted parts (expected keys of at most 32 parts)",
                         Error);
    CHECK_THROWS_WITH_AS(check_toml_limits("[" + key + "]\n", "c.toml"), doctest::Contains("c.toml:1"),
                         Error);
    CHECK_THROWS_WITH_AS(check_toml_limits("x = " + std::string(100, '[') + std::string(100, ']'), "c.toml"),
                         doctest::Contains("nested more than 32 levels"), Error);
    CHECK_THROWS_WITH_AS(check_toml_limits("x = " + std::string(100, '{'), "c.toml"),
                         doctest::Contains("nested more than 32"), Error);
    CHECK_THROWS_WITH_AS(check_toml_limits(std::string(2u << 20, '#'), "c.toml"),
                         doctest::Contains("2097152 bytes"), Error);
    // What real contracts have: dotted keys, floats, dates, dots and brackets inside strings and comments.
    check_toml_limits(R"(name = "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.a.b.c.d.e.f.g.h"
# a comment with ....................................... and [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[
[knobs.micro_batch]
env = 'A.B.C.D.E.F.G.H.I.J.K.L.M.N.O.P.Q.R.S.T.U.V.W.X.Y.Z.A.B.C.D.E.F.G.H.I.J.K'
x.y.z = 1.5
t = 1979-05-27T07:32:00.999999
m = """
.............................................. [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ \"""
"""
l = '''.........................................'''
build = [["make", "-C", "{build}"], [1.5, 2.5, 3.5]]
inline = { a.b = 1, c = { d = 2.5 } }
[[constraints]]
product = ["a", "b"]
)",
                      "c.toml");
}

TEST_CASE("an integer field out of its type's range is refused, not wrapped") {
    const auto j = nlohmann::json::parse(R"({"v": 4294967297, "neg": -4294967297, "ok": -5, "f": 1e300})");
    CHECK_THROWS_WITH_AS(json_field<int>(j, "v", "bank.json"),
                         "bank.json: field 'v' must be an integer in -2147483648..2147483647", Error);
    CHECK_THROWS_AS(json_field<int>(j, "neg", "t"), Error);
    CHECK_THROWS_AS(json_field<std::int64_t>(j, "f", "t"), Error);
    CHECK(json_field<int>(j, "ok", "t") == -5);
    CHECK(json_field<std::int64_t>(j, "v", "t") == 4294967297);
}
