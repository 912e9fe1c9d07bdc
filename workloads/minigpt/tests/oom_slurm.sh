#!/usr/bin/env bash
# Under a Slurm --mem limit, a micro-batch past the limit is OOM-killed by the cgroup (JobState OUT_OF_MEMORY)
# while the dense-1node baseline micro-batch fits under the same limit. Needs the local cluster (SLURM_CONF).
set -euo pipefail
: "${SLURM_CONF:?SLURM_CONF is not set: start the cluster (eval \"\$(scripts/slurm-local start)\")}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
export MINIGPT_BIN=${MINIGPT_BIN:?MINIGPT_BIN must point at the minigpt binary} INFRARSI_SOURCE_DIR=$here
out=$(mktemp -d /tmp/minigpt-oom.XXXXXX)
trap 'rm -rf "$out"' EXIT
mem=1200M
state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -1; }
submit() { # micro-batch -> job id (waits)
  MINIGPT_PRESET=dense-1node MINIGPT_STEPS=2 MINIGPT_MICRO_BATCH=$1 MINIGPT_GRAD_ACCUM=$((16 / $1)) MINIGPT_PEAK_GFLOPS=10 \
    sbatch --parsable --wait --nodes=1 --mem=$mem --time=10 -o "$out/mb$1.out" "$here/sbatch/minigpt.sbatch" || true
}
big=$(submit 16)
big_state=$(state "$big"); [ -n "$big_state" ] || big_state=$(grep -q "oom-kill" "$out/mb16.out" && echo OUT_OF_MEMORY || echo unknown)
echo "micro-batch 16 under --mem=$mem: $big_state (estimate: $("$MINIGPT_BIN" --estimate-memory --micro-batch 16 | sed 's/.*"estimated_peak_bytes":\([0-9.e+]*\).*/\1/') bytes)"
grep -m1 "oom-kill" "$out/mb16.out" || true
small=$(submit 4)
small_state=$(state "$small")
echo "micro-batch 4 under --mem=$mem: $small_state"
[ "$big_state" = OUT_OF_MEMORY ] && grep -q INFRARSI_SUMMARY "$out/mb4.out"
