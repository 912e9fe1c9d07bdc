#!/usr/bin/env bash
# The wall-time budget covers verification.
#  A. The search stops before a batch when the time used, that batch and the verification reserve (verify_top x
#     repeats.verify A/B pairs x 2 trials at the doctor's pace) would pass budget.wall_time, and says so.
#  B. A verification that no longer fits in what is left of the budget is not run: it is recorded skipped, with
#     the reason in the log and the report. (The test moves the campaign's start back instead of waiting.)
# Needs SLURM_CONF (scripts/test).
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" wallbudget
t0=$(date +%s)
cp -r "$fx/toyload" "$fx/toyload-patches" "$work/"
# Two trials at a time, as many as the doctor runs: on a host with fewer cores than the local cluster's nodes
# claim, four at once would each get half the time the baseline's runs had, and no candidate would look faster.
contract() { # NAME WALL_TIME VERIFY_PAIRS TRIALS: writes $work/NAME.contract.toml (toyload, no OOM)
  sed -e "s/^name = .*/name = \"$1\"/" \
      -e 's/^mem = .*/mem = "300M"/' \
      -e 's/^TOY_WORK = .*/TOY_WORK = 100000/' \
      -e 's/^candidates = .*/candidates = ["fast_kernel"]/' \
      -e "s/^trials = .*/trials = $4/" \
      -e "s/^batch_size = .*/batch_size = 4\nwall_time = \"$2\"/" \
      -e "s/^verify = .*/verify = $3/" \
      -e 's/^verify_top = .*/verify_top = 1/' \
      -e 's/^max_concurrent = .*/max_concurrent = 2/' \
      "$fx/toyload-faults.contract.toml" >"$work/$1.contract.toml"
  grep -q "^wall_time = \"$2\"" "$work/$1.contract.toml" || fail "could not write the test contract $1"
}

# A. 100 A/B pairs to verify cannot fit in 2 minutes: the search ends before its first batch.
contract reserve 00:02:00 100 8
"$bin" init "$work/reserve.contract.toml" --dir "$work/reserve" >/dev/null
log=$work/reserve.log
"$bin" run --accept-noise --dir "$work/reserve" --no-bank >"$log" 2>&1 || fail "reserve: infrarsi run failed"
grep -q "search ends: wall-time budget 120 s: .* the verification reserve (~[0-9]* s: 1 candidates x 100 A/B pairs" "$log" \
  || fail "reserve: the search did not end for the verification reserve"
"$bin" report --dir "$work/reserve" --json >"$work/reserve.json"
jq -e '.campaign.state == "done" and .budget.trials_used == 0' "$work/reserve.json" >/dev/null \
  || fail "reserve: search trials ran although verification could not have fit"
echo "ok A: $(grep -o 'search ends: wall-time budget.*' "$log")"

# B. Search with verification off, then the budget is spent: verification is skipped and says why.
contract skip 00:30:00 2 4
"$bin" init "$work/skip.contract.toml" --dir "$work/skip" >/dev/null
log=$work/skip.log
"$bin" run --accept-noise --dir "$work/skip" --no-bank --no-verify >"$log" 2>&1 || fail "skip: infrarsi run failed"
db=$work/skip/campaign.db
faster=$(sqlite3 "$db" "SELECT count(*) FROM trials WHERE kind = 'search' AND outcome = 'ok' AND step_time_s < (SELECT min(step_time_s) FROM trials WHERE kind = 'doctor')")
[ "$faster" -ge 1 ] || fail "skip: no search trial beat the baseline, nothing to verify (precondition)"
sqlite3 "$db" "UPDATE campaign_run SET started = started - 1800"
log=$work/skip-verify.log
"$bin" verify --dir "$work/skip" >"$log" 2>&1 || fail "skip: infrarsi verify failed"
grep -q "verification of .* skipped: not verified: the wall-time budget (1800 s) has 0 s left" "$log" \
  || fail "skip: the log does not say the verification was skipped for the wall-time budget"
"$bin" report --dir "$work/skip" --json >"$work/skip.json"
jq -e '.verifications | length == 1 and .[0].state == "skipped" and .[0].promoted == false and
       (.[0].reasons[0] | test("not verified: the wall-time budget"))' "$work/skip.json" >/dev/null \
  || fail "skip: the report does not show the skipped verification with its reason"
[ "$(sqlite3 "$db" "SELECT count(*) FROM trials WHERE kind LIKE 'verify%'")" = 0 ] || fail "skip: verification trials ran"
"$bin" report --dir "$work/skip" >"$work/skip.txt"
grep -q -- "- not verified: the wall-time budget" "$work/skip.txt" || fail "skip: the text report does not give the reason"
echo "ok B: $(grep -o 'verification of .* skipped: .*' "$log")"

rm -rf "$work"
echo "ok: the wall-time budget covers verification: search stops for the reserve, verification skipped with its reason ($(($(date +%s) - t0)) s)"
