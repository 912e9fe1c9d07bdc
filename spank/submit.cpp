// sbatch/salloc, as the submitting user, before the job exists: tune mode finds the batch script and the
// contract here, where the user's files and working directory are, and hands both to the job through its
// environment (the batch step in slurmstepd cannot see the submitted path). Called from the option callback,
// because only an option callback's failure refuses a submission whether plugstack says optional or required.
#include "context.hpp"
#include "submit_args.hpp"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace infrarsi::spank {
namespace {

std::vector<std::string> own_argv() {
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> argv;
    size_t start = 0;
    for (size_t i = 0; i < all.size(); ++i)
        if (all[i] == '\0') {
            argv.push_back(all.substr(start, i - start));
            start = i + 1;
        }
    return argv;
}

std::string cwd() {
    std::string buf(4096, '\0');
    if (!::getcwd(buf.data(), buf.size())) return "/";
    buf.resize(std::char_traits<char>::length(buf.c_str()));
    return buf;
}

} // namespace

int submit_tune(const Mode& mode) {
    // Only sbatch/salloc start campaigns; srun steps inside a tuned job inherit the option and go on.
    if (mode.kind != ModeKind::tune || spank_context() != S_CTX_ALLOCATOR) return 0;

    const std::string dir = cwd();
    auto script = find_batch_script(own_argv(), dir);
    std::string contract;
    if (!mode.contract.empty())
        contract = absolute_path(mode.contract, dir);
    else if (script)
        contract = default_contract_for(*script);
    else {
        slurm_error("infrarsi: --infrarsi=tune found no batch script to put a contract beside; name one with "
                    "--infrarsi=tune:CONTRACT");
        return -1;
    }
    if (::access(contract.c_str(), R_OK) != 0) {
        slurm_error("infrarsi: --infrarsi=tune: no readable contract at %s (write one there, or name it with "
                    "--infrarsi=tune:CONTRACT)",
                    contract.c_str());
        return -1;
    }
    // sbatch copies its environment into the job (--export=ALL, the default); the batch step reads these.
    ::setenv("INFRARSI_TUNE_CONTRACT", contract.c_str(), 1);
    ::setenv("INFRARSI_TUNE_SCRIPT", script ? script->c_str() : "", 1);
    return 0;
}

} // namespace infrarsi::spank
