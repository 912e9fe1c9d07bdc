// doctest main with MPI initialized (as a singleton), so train() can run in-process.
#define DOCTEST_CONFIG_IMPLEMENT
#include "comm.hpp"

#include <doctest/doctest.h>

int main(int argc, char** argv) {
    minigpt::MpiSession mpi(argc, argv);
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
