# The preamble the integration test scripts share. Source it right after `set -euo pipefail`:
#   . "$(dirname "$0")/lib.sh" NAME                 # tests on the cluster scripts/test started (SLURM_CONF)
#   . "$(dirname "$0")/lib.sh" NAME --own-cluster   # tests that start a cluster of their own (SLURM_CONF unset)
# A test with a cluster of its own takes fixed ports (17200, 17410, 17600, 17700, 17800, each with the ports
# after it) plus INFRARSI_TEST_PORT_OFFSET (default 0), so two checkouts can run their suites side by side.
# It sets src (the repository), build, bin (infrarsi), daemon (infrarsid), fx (tests/fixtures) and work (a new
# directory /tmp/infrarsi-NAME.XXXXXX, left in place when a test fails), and defines:
#   fail MSG                (also from a wait_for condition) prints FAIL: MSG and the last 30 lines of $log when the test has set log to a file,
#                           then exits 1;
#   wait_for SECS WHAT CMD  waits for what another process produces (a log line, a record, a job state, a file a
#                           job writes): runs CMD every 0.2 s until it succeeds; after SECS it fails the test with
#                           WHAT and CMD's output of its last try (what it saw last). CMD runs in this shell, so a
#                           function can set variables for the test once it succeeds;
#   install_prefix DIR      `cmake --install` of the build into DIR, checks that the prefix holds what an
#                           installation needs, and points bin and daemon at DIR/bin;
#   file_has REGEX FILE...  a condition for wait_for: a line of FILE... matches the extended REGEX; otherwise it
#                           prints the files' last lines.
# Deadlines bound a hung test; they are not timings: on a loaded machine a slurmstepd writes its log line,
# and Slurm changes a job's state, seconds after the command that caused it has returned. Never check such a
# thing once, and never sleep and then check: wait for it. And never pipe a command into `grep -q` (or head):
# under pipefail, grep's early exit can end the writer with SIGPIPE and fail the check although it matched;
# keep the output in a file or variable, then grep it.
src=${INFRARSI_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
build=${INFRARSI_BUILD_DIR:-$src/build}
bin=$build/orchestrator/infrarsi
daemon=$build/orchestrator/infrarsid
fx=$src/tests/fixtures
if [ "${2:-}" = --own-cluster ]; then
  unset SLURM_CONF
else
  : "${SLURM_CONF:?start the cluster first: eval \"\$(scripts/slurm-local start)\"}"
fi
work=$(mktemp -d "/tmp/infrarsi-${1:?lib.sh: give the test a name}.XXXXXX")
log=""
exec {lib_stderr}>&2 # fail's messages reach the test's stderr even from a condition wait_for runs
fail() {
  echo "FAIL: $*" >&$lib_stderr
  [ -n "$log" ] && [ -f "$log" ] && tail -30 "$log" >&$lib_stderr
  exit 1
}
wait_for() {
  local secs=$1 what=$2 deadline=$((SECONDS + $1)) seen=$work/.wait_for.seen
  shift 2
  while :; do
    if "$@" >"$seen" 2>&1; then return 0; fi
    [ "$SECONDS" -lt "$deadline" ] || fail "waited $secs s for $what; last seen: $(tail -c 2000 "$seen")"
    sleep 0.2
  done
}
file_has() {
  local regex=$1
  shift
  grep -qE -- "$regex" "$@" 2>/dev/null && return 0
  tail -n 3 "$@" 2>&1
  return 1
}
install_prefix() {
  local prefix=$1 f
  cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { log=$work/install.log; fail "cmake --install failed"; }
  for f in bin/infrarsi bin/infrarsid share/infrarsi/sbatch/trial.sbatch share/infrarsi/sbatch/minigpt.sbatch \
    share/infrarsi/plugstack.conf.d/infrarsi.conf share/doc/infrarsi/README.md share/doc/infrarsi/orchestrator.md \
    share/infrarsi/workloads/minigpt/CMakeLists.txt share/infrarsi/workloads/minigpt/presets/dense-1node.contract.toml \
    libexec/infrarsi/minigpt; do
    [ -e "$prefix/$f" ] || fail "the installed prefix lacks $f"
  done
  [ -n "$(find "$prefix" -name infrarsi.so)" ] || fail "the installed prefix lacks the plugin infrarsi.so"
  [ -z "$(find "$prefix/share/infrarsi/workloads" -maxdepth 3 -name 'build*')" ] || fail "a build tree was installed"
  bin=$prefix/bin/infrarsi
  daemon=$prefix/bin/infrarsid
}
