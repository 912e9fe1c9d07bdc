// Placement options: the doctor's slow nodes left out of every array that does not name its nodes.
#include "scheduler/scheduler.hpp"

#include <doctest/doctest.h>

using infrarsi::scheduler::excluding;
using V = std::vector<std::string>;

TEST_CASE("slow nodes are excluded from an array's placement, merged with an --exclude already there") {
    CHECK(excluding({}, {}) == V{});
    CHECK(excluding({}, {"n3"}) == V{"--exclude=n3"});
    CHECK(excluding({}, {"n3", "n1"}) == V{"--exclude=n3,n1"});
    CHECK(excluding({"--exclude=n2"}, {"n3", "n2"}) == V{"--exclude=n2,n3"});
    CHECK(excluding({"--exclusive", "--exclude="}, {"n1"}) == V{"--exclusive", "--exclude=n1"});
}

TEST_CASE("a placement that names its nodes is kept as it is") {
    CHECK(excluding({"--nodelist=n3"}, {"n3"}) == V{"--nodelist=n3"});
    CHECK(excluding({"-wn1"}, {"n1"}) == V{"-wn1"});
}

TEST_CASE("slow nodes are avoided only where the partition has them and enough others remain") {
    using infrarsi::scheduler::nodes_to_avoid;
    const V four{"n1", "n2", "n3", "n4"};
    CHECK(nodes_to_avoid({"n3"}, four, 1) == V{"n3"});
    CHECK(nodes_to_avoid({"n3", "x9"}, four, 2) == V{"n3"}); // x9: not in this partition
    CHECK(nodes_to_avoid({"n3"}, four, 3) == V{"n3"});
    CHECK(nodes_to_avoid({"n3"}, four, 4).empty()); // a 4-node trial would never start
    CHECK(nodes_to_avoid({"n1", "n2"}, {"n1", "n2"}, 1).empty());
    CHECK(nodes_to_avoid({"n1"}, {}, 1).empty()); // the partition's nodes unknown
}
