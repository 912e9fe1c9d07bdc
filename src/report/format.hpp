#pragma once
// The names and versions of the machine-readable outputs (`--json` of status, report, bank show, node and
// list). Every output carries {"format": {"name": ..., "version": N}}; a version changes when a field is
// removed, renamed or changes meaning (a new field does not), and each field is documented in
// docs/json-formats.md. The golden-output tests (tests/unit/report_golden_test.cpp) make every change to a
// field a deliberate diff.
#include <nlohmann/json.hpp>

namespace infrarsi::report {

struct Format {
    const char* name;
    int version;
};
inline constexpr Format kStatusFormat{"infrarsi-status", 2}; // 1: best (a trial) had "mfu"
inline constexpr Format kReportFormat{"infrarsi-report", 2}; // 1: patches had "accepted", trials "mfu"
inline constexpr Format kBankFormat{"infrarsi-bank", 1};
inline constexpr Format kNodeFormat{"infrarsi-node", 2}; // version 1 was the string "infrarsi-node/1"
inline constexpr Format kListFormat{"infrarsi-list", 1};

inline nlohmann::json format_json(const Format& f) {
    return {{"name", f.name}, {"version", f.version}};
}

} // namespace infrarsi::report
