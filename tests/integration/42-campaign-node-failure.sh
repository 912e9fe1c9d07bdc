#!/usr/bin/env bash
# A node fails under a running search trial: the node is set DOWN (scontrol update state=down) while the trial
# runs, then resumed.
#  A. The orchestrator's path (trials are submitted --no-requeue): Slurm ends the task NODE_FAIL at once; the
#     trial is recorded node_failure, not counted, its candidate re-run in a later batch, and the campaign ends
#     with the contract's full count of counted search trials.
#  B. Slurm's path (a contract with sbatch_args = ["--requeue"]): Slurm requeues the task and re-runs it (the
#     test shortens Slurm's two-minute requeue delay with StartTime=now); the campaign records the task's last
#     run, notes the requeue, and also ends with the full count.
# A runs by default; `42-campaign-node-failure.sh requeue` runs B (42-campaign-node-failure-requeue.sh).
# Also checks that every batch manifest declares the env names its tasks set ("knobs", which the SPANK plugin's
# trial mode requires). Needs SLURM_CONF (scripts/test).
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" nodefail
pid=""
node=""
downed=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi
  [ -n "$node" ] && scontrol update nodename="$node" state=resume >/dev/null 2>&1
  # A relaunch that raced the old batch step drains the node ("Duplicate jobid"): leave the cluster whole.
  if [ -n "$downed" ]; then
    case "$(sinfo -h -n "$downed" -o '%T' 2>/dev/null)" in
      drain*|down*) scontrol update nodename="$downed" state=resume >/dev/null 2>&1 ;;
    esac
  fi
  return 0
}
trap cleanup EXIT
t0=$(date +%s)

# toyload, 8 search trials in batches of 4, 4 at a time, no OOM, no verification. The trials of search batches
# (not the doctor's, batch 1) wait while <campaign>/hold exists, so the test can fail a node under a running
# one whatever the load on this host; the test removes the hold once the node has failed.
cp -r "$fx/toyload" "$fx/toyload-patches" "$work/"
contract() { # NAME [sed expression]: writes $work/NAME.contract.toml
  sed -e "s/^name = .*/name = \"$1\"/" \
      -e 's/^mem = .*/mem = "300M"/' \
      -e 's/^TOY_WORK = .*/TOY_WORK = 100000/' \
      -e 's/^candidates = .*/candidates = ["fast_kernel"]/' \
      -e "s|^command = .*|command = [\"sh\", \"-c\", \"case \$PWD in */batches/1/*) ;; *) while [ -e \\\\\"\$1\\\\\" ]; do touch held; sleep 0.2; done ;; esac; exec \\\\\"\$0\\\\\"\", \"{build}/toy\", \"{contract_dir}/$1.hold\"]|" \
      -e "${2:-}" \
      "$fx/toyload-faults.contract.toml" >"$work/$1.contract.toml"
  grep -q "{contract_dir}/$1.hold" "$work/$1.contract.toml" || fail "could not write the test contract $1"
}

# Runs campaign NAME until its first search batch holds, sets the node of a held trial DOWN and waits for
# Slurm to end or requeue that task (sets job, index, raw); the campaign goes on in the background ($pid).
fail_a_node_under_a_trial() {
  local name=$1 db=$work/$1/campaign.db held kind st=""
  touch "$work/$name.hold"
  "$bin" init "$work/$name.contract.toml" --dir "$work/$name" >/dev/null
  log=$work/$name.log
  "$bin" run --accept-noise --dir "$work/$name" --no-bank >"$log" 2>&1 &
  pid=$!
  job=""
  node=""
  # Sets job, index and node once a trial of the first search batch holds on a node Slurm says it runs on.
  held_trial_running() {
    kill -0 "$pid" 2>/dev/null || fail "$name: infrarsi run ended before a search batch ran"
    job=$(sqlite3 "$db" "SELECT job_id FROM batches WHERE kind = 'search' AND state = 'submitted' ORDER BY id LIMIT 1" 2>/dev/null || true)
    [ -n "$job" ] || { echo "no search batch submitted yet"; return 1; }
    # A search trial's, not the batch's control's (the baseline beside them, which holds too): what the
    # test checks is a search trial's record and re-queue.
    index=""
    for held in $(find "$work/$name/batches" -mindepth 3 -maxdepth 3 -name held -printf '%h\n' 2>/dev/null); do
      kind=$(sqlite3 "$db" "SELECT kind FROM trials WHERE batch_id = $(basename "$(dirname "$held")") AND array_index = $(basename "$held")" 2>/dev/null || true)
      if [ "$kind" = search ]; then index=$(basename "$held"); break; fi
    done
    [ -n "$index" ] || { echo "search job $job: no search trial holds yet"; return 1; }
    node=$(squeue -h -r -j "${job}_${index}" -t RUNNING -o '%N' 2>/dev/null || true)
    [ -n "$node" ] || { echo "trial ${job}_${index} holds, but squeue does not show it running"; return 1; }
  }
  wait_for 300 "$name: a search trial running and holding" held_trial_running
  raw=$(scontrol -o show job "${job}_${index}" | grep -o '^JobId=[0-9]*' | cut -d= -f2)
  echo "$name: search job $job: setting $node DOWN under $(squeue -h -r -j "$job" -t RUNNING -o '%i %N' | awk -v n="$node" '$2 == n {printf "%s ", $1}')"
  downed=$node
  scontrol update nodename="$node" state=down reason=infrarsi-test
  left_running() {
    st=$(scontrol -o show job "${job}_${index}" 2>&1 | grep -o 'JobState=[A-Z_]*' || true)
    [ "$st" != JobState=RUNNING ] || { echo "$st"; return 1; }
  }
  wait_for 120 "Slurm to end or requeue ${job}_${index} on the downed $node" left_running
  # ReturnToService=2 may have brought the node back already; resume it otherwise.
  scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
  node_back() {
    local ns
    ns=$(sinfo -h -n "$node" -o '%T' 2>&1)
    case "$ns" in idle|mixed|allocated|completing) return 0 ;; esac
    echo "$node is $ns"
    return 1
  }
  wait_for 120 "$name: $node to come back after resume" node_back
  node=""
}

wait_done() { # NAME: waits for the background run, then writes $work/NAME.json
  run_ended() { ! kill -0 "$pid" 2>/dev/null || { tail -1 "$log"; return 1; }; }
  wait_for 900 "$1: infrarsi run to finish" run_ended
  wait "$pid" || fail "$1: infrarsi run failed"
  pid=""
  "$bin" report --dir "$work/$1" --json >"$work/$1.json"
  jq -e '.campaign.state == "done"' "$work/$1.json" >/dev/null || fail "$1: campaign not done"
}

check_budget() { # NAME: exactly the contract's trials counted, every trial finished, manifests declare knobs
  local r=$work/$1.json want counted m
  want=$(sed -n '/^\[budget\]/,/^\[/s/^trials = //p' "$work/$1.contract.toml")
  counted=$(jq '[.trials[] | select(.kind == "search" and .counted and .outcome != "build_failure")] | length' "$r")
  [ "$counted" = "$want" ] || fail "$1: counted search trials: $counted, contract: $want"
  jq -e '.budget.trials_used == .budget.trials' "$r" >/dev/null || fail "$1: budget use does not match the contract"
  jq -e '[.trials[] | select(.state != "finished")] | length == 0' "$r" >/dev/null || fail "$1: a trial was left unfinished"
  for m in "$work/$1"/batches/*/manifest.json; do
    jq -e '.format == "infrarsi-manifest/3" and (.knobs | type == "object")' "$m" >/dev/null || fail "$m has no knobs"
    jq -e '. as $m | all($m.tasks[]; .env | to_entries | all(. as $e | ($m.knobs | has($e.key)) and
           ($m.knobs[$e.key] == null or ($m.knobs[$e.key] | index($e.value)) != null)))' "$m" >/dev/null \
      || fail "$m: a task sets an env name or value that knobs does not declare"
  done
}

# Every trial that was not counted (node failure, cancelled) had its candidate run again in a later batch.
check_requeued() { # NAME
  local db=$work/$1/campaign.db missing
  missing=$(sqlite3 "$db" "SELECT count(*) FROM trials f WHERE f.kind = 'search' AND f.counted = 0 AND NOT EXISTS (
    SELECT 1 FROM trials r WHERE r.candidate_key = f.candidate_key AND r.kind = 'search' AND r.counted = 1
    AND r.state = 'finished' AND r.batch_id > f.batch_id AND r.attempt = f.attempt + 1)")
  [ "$missing" = 0 ] || fail "$1: $missing uncounted trials were not re-queued"
}

phase=${1:-nodefail}
case "$phase" in nodefail|requeue) ;; *) fail "usage: $0 [requeue]" ;; esac

if [ "$phase" = nodefail ]; then
# A. --no-requeue: NODE_FAIL, recorded node_failure, re-queued by the orchestrator.
contract nodefail
fail_a_node_under_a_trial nodefail
shown=$(scontrol -o show job "${job}_${index}")
grep -q 'JobState=NODE_FAIL' <<<"$shown" || fail "nodefail: Slurm did not end ${job}_${index} NODE_FAIL"
# Submitted --no-requeue: Slurm ends the task and does not re-run it itself.
grep -q 'Requeue=0 Restarts=0' <<<"$shown" || fail "nodefail: the trial was requeue-able or requeued by Slurm"
rm -f "$work/nodefail.hold"
wait_done nodefail
db=$work/nodefail/campaign.db
nf=$(sqlite3 "$db" "SELECT count(*) FROM trials WHERE job_id = '${job}_${index}' AND outcome = 'node_failure' AND counted = 0 AND kind = 'search' AND detail LIKE '%NODE_FAIL%'")
[ "$nf" = 1 ] || fail "nodefail: trial ${job}_${index} not recorded as an uncounted node_failure: $(sqlite3 "$db" "SELECT outcome, counted, detail FROM trials WHERE job_id = '${job}_${index}'")"
echo "nodefail: $(sqlite3 "$db" "SELECT 'trial ' || id || ' ' || outcome || ': ' || detail FROM trials WHERE job_id = '${job}_${index}'")"
check_requeued nodefail
check_budget nodefail
rm -rf "$work"
echo "ok: node failure under a running trial (--no-requeue): NODE_FAIL, not requeued by Slurm, recorded node_failure, re-queued, full trial count ($(($(date +%s) - t0)) s)"
exit 0
fi

# B. --requeue in the contract: Slurm re-runs the task; its last run is recorded, with the requeue noted.
contract slurmrequeue 's/^max_concurrent = .*/max_concurrent = 4\nsbatch_args = ["--requeue"]/'
grep -q '^sbatch_args = \["--requeue"\]' "$work/slurmrequeue.contract.toml" || fail "could not write the requeue contract"
fail_a_node_under_a_trial slurmrequeue
shown=$(scontrol -o show job "${job}_${index}")
grep -q 'Requeue=1' <<<"$shown" || fail "slurmrequeue: the task was not requeue-able"
grep -q 'Restarts=1' <<<"$shown" || fail "slurmrequeue: Slurm did not requeue ${job}_${index}"
rm -f "$work/slurmrequeue.hold"
# Slurm holds a requeued job back for two minutes (BeginTime); once the old batch step is gone, start the
# requeued tasks now.
old_step_gone() { ! pgrep -af "slurmstepd: \[$raw\."; }
wait_for 120 "the old batch step of ${job}_${index} to end" old_step_gone
# Past Slurm's requeue states (REQUEUE_FED, REQUEUED, COMPLETING): pending again, or already on its way.
requeue_settled() {
  local st
  st=$(squeue -h -r -j "${job}_${index}" -o '%T' 2>/dev/null || true)
  case "$st" in "" | PENDING | RUNNING | COMPLETED | CANCELLED | FAILED) return 0 ;; esac
  echo "${job}_${index}: $st"
  return 1
}
wait_for 120 "${job}_${index} past Slurm's requeue" requeue_settled
for t in $(squeue -h -r -j "$job" -t PENDING -o '%i'); do scontrol update jobid="$t" StartTime=now || true; done
wait_done slurmrequeue
db=$work/slurmrequeue/campaign.db
row=$(sqlite3 "$db" "SELECT outcome || '|' || counted FROM trials WHERE job_id = '${job}_${index}' AND detail LIKE '%Slurm requeued and re-ran this task%'")
# The re-run completed (ok, counted); or its launch failed and Slurm held it, and the orchestrator cancelled
# it (cancelled, not counted, re-queued); or the kill of the run on the downed node reached the relaunch (same
# job id) before its first step (node_failure, not counted, re-queued: seen in CI on a fast host).
case "$row" in "ok|1"|"cancelled|0"|"node_failure|0") ;; *) fail "slurmrequeue: trial ${job}_${index}: '$row': $(sqlite3 "$db" "SELECT outcome, counted, detail FROM trials WHERE job_id = '${job}_${index}'")" ;; esac
echo "slurmrequeue: $(sqlite3 "$db" "SELECT 'trial ' || id || ' ' || outcome || ': ' || detail FROM trials WHERE job_id = '${job}_${index}'")"
check_requeued slurmrequeue
check_budget slurmrequeue

rm -rf "$work"
echo "ok: node failure under a running trial (--requeue in the contract): Slurm's re-run recorded ($row), full trial count ($(($(date +%s) - t0)) s)"
