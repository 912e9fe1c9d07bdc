# The preamble the campaign integration tests share. Source it right after `set -euo pipefail`:
#   . "$(dirname "$0")/lib.sh" NAME
# It sets src (the repository), build, bin (infrarsi), daemon (infrarsid), fx (tests/fixtures) and work (a new
# directory /tmp/infrarsi-NAME.XXXXXX, left in place when a test fails), checks that SLURM_CONF names a running
# cluster's configuration, and defines fail MSG: prints FAIL: MSG and the last 30 lines of $log when the test
# has set log to a file, then exits 1.
src=${INFRARSI_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
build=${INFRARSI_BUILD_DIR:-$src/build}
bin=$build/orchestrator/infrarsi
daemon=$build/orchestrator/infrarsid
fx=$src/tests/fixtures
: "${SLURM_CONF:?start the cluster first: eval \"\$(scripts/slurm-local start)\"}"
work=$(mktemp -d "/tmp/infrarsi-${1:?lib.sh: give the test a name}.XXXXXX")
log=""
fail() {
  echo "FAIL: $*" >&2
  [ -n "$log" ] && [ -f "$log" ] && tail -30 "$log" >&2
  exit 1
}
