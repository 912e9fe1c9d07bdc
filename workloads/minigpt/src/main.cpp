// minigpt: train (under mpirun or alone) or print the memory estimate (--estimate-memory, no MPI).
#include "comm.hpp"
#include "config.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "trainer.hpp"

#include <iostream>
#include <malloc.h>

int main(int argc, char** argv) {
    using namespace minigpt;
    // A caching allocator, as training frameworks use: freed activation buffers stay mapped and are reused
    // instead of being unmapped and faulted in again (glibc maps every block over 32 MiB otherwise).
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
    Config cfg;
    try {
        if (!parse_config(argc, argv, cfg)) return 0;
        if (cfg.estimate_memory) {
            const int dp = cfg.nodes * cfg.ranks_per_node;
            cfg.validate(dp);
            const MemoryEstimate est = estimate_memory(cfg, dp);
            nlohmann::json j = {{"estimated_peak_bytes", est.per_node_bytes},
                                {"per_rank_bytes", est.per_rank_bytes},
                                {"ranks_per_node", cfg.ranks_per_node},
                                {"nodes", cfg.nodes},
                                {"breakdown", est.breakdown}};
            std::cout << j.dump() << '\n';
            return 0;
        }
    } catch (const Error& e) {
        std::cerr << "minigpt: error: " << e.what() << '\n';
        return 2;
    }
    MpiSession mpi(argc, argv);
    try {
        train(cfg, std::cout);
    } catch (const Error& e) {
        // Configuration errors are raised identically on every rank; rank 0 speaks for all.
        if (Group::world().rank() == 0) std::cerr << "minigpt: error: " << e.what() << '\n';
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "minigpt: error: " << e.what() << '\n';
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    return 0;
}
