#!/usr/bin/env bash
# Every preset runs under Slurm with its own resources and its loss decreases over a short run. On a 2-node
# cluster of its own (its own directory and ports, no plugin), so that it runs beside the tests on the shared
# cluster (tests/CMakeLists.txt: the own_cluster lane).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export MINIGPT_BIN=${MINIGPT_BIN:?} INFRARSI_SOURCE_DIR=$here
out=$(mktemp -d /tmp/minigpt-presets.XXXXXX)
export INFRARSI_SLURM_DIR=$out/slurm INFRARSI_SLURM_PORT=$((17700 + ${INFRARSI_TEST_PORT_OFFSET:-0}))
trap '"$here/scripts/slurm-local" stop >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
eval "$("$here/scripts/slurm-local" start --nodes 2 --plugin none)"
fail=0
for f in "$here"/workloads/minigpt/presets/*.env; do
  p=$(basename "$f" .env)
  args=$(sed -n 's/^# slurm: //p' "$f")
  # one job at a time; 6 steps keep the test short
  MINIGPT_PRESET=$p MINIGPT_STEPS=6 sbatch --wait $args -o "$out/$p.out" "$here/sbatch/minigpt.sbatch" > /dev/null || true
  python3 - "$p" "$out/$p.out" <<'PY' || fail=1
import json, sys
name, path = sys.argv[1], sys.argv[2]
steps = [json.loads(l.split(" ", 1)[1]) for l in open(path) if l.startswith("INFRARSI_STEP ")]
if len(steps) < 6:
    print(f"FAIL {name}: {len(steps)} steps"); print(open(path).read()[-2000:]); sys.exit(1)
first, last = steps[0]["loss"], steps[-1]["loss"]
med = sorted(s["step_time_s"] for s in steps[2:])[len(steps[2:]) // 2]
ok = last < first - 0.05
print(f"{'ok  ' if ok else 'FAIL'} {name}: loss {first:.3f} -> {last:.3f}, median step {med:.2f} s, peak rss/node {steps[-1]['peak_rss_node_bytes']/1e6:.0f} MB")
sys.exit(0 if ok else 1)
PY
done
exit $fail
