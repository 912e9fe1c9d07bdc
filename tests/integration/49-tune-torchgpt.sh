#!/usr/bin/env bash
# Tune an unmodified PyTorch job end to end on the local Slurm cluster. A user (nobody) has torchgpt's train.py
# and job.sbatch, as written for Slurm and torchrun, and a contract written the way docs/tune-your-job.md says.
# They submit `sbatch --infrarsi=tune:ci.contract.toml job.sbatch`; the plugin writes the tune request; their
# `infrarsid --spool --root --scheduler slurm` starts the campaign and runs it to a report. Trials are Slurm jobs
# of the same script with the knobs appended to its arguments; the steps come from the job's own nanoGPT-style
# log (it prints no INFRARSI_ line); the micro-batch of 16 goes over the contract's --mem and is killed by the
# cgroup: an OOM trial. The search space has 4 candidates besides the baseline and the budget 4 trials: every
# one is tried, the OOM one included (the proposer weighs a likely OOM down, never out).
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
# Its own 1-node cluster: a fresh spool, so no request of an earlier run is taken up.
. "$(dirname "$0")/lib.sh" tune-torchgpt --own-cluster
command -v torchrun >/dev/null || fail "no torchrun (scripts/setup installs python3-torch)"
so=$build/spank/infrarsi.so
[ -f "$so" ] || fail "no plugin at $so (build first)"
chmod 0755 "$work"
export INFRARSI_SLURM_DIR=$work/slurm INFRARSI_SLURM_PORT=$((17800 + ${INFRARSI_TEST_PORT_OFFSET:-0}))
passed=0
cleanup() { "$src/scripts/slurm-local" stop >/dev/null 2>&1 || true; [ $passed = 0 ] || rm -rf "$work"; }
trap cleanup EXIT
eval "$("$src/scripts/slurm-local" start --nodes 1 --plugin "$so")"
spool=$INFRARSI_SLURM_DIR/spank-spool
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }

# The user's directory: the job as they run it, and the contract beside it. It is the campaign's source tree,
# locked at init: the job's output and the campaigns go elsewhere.
u=$work/alice
mkdir -p "$u" "$work/logs" "$work/campaigns"
cp "$src/workloads/torchgpt/train.py" "$src/workloads/torchgpt/model.py" "$src/workloads/torchgpt/job.sbatch" "$u/"
cat >"$u/ci.contract.toml" <<'EOF'
name = "torchgpt-ci"
[workload]
source = "."
sbatch_script = "job.sbatch"
args = ["--max_iters=6", "--threads=1"]
[resources]
nodes = 1
ntasks_per_node = 1
mem = "500M"
time_limit = "4"
[knobs.micro_batch]
kind = "pow2"
min = 1
max = 16
arg = "--batch_size={}"
baseline = 8
[knobs.grad_accum]
kind = "pow2"
min = 1
max = 16
arg = "--gradient_accumulation_steps={}"
baseline = 2
[constants]
global_batch = 16
[[constraints]]
product = ["micro_batch", "grad_accum"]
equals = "global_batch"
[metrics]
format = "nanogpt"
[invariants]
steps = 6
warmup_steps = 2
loss_mode = "last_k_mean"
loss_tolerance = 0.02
loss_last_k = 3
[budget]
trials = 4
batch_size = 4
wall_time = "00:15:00"
[repeats]
doctor = 2
verify = 2
verify_top = 0
EOF
chown -R 65534:65534 "$u" "$work/logs" "$work/campaigns"

out=$work/logs/job.out
job=$(cd "$u" && as_user sbatch --parsable --wait --infrarsi=tune:ci.contract.toml -o "$out" job.sbatch) ||
  { log=$out; fail "the submitted job failed"; }
job=${job%%;*}
file_has "^step 12: train loss [0-9.]+, val loss [0-9.]+$" "$out" || fail "the job's own log lacks its evaluation line"
request=$spool/tune/$job.json
wait_for 60 "the tune request $request" test -f "$request"

log=$work/daemon.log
as_user "$daemon" --accept-noise --once --idle 1 --spool "$spool" --root "$work/campaigns" --scheduler slurm >"$log" 2>&1 ||
  fail "infrarsid failed"
file_has "tune request $job.json: campaign $work/campaigns/tune-$job started" "$log" || fail "the request started no campaign"
c=$work/campaigns/tune-$job
as_user "$bin" report --dir "$c" --json >"$work/report.json" || fail "no report"
as_user "$bin" report --dir "$c" >"$work/report.txt"
jq -e '.campaign.state == "done"' "$work/report.json" >/dev/null || fail "the campaign is not done: $(head -c 600 "$work/report.json")"
# Every trial ran the user's script under Slurm; the ones that fit read their steps from the nanoGPT lines.
jq -e '[.trials[] | select(.kind == "doctor" and .outcome == "ok" and .step_s > 0)] | length == 2' "$work/report.json" \
  >/dev/null || fail "the doctor's baseline runs have no step times: $(jq -c '[.trials[] | {kind, outcome, detail}]' "$work/report.json")"
jq -e '[.trials[] | select(.kind == "search")] | length == 4' "$work/report.json" >/dev/null || fail "not 4 search trials"
jq -e '[.trials[] | select(.kind == "search" and .outcome == "oom" and (.candidate | test("micro_batch=16")))] | length == 1' \
  "$work/report.json" >/dev/null ||
  fail "micro_batch=16 is not an OOM trial: $(jq -c '[.trials[] | {candidate, outcome, detail, peak_memory_bytes}]' "$work/report.json")"
jq -e '[.trials[] | select(.kind == "search" and .outcome == "ok")] | length >= 2' "$work/report.json" >/dev/null ||
  fail "fewer than 2 search trials fit: $(jq -c '[.trials[] | {candidate, outcome, detail}]' "$work/report.json")"
# The knobs reached train.py as arguments, after the script's own.
oom_log=$(jq -r '[.trials[] | select(.outcome == "oom")][0].result' "$work/report.json")
oom_log=$(dirname "$oom_log")/log.txt
file_has "tokens per iteration will be: 2,048 \(1 ranks x 1 micro-steps x 16 x 128\)" "$oom_log" ||
  fail "the OOM trial did not run micro-batch 16"
if grep -rl "INFRARSI_" "$c"/batches/*/*/log.txt >"$work/infrarsi-lines.txt" 2>/dev/null; then
  fail "a trial log has INFRARSI_ lines: $(cat "$work/infrarsi-lines.txt")"
fi
passed=1
echo "ok: torchgpt tuned from sbatch --infrarsi=tune (job $job): $(jq -c '[.trials[] | .outcome] | group_by(.) | map({(.[0]): length}) | add' "$work/report.json")"
