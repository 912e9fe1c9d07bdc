#!/usr/bin/env bash
# The command line's habits (issue 34, items 5, 6 and 8), through the built `infrarsi`, with no cluster: exit
# status 2 for a usage mistake and 1 for an error; `bank show` and `bank export` of a bank that is not there
# create none; every --json output carries {"format": {"name", "version"}}; `list` names the campaigns under a
# directory with state and best; `run --scheduler slurm` where Slurm does not answer ends at once with an
# error and binds the campaign to nothing; `cancel` stops a campaign for good, and its report says no search
# trial ran; `trial classify --format NAME` reads a framework's log.
set -euo pipefail
export INFRARSI_BANK=off
. "$(dirname "$0")/lib.sh" cli --own-cluster
export SLURM_CONF=$work/no-such-slurm.conf # whatever this machine has, Slurm does not answer here

status_of() { set +e; "$@" >"$work/out" 2>"$work/err"; local rc=$?; set -e; echo $rc; }

# Exit statuses: usage 2, error 1, help 0.
[ "$(status_of "$bin" --no-such-option)" = 2 ] || fail "an unknown option did not exit 2: $(cat "$work/err")"
[ "$(status_of "$bin" run --scheduler mars)" = 2 ] || fail "a bad --scheduler did not exit 2"
[ "$(status_of "$bin" --help)" = 0 ] || fail "--help did not exit 0"
[ "$(status_of "$bin" status --dir "$work/none")" = 1 ] || fail "status of no campaign did not exit 1"
grep -q "no campaign here" "$work/err" || fail "status of no campaign: $(cat "$work/err")"

# trial classify reads a framework's log with --format, the names of [metrics] format; a name it does not know,
# regex without --pattern or --pattern without regex is a usage mistake.
echo '{"state": "COMPLETED", "exit_code": 0}' >"$work/end.json"
titan=$fx/logs/frameworks/torchtitan.log
"$bin" trial classify --record "$work/end.json" --output "$titan" --steps 3 --format torchtitan >"$work/classify.json"
jq -e '.outcome == "ok" and .steps == 3' "$work/classify.json" >/dev/null ||
  fail "classify --format torchtitan: $(cat "$work/classify.json")"
"$bin" trial classify --record "$work/end.json" --output "$titan" --steps 3 >"$work/classify.json"
jq -e '.outcome == "contract_violation" and .steps == 0' "$work/classify.json" >/dev/null ||
  fail "classify without --format read torchtitan's steps: $(cat "$work/classify.json")"
[ "$(status_of "$bin" trial classify --record "$work/end.json" --output "$titan" --format titan)" = 2 ] ||
  fail "an unknown --format did not exit 2: $(cat "$work/err")"
[ "$(status_of "$bin" trial classify --record "$work/end.json" --output "$titan" --format regex)" = 2 ] ||
  fail "--format regex without --pattern did not exit 2: $(cat "$work/err")"
[ "$(status_of "$bin" trial classify --record "$work/end.json" --output "$titan" --format nanogpt --pattern x)" = 2 ] ||
  fail "--pattern without --format regex did not exit 2: $(cat "$work/err")"

# A bank that is not there: named, an error; the default, empty; neither is created.
[ "$(status_of "$bin" bank show --bank "$work/typo.sqlite")" = 1 ] || fail "bank show of a missing bank did not fail"
[ ! -e "$work/typo.sqlite" ] || fail "bank show created the bank it was asked to show"
[ "$(status_of "$bin" bank export --bank "$work/typo.sqlite" "$work/x.json")" = 1 ] || fail "export of a missing bank did not fail"
[ ! -e "$work/typo.sqlite" ] || fail "bank export created a bank"
[ "$(INFRARSI_BANK=$work/default.sqlite status_of "$bin" bank show)" = 0 ] || fail "bank show of the default bank not made yet failed"
grep -q "is empty" "$work/out" || fail "bank show of the default bank not made yet: $(cat "$work/out")"
[ ! -e "$work/default.sqlite" ] || fail "bank show created the default bank"

# No Slurm: run ends within its wait, with the reason, and the campaign stays free to run elsewhere.
"$bin" init "$fx/toyload.contract.toml" --dir "$work/c" >/dev/null
start=$SECONDS
[ "$(status_of "$bin" run --dir "$work/c" --scheduler slurm --scheduler-wait 2 --quiet)" = 1 ] ||
  fail "run on a Slurm that does not answer did not fail"
[ $((SECONDS - start)) -lt 60 ] || fail "run on a Slurm that does not answer took $((SECONDS - start)) s"
grep -q "slurm does not answer" "$work/err" || fail "the error does not say Slurm does not answer: $(cat "$work/err")"
"$bin" status --dir "$work/c" --json >"$work/status.json"
jq -e '.wall_s == 0 and .trials.used == 0' "$work/status.json" >/dev/null || fail "the failed run charged the budget: $(cat "$work/status.json")"
"$bin" report --dir "$work/c" --json >"$work/report.json"
jq -e '.none_promoted.reason == "no_search_trial"' "$work/report.json" >/dev/null ||
  fail "the report does not say no search trial ran: $(jq -c '.none_promoted' "$work/report.json")"
"$bin" report --dir "$work/c" >"$work/report.txt"
grep -q "none: no search trial ran" "$work/report.txt" || fail "the text report blames something else: $(grep -A1 '^Promoted' "$work/report.txt")"

# Cancel (no process drives it): state cancelled; run then does nothing; list shows it.
"$bin" cancel --dir "$work/c" >"$work/cancel.txt" || fail "cancel failed"
"$bin" status --dir "$work/c" --json | jq -e '.state == "cancelled"' >/dev/null || fail "status does not say cancelled"
"$bin" run --dir "$work/c" --scheduler local --quiet || fail "run of a cancelled campaign failed"
"$bin" status --dir "$work/c" --json | jq -e '.trials.used == 0' >/dev/null || fail "a cancelled campaign ran trials"
"$bin" init "$fx/toyload.contract.toml" --dir "$work/user/d" >/dev/null
"$bin" list "$work" --json >"$work/list.json"
jq -e '(.campaigns | length) == 2 and (.campaigns[0].state == "cancelled") and (.campaigns[1].state == "initialized")' \
  "$work/list.json" >/dev/null || fail "list: $(cat "$work/list.json")"
"$bin" list "$work" >"$work/list.txt"
grep -q "^$work/c  cancelled" "$work/list.txt" || fail "list text: $(cat "$work/list.txt")"

# One format convention for every --json output.
for out in "$work/status.json" "$work/report.json" "$work/list.json"; do
  jq -e '.format.name | type == "string"' "$out" >/dev/null || fail "$out has no format object"
done
"$bin" node --json --calibration-ms 20 >"$work/node.json" 2>/dev/null || true
[ ! -s "$work/node.json" ] || jq -e '.format == {"name": "infrarsi-node", "version": 2}' "$work/node.json" >/dev/null ||
  fail "node --json format: $(jq -c .format "$work/node.json")"
echo "ok: exit statuses, classify --format, no bank created by show/export, no-Slurm run fails fast and charges nothing, cancel, list, formats"
rm -rf "$work"
