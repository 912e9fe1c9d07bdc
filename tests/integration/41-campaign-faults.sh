#!/usr/bin/env bash
# Faults on the real local cluster: an OOM trial is recorded as OOM with its limit; a non-compiling patch is a
# build failure; a daemon killed with SIGKILL mid-batch and restarted ends with the same trial count as an
# uninterrupted run, with no trial lost or duplicated; a contract error names file and line.
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" faults

# A contract with an error: the message names the file and the line.
sed 's/^steps = 5$/steps = "five"/' "$fx/toyload-faults.contract.toml" >"$fx/.bad-$$.contract.toml"
line=$(grep -n '^steps = "five"' "$fx/.bad-$$.contract.toml" | cut -d: -f1)
if msg=$("$bin" init "$fx/.bad-$$.contract.toml" --dir "$work/bad" 2>&1); then rm -f "$fx/.bad-$$.contract.toml"; fail "bad contract accepted"; fi
rm -f "$fx/.bad-$$.contract.toml"
grep -q "\.bad-$$.contract.toml:$line: 'invariants.steps' is a string (expected an integer)" <<<"$msg" || fail "message without file:line: $msg"

# Uninterrupted run (the daemon, until done). --accept-noise: the campaigns here are about faults, and the host
# may be loaded (other tests run beside this one): a noisy baseline must not pause them.
"$bin" init "$fx/toyload-faults.contract.toml" --dir "$work/a" >/dev/null
"$daemon" --accept-noise --campaign "$work/a" --once --idle 1 >"$work/a.log" 2>&1 || { cat "$work/a.log"; fail "daemon run failed"; }
"$bin" report --dir "$work/a" --json >"$work/a.json"
jq -e '[.trials[] | select(.outcome == "oom")] | length >= 1' "$work/a.json" >/dev/null || fail "no OOM trial recorded"
jq -e '[.trials[] | select(.outcome == "oom")][0] | (.peak_memory_bytes == 70 * 1048576) and (.detail | test("limit 70M"))' \
  "$work/a.json" >/dev/null || fail "OOM trial without its limit"
jq -e '[.trials[] | select(.outcome == "build_failure" and (.candidate | test("broken_build")))] | length >= 1' "$work/a.json" \
  >/dev/null || fail "non-compiling patch not recorded as a build failure"
count_a=$(jq '[.trials[] | select(.kind == "search" and .counted and .outcome != "build_failure")] | length' "$work/a.json")

# Interrupted: SIGKILL the daemon while a batch is in Slurm, then restart it.
"$bin" init "$fx/toyload-faults.contract.toml" --dir "$work/b" >/dev/null
"$daemon" --accept-noise --campaign "$work/b" --once --idle 1 >"$work/b1.log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true' EXIT
search_batch_submitted() {
  kill -0 $pid || fail "the daemon ended before its first search batch: $(tail -5 "$work/b1.log")"
  sqlite3 "$work/b/campaign.db" "SELECT count(*) FROM batches WHERE kind = 'search' AND state = 'submitted'" | grep -qv '^0$'
}
wait_for 300 "the daemon to submit a search batch" search_batch_submitted
kill -9 $pid
wait $pid 2>/dev/null || true
trap - EXIT
"$daemon" --accept-noise --campaign "$work/b" --once --idle 1 >"$work/b2.log" 2>&1 || { cat "$work/b2.log"; fail "restarted daemon failed"; }
grep -q "re-attaching to batch" "$work/b2.log" || fail "restart did not re-attach to the submitted batch"
"$bin" report --dir "$work/b" --json >"$work/b.json"
count_b=$(jq '[.trials[] | select(.kind == "search" and .counted and .outcome != "build_failure")] | length' "$work/b.json")
[ "$count_a" = "$count_b" ] || fail "trial counts differ: uninterrupted $count_a, interrupted $count_b"
jq -e '[.trials[] | select(.state != "finished")] | length == 0' "$work/b.json" >/dev/null || fail "a trial was left unfinished"
dups=$(sqlite3 "$work/b/campaign.db" "SELECT count(*) FROM (SELECT job_id FROM trials WHERE job_id != '' GROUP BY job_id HAVING count(*) > 1)")
[ "$dups" = 0 ] || fail "duplicated trials"
jobs=$(sqlite3 "$work/b/campaign.db" "SELECT count(DISTINCT job_id) FROM batches WHERE kind = 'search'")
batches=$(sqlite3 "$work/b/campaign.db" "SELECT count(*) FROM batches WHERE kind = 'search'")
[ "$jobs" = "$batches" ] || fail "a batch was submitted twice"
rm -rf "$work"
echo "ok: OOM recorded with its limit, build failure, SIGKILL restart ($count_b trials both ways), contract error file:line"
