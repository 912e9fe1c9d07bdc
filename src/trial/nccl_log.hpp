#pragma once
// What NCCL says about its transports in a job's output with NCCL_DEBUG=INFO: the network it chose, the
// devices it found, the external net plugin it tried, and how each channel connects. The one reader of NCCL
// INFO lines (NCCL 2.18 to 2.27 formats, tests/fixtures/nccl); nothing else reads their text. The verdict
// drawn from it is trial/nccl_fallback.hpp.
//
// A line counts when it holds "NCCL INFO " (whatever prefix a launcher or NCCL itself put before it:
// "host:pid:tid [rank]", torchrun's "[default0]:", srun's "0: "); the message after it is read. The version
// comes from "NCCL version 2.19.3+cuda12.3" anywhere in a line. Read, by message:
//   network      "Using network IB" / "Using network Socket" / "Using network AWS Libfabric" (every version),
//                "Assigned NET plugin IB to comm" (2.25+)
//   ib devices   "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>"
//   no ib        "NET/IB : No device found.", "Failed to open libibverbs.so[.1]"
//   sockets      "NET/Socket : Using [0]eth0:10.0.0.1<0>"
//   plugin       the external net plugin's load: not there ("No plugin found", "Could not find:", "Plugin
//                load ... returned 2 : libnccl-net.so: cannot open shared object file" whose error names
//                the plugin itself) is no failure; a plugin that is there and does not load or start is:
//                "Failed to find ncclNetPlugin..." (not CollNet, which is optional), "External network
//                plugin X is unsupported", a dlerror that names another library (a missing dependency) or
//                an undefined symbol, "Failed to initialize NET plugin X" for X other than IB and Socket,
//                and a plugin asked for by NCCL_NET_PLUGIN that NCCL could not find. A plugin that loaded:
//                "Successfully loaded external network plugin", "Loaded net plugin", "NET/OFI Using".
//   channels     "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "... [send] via NET/IB/0/GDRDMA",
//                "... via NET/Socket/1", "... via SHM/direct/direct", older "Ring 00 : ... via P2P/IPC"
//                and "via direct shared memory": counted by transport.
//   environment  "NCCL_X set by environment to V" (NCCL_P2P_DISABLE, NCCL_IB_DISABLE, NCCL_NET,
//                NCCL_NET_PLUGIN, NCCL_SHM_DISABLE...).
// Nothing here throws on any input but allocation failure; time is linear in the output's size.
#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace infrarsi::trial {

// One line kept as evidence: where it was and what it said (its first kMaxNcclEvidenceBytes).
struct NcclLine {
    std::size_t line_no = 0; // 1-based in the output
    std::string text;
};
inline constexpr std::size_t kMaxNcclEvidenceBytes = 512;

struct NcclLog {
    std::size_t info_lines = 0;            // lines with "NCCL INFO "
    std::string version;                   // "2.19.3", empty when not printed
    std::set<std::string> networks;        // the networks NCCL chose: "IB", "Socket", "AWS Libfabric"...
    std::vector<std::string> ib_devices;   // "mlx5_0:1/IB", "mlx5_10:1/RoCE" (distinct, in order seen)
    bool ib_absent = false;                // "NET/IB : No device found." or libibverbs missing
    bool plugin_loaded = false;            // an external net plugin loaded
    std::vector<NcclLine> plugin_failures; // a plugin that is there (or was asked for) and did not load
    std::map<std::string, std::string> environment; // NCCL_X -> value, as NCCL reported it
    // Channel connections by transport: "P2P", "SHM", "NET/IB", "NET/Socket", "NET/<plugin name>"...
    std::map<std::string, std::size_t> channels;
    NcclLine first_socket_channel; // line_no 0: none
    NcclLine first_shm_channel;
    NcclLine socket_choice; // "Using network Socket" (line_no 0: none)

    bool empty() const { return info_lines == 0; }
    std::size_t net_channels() const; // channels over any network
};

// Reads a whole job output.
NcclLog read_nccl_log(std::string_view output);

nlohmann::json to_json(const NcclLog& log);

} // namespace infrarsi::trial
