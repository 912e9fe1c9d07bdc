#!/usr/bin/env bash
# The plugin under plugstack.conf arguments the main test cluster does not use, on its own 2-node cluster:
# a spool it cannot write never fails a job; trial-mode errors fail the task, `required` or `optional`, and
# each trial task leaves root's evidence in the spool; an unknown key
# is refused by name; allow_off=no and default_mode=off do what they say. plugstack.conf is read afresh by
# srun, sbatch and every slurmstepd, so each case rewrites it without restarting daemons.
set -euo pipefail
. "$(dirname "$0")/lib.sh" spank-site --own-cluster
so=$build/spank/infrarsi.so
[ -f "$so" ] || fail "no plugin at $so (build first)"
dir=$work
chmod 0755 "$dir"
export INFRARSI_SLURM_DIR=$dir INFRARSI_SLURM_PORT=$((17410 + ${INFRARSI_TEST_PORT_OFFSET:-0}))
passed=0
cleanup() { "$src/scripts/slurm-local" stop >/dev/null 2>&1 || true; [ $passed = 0 ] || rm -rf "$work"; }
trap cleanup EXIT

# A spool that is a regular file: the plugin can neither create nor use it.
echo "not a directory" >"$dir/spool-file"
eval "$("$src/scripts/slurm-local" start --nodes 2 --plugin "$so" --plugin-args "spool=$dir/spool-file")"
plugstack=$dir/etc/plugstack.conf
# slurmstepd writes its log lines, and may do so after srun has returned: wait for them.
logs_have() { file_has "$1" "$dir"/log/slurmd-n*.log; }
records() { wc -l <"$spool/allocations.jsonl" 2>/dev/null || echo 0; }
records_are() { local n; n=$(records); [ "$n" -eq "$1" ] || { echo "$n records"; return 1; }; }

# 1. Unwritable spool: the job runs and succeeds; the plugin says why it recorded nothing.
out=$(srun -N2 -n2 --infrarsi echo ran) || fail "a job failed because of the plugin's spool"
[ "$(grep -c ran <<<"$out")" -eq 2 ] || fail "expected 2 tasks to run, got: $out"
wait_for 60 "a log line about the bad spool" logs_have "infrarsi: record skipped: .*spool-file.*not a directory"
[ "$(cat "$dir/spool-file")" = "not a directory" ] || fail "the plugin wrote into a file that is not its spool"

# 2. A spool others can write is refused, sticky or not (anyone could plant a FIFO or a link there); the job
# still runs.
for mode in 0777 1777; do
    mkdir -p "$dir/open-spool-$mode" && chmod "$mode" "$dir/open-spool-$mode"
    echo "required $so spool=$dir/open-spool-$mode" >"$plugstack"
    srun -N1 true || fail "a spool of mode $mode failed the job"
    wait_for 60 "a log line about the spool of mode $mode" logs_have "open-spool-$mode: spool is writable by others"
    [ ! -e "$dir/open-spool-$mode/allocations.jsonl" ] || fail "records written into a spool of mode $mode"
done

# 2b. A FIFO where the records file goes: the step starts at once (the open does not wait for a reader), the
# record is skipped and logged. It used to hang the step until someone opened the FIFO.
mkdir -m 0755 "$dir/fifo-spool" && mkfifo "$dir/fifo-spool/allocations.jsonl"
echo "required $so spool=$dir/fifo-spool" >"$plugstack"
timeout 120 srun -N1 true || fail "a FIFO in the spool held or failed the job"
wait_for 60 "a log line about the FIFO" logs_have "fifo-spool/allocations.jsonl: (cannot open: No such device or address|is not a regular file)"

# 2c. A user's lock on the records file (readable by all) does not hold a job's start: root never locks a
# file others can open. It used to wait for the user's lock (44 s here while `nobody` held it).
mkdir -m 0755 "$dir/lock-spool" && install -m 0644 /dev/null "$dir/lock-spool/allocations.jsonl"
echo "required $so spool=$dir/lock-spool" >"$plugstack"
# One process holds the lock (setpriv and bash exec into the sleep that keeps the locked descriptor), so the kill
# below ends it; its output is kept off ctest's pipe, which a leftover sleep held open for two minutes.
setpriv --reuid=65534 --regid=65534 --clear-groups -- \
  bash -c 'exec 9<"$1" && flock -s 9 && exec sleep 120' lock-holder "$dir/lock-spool/allocations.jsonl" \
  </dev/null >/dev/null 2>&1 &
holder=$!
wait_for 30 "nobody's shared lock" bash -c "! flock -n -x '$dir/lock-spool/allocations.jsonl' true"
start=$(date +%s.%N)
timeout 120 srun -N1 true || fail "a user's shared lock on the records file held or failed the job"
echo "srun -N1 true with nobody holding a shared lock on the records file: $(echo "$(date +%s.%N) - $start" | bc) s"
spool_records=$dir/lock-spool
wait_for 60 "the record written beside the user's lock" bash -c "[ \"\$(wc -l <'$spool_records/allocations.jsonl')\" -ge 1 ]"
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true

# 3. required + trial mode: an index the manifest lacks fails that array task, with the reason.
spool=$dir/spool
echo "required $so spool=$spool" >"$plugstack"
cat >"$dir/manifest.json" <<JSON
{"format": "infrarsi-manifest/2", "campaign": "site", "knobs": {"OMP_NUM_THREADS": ["1"]},
 "tasks": [{"index": 0, "trial_id": "t0", "env": {"OMP_NUM_THREADS": "1"}, "result": "$dir/t0.json"}]}
JSON
set +e
INFRARSI_MANIFEST=$dir/manifest.json sbatch --wait --array=0-1 --infrarsi=trial -o "$dir/trial-%a.out" \
  --wrap 'echo trial=$INFRARSI_TRIAL_ID' >/dev/null 2>&1
rc=$?
set -e
[ $rc -ne 0 ] || fail "an array task without a manifest entry did not fail"
grep -q "trial=t0" "$dir/trial-0.out" || fail "index 0 did not get its trial: $(cat "$dir/trial-0.out")"
grep -q "no trial for array index 1" "$dir/trial-1.out" || fail "index 1's error is not in its output"
if grep -q "trial=" "$dir/trial-1.out"; then fail "index 1 ran its script despite the error"; fi

# 3b. optional + trial mode: Slurm ignores an optional plugin's errors, yet a task without its settings must
# not run the script's defaults (the baseline) and end COMPLETED: it ends with exit 97 and says why. Each
# task's batch step leaves root's trial evidence in the spool (start, end, exit status, memory peak).
echo "optional $so spool=$spool" >"$plugstack"
set +e
job=$(INFRARSI_MANIFEST=$dir/manifest.json sbatch --parsable --wait --array=0-1 --infrarsi=trial \
  -o "$dir/opt-%a.out" --wrap 'echo trial=$INFRARSI_TRIAL_ID' 2>/dev/null)
rc=$?
set -e
[ $rc -ne 0 ] || fail "under optional, an array task without a manifest entry did not fail"
grep -q "trial=t0" "$dir/opt-0.out" || fail "optional: index 0 did not get its trial: $(cat "$dir/opt-0.out")"
grep -q "infrarsi: trial not run: .*no trial for array index 1" "$dir/opt-1.out" ||
  fail "optional: index 1's error is not in its output: $(cat "$dir/opt-1.out")"
if grep -q "trial=" "$dir/opt-1.out"; then fail "optional: index 1 ran its script with the defaults"; fi
job=${job%%;*}
evidence() { # TASK EXIT: root's record of that task, with that exit status
  local f
  f=$(ls "$spool/trials/$job/$1."*.json 2>/dev/null | head -n1)
  [ -n "$f" ] || { echo "no evidence for ${job}_$1 in $spool/trials"; return 1; }
  # root's, readable by the job's group only (other users would read its job name)
  [ "$(stat -c '%u %g %a' "$f")" = "0 $(id -g) 640" ] || { echo "$f: $(stat -c '%u %g %a' "$f")"; return 1; }
  jq -e --arg j "${job}_$1" --argjson x "$2" '.source == "plugin" and .job == $j and .exit_code == $x and .elapsed_s > 0 and .end_epoch >= .start_epoch' "$f"
}
wait_for 60 "the plugin's evidence of task 0 (exit 0)" evidence 0 0
wait_for 60 "the plugin's evidence of task 1 (exit 97)" evidence 1 97

# 4. An unknown key is refused, naming it.
echo "required $so spool=$spool colour=blue" >"$plugstack"
if err=$(srun -N1 true 2>&1); then fail "srun ran with an unknown plugstack key"; fi
grep -q "unknown plugstack argument 'colour'" <<<"$err" || fail "the refusal does not name the key: $err"

# 5. allow_off=no: users cannot opt out; default_mode=off: only jobs that ask are recorded.
echo "required $so spool=$spool allow_off=no" >"$plugstack"
if err=$(srun -N1 --infrarsi=off true 2>&1); then fail "--infrarsi=off accepted with allow_off=no"; fi
grep -q "not allowed here" <<<"$err" || fail "allow_off refusal unclear: $err"
echo "required $so spool=$spool default_mode=off calibration_ms=50" >"$plugstack"
before=$(records)
srun -N1 true
# Under default_mode=off, a job that does not ask is not recorded; one that asks is, and its record is the next.
asked=$(srun -N1 --infrarsi bash -c 'echo $SLURM_JOB_ID')
wait_for 60 "the record of the job that asked under default_mode=off (and only it)" records_are $((before + 1))
tail -1 "$spool/allocations.jsonl" | jq -e --argjson id "$asked" '.job_id == $id' >/dev/null || fail "the new record is not job $asked's: $(tail -1 "$spool/allocations.jsonl")"
tail -1 "$spool/allocations.jsonl" | grep -q '"budget_ms":50.0' || fail "calibration_ms=50 not applied"
[ "$(stat -c %a "$spool")" = 755 ] || fail "spool created with mode $(stat -c %a "$spool")"
[ "$(stat -c %a "$spool/allocations.jsonl")" = 644 ] || fail "records file mode $(stat -c %a "$spool/allocations.jsonl")"

passed=1
echo "ok: unwritable and open spools, required and optional trial errors, trial evidence, unknown key, allow_off, default_mode"
