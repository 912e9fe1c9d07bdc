#!/usr/bin/env bash
# scripts/slurm-local: start brings N idle nodes, a second start is harmless, stop leaves none of its
# daemons. Uses its own directory and ports, beside the cluster the other tests run on.
set -euo pipefail
. "$(dirname "$0")/lib.sh" lifecycle --own-cluster
dir=$work
export INFRARSI_SLURM_DIR=$dir INFRARSI_SLURM_PORT=$((17200 + ${INFRARSI_TEST_PORT_OFFSET:-0}))
trap '"$src/scripts/slurm-local" stop >/dev/null 2>&1 || true' EXIT

out=$("$src/scripts/slurm-local" start --nodes 2 --plugin none)
[ "$out" = "export SLURM_CONF=$dir/etc/slurm.conf" ] || fail "start printed '$out'"
eval "$out"
idle=$(sinfo -h -N -o '%N %t' | awk '$2=="idle"' | wc -l)
[ "$idle" -eq 2 ] || fail "expected 2 idle nodes, sinfo says: $(sinfo -h -N -o '%N %t' | tr '\n' ' ')"
grep -q "^ConstrainRAMSpace=yes" "$dir/etc/cgroup.conf" || fail "no memory enforcement in cgroup.conf"
grep -q "^DefMemPerCPU=" "$dir/etc/slurm.conf" || fail "no DefMemPerCPU"

ctld=$(cat "$dir/run/slurmctld.pid")
out2=$("$src/scripts/slurm-local" start --nodes 2 --plugin none)
[ "$out2" = "$out" ] || fail "second start printed '$out2'"
[ "$(cat "$dir/run/slurmctld.pid")" = "$ctld" ] || fail "second start restarted slurmctld"

"$src/scripts/slurm-local" status >/dev/null || fail "status says not running"
"$src/scripts/slurm-local" stop
# A daemon that was sent SIGTERM may take a moment to exit.
no_daemons() { ! pgrep -af "$dir/etc/slurm.conf"; }
wait_for 30 "the cluster's daemons to exit" no_daemons
if "$src/scripts/slurm-local" status >/dev/null; then fail "status says running after stop"; fi
rm -rf "$dir"
echo "ok: start, restart, stop"
