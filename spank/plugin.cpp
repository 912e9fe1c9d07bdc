// The InfraRSI SPANK plugin: the one file that defines Slurm's entry points. Each entry point switches on
// spank_context() and calls the file of that context (submit.cpp: srun/sbatch, stepd.cpp: slurmstepd).
#include "context.hpp"

#include "util/error.hpp"

#include <string>
#include <vector>

// SPANK_PLUGIN gives these internal linkage in C++; Slurm needs them exported (see ENVIRONMENT.md).
extern "C" {
__attribute__((visibility("default"))) extern const char plugin_name[];
__attribute__((visibility("default"))) extern const char plugin_type[];
__attribute__((visibility("default"))) extern const unsigned int plugin_version;
__attribute__((visibility("default"))) extern const unsigned int spank_plugin_version;
const char plugin_name[] = "infrarsi";
const char plugin_type[] = "spank";
const unsigned int plugin_version = SLURM_VERSION_NUMBER;
const unsigned int spank_plugin_version = 0;
}

namespace infrarsi::spank {
Context& context() {
    static Context ctx;
    return ctx;
}
} // namespace infrarsi::spank

using infrarsi::spank::context;

#define INFRARSI_EXPORT extern "C" __attribute__((visibility("default")))

INFRARSI_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
    // No C++ exception may cross into Slurm.
    try {
        std::vector<std::string> args(av, av + (ac > 0 ? ac : 0));
        context().config = infrarsi::spank::parse_config(args);
    } catch (const std::exception& e) {
        slurm_error("infrarsi: %s", e.what());
        return -1;
    }
    switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_REMOTE:
    case S_CTX_ALLOCATOR:
        return infrarsi::spank::register_options(sp);
    default:
        return 0;
    }
}

INFRARSI_EXPORT int slurm_spank_init_post_opt(spank_t sp, int, char**) {
    try {
        if (spank_context() != S_CTX_REMOTE) return 0;
        // Containment first: it decides on its own failures (a trial step that cannot be contained does not
        // run), whatever the record does.
        infrarsi::spank::stepd_contain_init(sp, context());
        return infrarsi::spank::stepd_init_post_opt(sp, context());
    } catch (const std::exception& e) {
        slurm_error("infrarsi: %s", e.what());
        return context().effective_mode().kind == infrarsi::spank::ModeKind::record ? 0 : -1;
    }
}

INFRARSI_EXPORT int slurm_spank_user_init(spank_t sp, int, char**) {
    if (spank_context() != S_CTX_REMOTE) return 0;
    try {
        return infrarsi::spank::stepd_user_init(sp, context());
    } catch (const std::exception& e) {
        context().deferred_error = e.what();
        return 0;
    }
}

// In each task, as the job's user, before it executes the job's program: a task of a trial job enters the
// private view (stepd.cpp, stepd_contain_task), as container plugins do.
INFRARSI_EXPORT int slurm_spank_task_init(spank_t sp, int, char**) {
    if (spank_context() != S_CTX_REMOTE) return 0;
    if (const int rc = infrarsi::spank::stepd_task_init(sp, context()); rc != 0) return rc;
    return infrarsi::spank::stepd_contain_task(sp, context());
}

// Trial evidence (stepd.cpp): root's record of a trial's start, end, exit status and memory peak. It never
// fails the job: a trial without evidence is classified without it, and says so.
INFRARSI_EXPORT int slurm_spank_task_post_fork(spank_t sp, int, char**) {
    if (spank_context() != S_CTX_REMOTE) return 0;
    try {
        return infrarsi::spank::stepd_task_post_fork(sp, context());
    } catch (const std::exception& e) {
        slurm_error("infrarsi: trial evidence not started: %s", e.what());
        return 0;
    }
}

INFRARSI_EXPORT int slurm_spank_task_exit(spank_t sp, int, char**) {
    if (spank_context() != S_CTX_REMOTE) return 0;
    try {
        return infrarsi::spank::stepd_task_exit(sp, context());
    } catch (const std::exception& e) {
        slurm_error("infrarsi: trial evidence not written: %s", e.what());
        return 0;
    }
}

// The end of a step in slurmstepd (root): the batch step of a trial job removes its containment marker.
INFRARSI_EXPORT int slurm_spank_exit(spank_t sp, int, char**) {
    if (spank_context() != S_CTX_REMOTE) return 0;
    try {
        return infrarsi::spank::stepd_contain_exit(sp, context());
    } catch (const std::exception& e) {
        slurm_error("infrarsi: containment marker not removed: %s", e.what());
        return 0;
    }
}
