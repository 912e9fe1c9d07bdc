#include "node/topology.hpp"

#include "util/bounded_child.hpp"
#include "util/error.hpp"
#include "util/fd.hpp"
#include "util/json_field.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <hwloc.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/wait.h>
#include <type_traits>
#include <unistd.h>
#include <vector>

namespace infrarsi::node {
namespace {

struct TopologyDeleter {
    void operator()(hwloc_topology_t t) const { hwloc_topology_destroy(t); }
};
using Topology = std::unique_ptr<std::remove_pointer_t<hwloc_topology_t>, TopologyDeleter>;

Topology make_topology() {
    hwloc_topology_t raw = nullptr;
    if (hwloc_topology_init(&raw) != 0) throw Error("hwloc_topology_init failed", "hwloc");
    return Topology(raw);
}

void load(hwloc_topology_t t, const std::string& where) {
    if (hwloc_topology_load(t) != 0) throw Error("hwloc could not load the topology", where);
}

uint64_t first_cache_size(hwloc_topology_t t, hwloc_obj_type_t type) {
    hwloc_obj_t o = hwloc_get_next_obj_by_type(t, type, nullptr);
    return (o && o->attr) ? o->attr->cache.size : 0;
}

unsigned count(hwloc_topology_t t, hwloc_obj_type_t type) {
    int n = hwloc_get_nbobjs_by_type(t, type);
    return n > 0 ? static_cast<unsigned>(n) : 0;
}

std::string busid(hwloc_obj_t pci) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
                  pci->attr->pcidev.dev, pci->attr->pcidev.func);
    return buf;
}

OsDevice describe(hwloc_obj_t osdev, const char* kind) {
    OsDevice d;
    d.name = osdev->name ? osdev->name : "";
    d.kind = kind;
    d.subtype = osdev->subtype ? osdev->subtype : "";
    for (hwloc_obj_t p = osdev->parent; p; p = p->parent) {
        if (p->type != HWLOC_OBJ_PCI_DEVICE) continue;
        d.pci_busid = busid(p);
        d.pci_vendor = p->attr->pcidev.vendor_id;
        d.pci_device = p->attr->pcidev.device_id;
        d.pci_link_gbps = p->attr->pcidev.linkspeed;
        break;
    }
    return d;
}

hwloc_obj_t pci_parent(hwloc_obj_t osdev) {
    for (hwloc_obj_t p = osdev->parent; p; p = p->parent)
        if (p->type == HWLOC_OBJ_PCI_DEVICE) return p;
    return nullptr;
}

// NicLink::kind for two PCI devices, from their closest common ancestor in hwloc's tree.
std::string pci_path_kind(hwloc_obj_t a, hwloc_obj_t b) {
    // By walking up (hwloc_get_common_ancestor_obj compares depths, which I/O objects do not have).
    std::vector<hwloc_obj_t> above_a;
    for (hwloc_obj_t p = a; p; p = p->parent)
        above_a.push_back(p);
    hwloc_obj_t common = b;
    while (common && std::find(above_a.begin(), above_a.end(), common) == above_a.end())
        common = common->parent;
    if (!common) return "system";
    if (common->type == HWLOC_OBJ_PCI_DEVICE) return "pcie-switch"; // functions of one device
    if (common->type == HWLOC_OBJ_BRIDGE) {
        if (common->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) return "host-bridge";
        // A PCIe switch is an upstream port (the common bridge) above one downstream port per device: one
        // bridge between each device and it; more is a switch below a switch.
        const auto bridges_between = [&](hwloc_obj_t x) {
            int n = 0;
            for (hwloc_obj_t p = x->parent; p && p != common; p = p->parent)
                n += p->type == HWLOC_OBJ_BRIDGE;
            return n;
        };
        return bridges_between(a) <= 1 && bridges_between(b) <= 1 ? "pcie-switch" : "pcie-switches";
    }
    // Above the host bridges: one NUMA node, or the whole machine.
    return common->nodeset && hwloc_bitmap_weight(common->nodeset) == 1 ? "numa-node" : "system";
}

TopologyFeatures extract(hwloc_topology_t t, std::string source) {
    TopologyFeatures f;
    f.source = std::move(source);
    f.packages = count(t, HWLOC_OBJ_PACKAGE);
    f.numa_nodes = count(t, HWLOC_OBJ_NUMANODE);
    f.cores = count(t, HWLOC_OBJ_CORE);
    f.pus = count(t, HWLOC_OBJ_PU);
    f.l1d_bytes = first_cache_size(t, HWLOC_OBJ_L1CACHE);
    f.l2_bytes = first_cache_size(t, HWLOC_OBJ_L2CACHE);
    f.l3_bytes = first_cache_size(t, HWLOC_OBJ_L3CACHE);
    f.l3_count = count(t, HWLOC_OBJ_L3CACHE);
    f.memory_bytes = hwloc_get_root_obj(t)->total_memory;

    // A GPU shows up under several OS names (nvml, cuda, opencl, display): one entry per PCI device.
    std::map<std::string, size_t> gpu_by_pci;
    std::vector<hwloc_obj_t> gpu_pci, nic_pci; // the PCI device of each entry of f.gpus and f.nics, or null
    for (hwloc_obj_t o = hwloc_get_next_osdev(t, nullptr); o; o = hwloc_get_next_osdev(t, o)) {
        switch (o->attr->osdev.type) {
        case HWLOC_OBJ_OSDEV_GPU:
        case HWLOC_OBJ_OSDEV_COPROC: {
            OsDevice d = describe(o, o->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU ? "gpu" : "coproc");
            // A server's BMC display (ASPEED, Matrox VGA) shows up as a DRM "GPU"; it is no accelerator.
            if (d.pci_vendor == 0x1a03 || d.pci_vendor == 0x102b) break;
            if (!d.pci_busid.empty()) {
                auto [it, fresh] = gpu_by_pci.emplace(d.pci_busid, f.gpus.size());
                if (!fresh) break;
            }
            f.gpus.push_back(std::move(d));
            gpu_pci.push_back(pci_parent(o));
            break;
        }
        case HWLOC_OBJ_OSDEV_NETWORK:
            f.nics.push_back(describe(o, "network"));
            nic_pci.push_back(pci_parent(o));
            break;
        case HWLOC_OBJ_OSDEV_OPENFABRICS:
            f.nics.push_back(describe(o, "openfabrics"));
            nic_pci.push_back(pci_parent(o));
            break;
        default:
            break;
        }
    }
    for (size_t g = 0; g < f.gpus.size(); ++g)
        for (size_t n = 0; n < f.nics.size(); ++n)
            if (gpu_pci[g] && nic_pci[n])
                f.gpu_nic_links.push_back({f.gpus[g].pci_busid.empty() ? f.gpus[g].name : f.gpus[g].pci_busid,
                                           f.nics[n].name, pci_path_kind(gpu_pci[g], nic_pci[n])});
    return f;
}

void keep_io(hwloc_topology_t t) {
    // PCI devices and OS devices (GPUs, NICs) are filtered out by default in hwloc 2.
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
}

template <class T> T field(const nlohmann::json& j, const char* name) {
    return json_field<T>(j, name, "topology");
}

nlohmann::json device_json(const OsDevice& d) {
    return {{"name", d.name},
            {"kind", d.kind},
            {"subtype", d.subtype},
            {"pci_busid", d.pci_busid},
            {"pci_vendor", d.pci_vendor},
            {"pci_device", d.pci_device},
            {"pci_link_gbps", d.pci_link_gbps}};
}

std::vector<OsDevice> devices_from_json(const nlohmann::json& j, const char* name) {
    auto arr = field<nlohmann::json>(j, name);
    if (!arr.is_array()) throw Error(std::string("field '") + name + "' must be an array", "topology");
    std::vector<OsDevice> out;
    for (const auto& e : arr) {
        OsDevice d;
        d.name = field<std::string>(e, "name");
        d.kind = field<std::string>(e, "kind");
        d.subtype = field<std::string>(e, "subtype");
        d.pci_busid = field<std::string>(e, "pci_busid");
        d.pci_vendor = field<uint16_t>(e, "pci_vendor");
        d.pci_device = field<uint16_t>(e, "pci_device");
        d.pci_link_gbps = field<double>(e, "pci_link_gbps");
        out.push_back(std::move(d));
    }
    return out;
}

double log2p(double x) {
    return std::log2(1.0 + x);
}

} // namespace

namespace {

Topology load_live() {
    auto t = make_topology();
    keep_io(t.get());
    // The live machine, not whatever HWLOC_XMLFILE/HWLOC_SYNTHETIC a user's environment points at.
    hwloc_topology_set_flags(t.get(), HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM);
    // Not the OpenCL and OpenGL components: they load GPU vendors' ICDs and connect to X servers, which can
    // take seconds or hang, and tell nothing the PCI and CUDA/NVML components do not.
    for (const char* c : kExcludedHwlocComponents)
        hwloc_topology_set_components(t.get(), HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, c);
    load(t.get(), "hwloc (live machine)");
    return t;
}

// The topology from XML text (what a bounded load's child wrote).
TopologyFeatures from_xml_buffer(const std::string& xml) {
    auto t = make_topology();
    keep_io(t.get());
    if (hwloc_topology_set_xmlbuffer(t.get(), xml.data(), static_cast<int>(xml.size()) + 1) != 0)
        throw Error("hwloc cannot read the topology its child process exported", "hwloc (live machine)");
    load(t.get(), "hwloc (live machine)");
    return extract(t.get(), "live");
}

} // namespace

TopologyFeatures topology_from_live() {
    auto t = load_live();
    return extract(t.get(), "live");
}

TopologyFeatures topology_from_live(std::chrono::milliseconds budget) {
    const auto child = run_in_child(
        [] {
            auto t = load_live();
            char* xml = nullptr;
            int len = 0;
            if (hwloc_topology_export_xmlbuffer(t.get(), &xml, &len, 0) != 0)
                throw Error("hwloc cannot export the topology", "hwloc (live machine)");
            std::string out(xml, len > 0 ? static_cast<size_t>(len - 1) : 0);
            hwloc_free_xmlbuffer(t.get(), xml);
            return out;
        },
        budget, 64u << 20); // no real topology is this large
    if (child.end == ChildEnd::timed_out)
        throw Error("hwloc did not load the topology within " + std::to_string(budget.count()) + " ms",
                    "hwloc (live machine)", "a topology load within its budget");
    if (child.end != ChildEnd::finished || child.out.empty())
        throw Error("hwloc could not load the topology (its child process failed)", "hwloc (live machine)");
    return from_xml_buffer(child.out);
}

TopologyFeatures topology_from_xml(const std::string& path) {
    auto t = make_topology();
    keep_io(t.get());
    if (hwloc_topology_set_xml(t.get(), path.c_str()) != 0)
        throw Error("hwloc cannot read this XML topology", path, "a file written by lstopo --of xml");
    load(t.get(), path);
    return extract(t.get(), "xml:" + path);
}

TopologyFeatures topology_from_synthetic(const std::string& description) {
    auto t = make_topology();
    if (hwloc_topology_set_synthetic(t.get(), description.c_str()) != 0)
        throw Error("hwloc refuses the synthetic topology '" + description + "'", "hwloc",
                    "a description like \"pack:2 numa:1 l3:1 core:8 pu:2\"");
    load(t.get(), "synthetic:" + description);
    return extract(t.get(), "synthetic:" + description);
}

nlohmann::json to_json(const TopologyFeatures& t) {
    nlohmann::json gpus = nlohmann::json::array(), nics = nlohmann::json::array();
    for (const auto& d : t.gpus)
        gpus.push_back(device_json(d));
    for (const auto& d : t.nics)
        nics.push_back(device_json(d));
    nlohmann::json j = {{"packages", t.packages},
                        {"numa_nodes", t.numa_nodes},
                        {"cores", t.cores},
                        {"pus", t.pus},
                        {"l1d_bytes", t.l1d_bytes},
                        {"l2_bytes", t.l2_bytes},
                        {"l3_bytes", t.l3_bytes},
                        {"l3_count", t.l3_count},
                        {"memory_bytes", t.memory_bytes},
                        {"gpus", std::move(gpus)},
                        {"nics", std::move(nics)},
                        {"source", t.source}};
    // Only where there are any: a node without both has the record (and the bank's fingerprint) it had.
    if (!t.gpu_nic_links.empty()) {
        auto& links = j["gpu_nic_links"] = nlohmann::json::array();
        for (const auto& l : t.gpu_nic_links)
            links.push_back({{"gpu", l.gpu}, {"nic", l.nic}, {"kind", l.kind}});
    }
    return j;
}

TopologyFeatures topology_from_json(const nlohmann::json& j) {
    if (!j.is_object()) throw Error("topology must be a JSON object", "topology");
    TopologyFeatures t;
    t.packages = field<unsigned>(j, "packages");
    t.numa_nodes = field<unsigned>(j, "numa_nodes");
    t.cores = field<unsigned>(j, "cores");
    t.pus = field<unsigned>(j, "pus");
    t.l1d_bytes = field<uint64_t>(j, "l1d_bytes");
    t.l2_bytes = field<uint64_t>(j, "l2_bytes");
    t.l3_bytes = field<uint64_t>(j, "l3_bytes");
    t.l3_count = field<unsigned>(j, "l3_count");
    t.memory_bytes = field<uint64_t>(j, "memory_bytes");
    t.gpus = devices_from_json(j, "gpus");
    t.nics = devices_from_json(j, "nics");
    t.source = field<std::string>(j, "source");
    if (j.contains("gpu_nic_links")) {
        const auto& links = j["gpu_nic_links"];
        if (!links.is_array()) throw Error("field 'gpu_nic_links' must be an array", "topology");
        for (const auto& l : links) {
            NicLink k{field<std::string>(l, "gpu"), field<std::string>(l, "nic"),
                      field<std::string>(l, "kind")};
            if (std::find(std::begin(kNicLinkKinds), std::end(kNicLinkKinds), k.kind) ==
                std::end(kNicLinkKinds))
                throw Error("gpu_nic_links: unknown kind '" + k.kind + "'", "topology",
                            "pcie-switch, pcie-switches, host-bridge, numa-node or system");
            t.gpu_nic_links.push_back(std::move(k));
        }
    }
    if (t.cores == 0 || t.pus < t.cores)
        throw Error("cores must be > 0 and pus >= cores (got cores=" + std::to_string(t.cores) +
                        " pus=" + std::to_string(t.pus) + ")",
                    "topology");
    return t;
}

const std::vector<std::string>& feature_names() {
    static const std::vector<std::string> names = {
        "log2_cores",  "pus_per_core",          "log2_packages", "log2_numa_nodes", "log2_l3_per_core_kib",
        "log2_l2_kib", "log2_mem_per_core_gib", "log2_gpus",     "log2_nics",       "log2_max_pci_link_gbps"};
    return names;
}

std::vector<double> feature_vector(const TopologyFeatures& t) {
    const double cores = t.cores ? t.cores : 1;
    const double l3_total = static_cast<double>(t.l3_bytes) * (t.l3_count ? t.l3_count : 1);
    double link = 0;
    for (const auto& d : t.gpus)
        link = std::max(link, d.pci_link_gbps);
    for (const auto& d : t.nics)
        link = std::max(link, d.pci_link_gbps);
    return {log2p(t.cores),
            t.cores ? static_cast<double>(t.pus) / cores : 0.0,
            log2p(t.packages),
            log2p(t.numa_nodes),
            log2p(l3_total / cores / 1024.0),
            log2p(static_cast<double>(t.l2_bytes) / 1024.0),
            log2p(static_cast<double>(t.memory_bytes) / cores / (1024.0 * 1024.0 * 1024.0)),
            log2p(static_cast<double>(t.gpus.size())),
            log2p(static_cast<double>(t.nics.size())),
            log2p(link)};
}

} // namespace infrarsi::node
