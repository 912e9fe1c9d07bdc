#pragma once
// The rendezvous port of a trial's distributed launcher. Trials that run at the same time on one host
// (a search batch with max_concurrent > 1, the local scheduler, two campaigns) must not share the port that
// torchrun's store or a process group's TCP rendezvous binds, or one trial fails at start or, worse, two are
// joined as one job. The trial wrapper gives each trial a free port (docs/contract.md, "Distributed
// launchers"): MASTER_PORT, which init_process_group("env://") and most launch scripts read, and
// PET_MASTER_PORT, which torchrun reads for --master-port when neither --standalone nor --rdzv-endpoint is
// given.
#include <map>
#include <string>

namespace infrarsi::trial {

// A TCP port that nothing on this host listens on now (the kernel's choice for a bind to port 0). Another
// process may still take it before the trial binds it: the window is the trial's start-up.
int free_tcp_port();

// MASTER_PORT and PET_MASTER_PORT set to one free port, unless `env` (the trial's environment from the
// contract) sets MASTER_PORT: a port the contract names is kept. One inherited from the submitting shell is
// not (every trial would share it); a script that exports its own still wins, inside the job.
void add_rendezvous_port(std::map<std::string, std::string>& env);

} // namespace infrarsi::trial
