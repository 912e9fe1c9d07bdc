// The text helpers (util/text.hpp): one trim and one digit check for every part.
#include "util/text.hpp"

#include <doctest/doctest.h>

using namespace infrarsi;

TEST_CASE("trim removes spaces, tabs, carriage returns and newlines at both ends, and nothing inside") {
    CHECK(trim("  a b\t\r\n") == "a b");
    CHECK(trim("\t\nx") == "x");
    CHECK(trim("x") == "x");
    CHECK(trim(" \t\r\n ").empty());
    CHECK(trim("").empty());
    CHECK(trim_left("  a  ") == "a  ");
    CHECK(trim_right("  a  ") == "  a");
}

TEST_CASE(
    "trim takes the characters to remove: a log line keeps its carriage return, a sentence loses dots") {
    CHECK(trim("  a\r", " \t") == "a\r");
    CHECK(trim_right("NET/IB.. ", " \t\r.") == "NET/IB");
    CHECK(trim_left("..a", ".") == "a");
    CHECK(trim("...", ".").empty());
}

TEST_CASE("all_digits: one or more ASCII digits and nothing else") {
    CHECK(all_digits("0"));
    CHECK(all_digits("4294967296"));
    CHECK(!all_digits(""));
    CHECK(!all_digits("-1"));
    CHECK(!all_digits("+1"));
    CHECK(!all_digits(" 1"));
    CHECK(!all_digits("1 "));
    CHECK(!all_digits("12a"));
    CHECK(!all_digits("1.5"));
    CHECK(!all_digits("\xd9\xa3")); // ARABIC-INDIC DIGIT THREE: not ASCII
}
