#!/usr/bin/env bash
# 2-rank data parallel (with bucketed, overlapped all-reduce and ZeRO-1) matches 1 rank at the same global
# batch, and MoE expert parallelism (ep=2) matches replicated experts (ep=1). Runs mpirun locally, no Slurm.
# Tolerance: max relative loss difference per step 1e-4 (float summation order differs between layouts).
set -euo pipefail
BIN=${MINIGPT_BIN:?MINIGPT_BIN must point at the minigpt binary}
export OMPI_MCA_btl=self,tcp OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--steps 6 --seq-len 64 --vocab 128 --d-model 32 --layers 2 --heads 4 --global-batch 4 --peak-gflops 10 --lr 1e-2)
losses() { grep -o '^INFRARSI_STEP .*' | sed 's/^INFRARSI_STEP //' | python3 -c 'import sys,json; print(" ".join(str(json.loads(l)["loss"]) for l in sys.stdin))'; }
compare() { # name a b
    python3 - "$@" <<'PY'
import sys
name, a, b = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
assert len(a) == len(b) == 6, (name, a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"{name}: max relative loss difference {worst:.2e} (tolerance 1e-4)")
print("  A:", " ".join(f"{x:.6f}" for x in a)); print("  B:", " ".join(f"{x:.6f}" for x in b))
sys.exit(0 if worst < 1e-4 else 1)
PY
}
one=$("$BIN" "${common[@]}" --micro-batch 4 --grad-accum 1 | losses)
two=$(mpirun -np 2 "$BIN" "${common[@]}" --micro-batch 1 --grad-accum 2 --bucket-mb 0.01 --overlap 1 --zero1 1 | losses)
compare "dense dp=2 vs dp=1" "$one" "$two"
moe=(--model moe --experts 4 --capacity-factor 2)
ep1=$(mpirun -np 2 "$BIN" "${common[@]}" "${moe[@]}" --micro-batch 2 --ep-size 1 | losses)
ep2=$(mpirun -np 2 "$BIN" "${common[@]}" "${moe[@]}" --micro-batch 2 --ep-size 2 --zero1 1 | losses)
compare "moe ep=2 vs ep=1 on 2 ranks" "$ep1" "$ep2"
echo "bad batch arithmetic is refused:"
if "$BIN" "${common[@]}" --micro-batch 3 2>err.txt; then echo "expected a refusal"; exit 1; fi
grep -q "batch mismatch" err.txt && cat err.txt && rm -f err.txt
