#!/usr/bin/env bash
# Knobs delivered the three ways a real job takes them, on the real local cluster (docs/contract.md,
# [knobs.NAME]): an argument appended to the script's arguments (after the contract's fixed ones), a flag, an
# sbatch option of the trial's own job (--cpus-per-task: Slurm allocates it and the job sees
# SLURM_CPUS_PER_TASK), and an environment variable. The workload (tests/fixtures/argload) has no build step.
# Trials with different --cpus-per-task values run as separate array jobs of one batch, the constraint over an
# argument knob and an option knob holds, an argument with spaces and $(...) arrives as written, and report and
# apply show the winner as #SBATCH lines, export lines and an argument list. A second campaign checks the loss
# with loss_mode = "final_eval": the doctor's runs at seeds 0, 1, 2 (seed_arg) calibrate the tolerance, and the
# setting that moves the final evaluation loss (mode=b) is a loss-invariant violation while the curves agree.
# Needs SLURM_CONF (scripts/test).
set -euo pipefail
export INFRARSI_BANK=off
. "$(dirname "$0")/lib.sh" knob-delivery
cp -r "$fx/argload" "$work/argload"
cp "$fx/argload.contract.toml" "$work/"
"$bin" init "$work/argload.contract.toml" --dir "$work/c" >/dev/null
log=$work/run.log
"$bin" run --accept-noise --dir "$work/c" --scheduler slurm --proposer simple >"$log" 2>&1 || fail "infrarsi run failed"
"$bin" report --dir "$work/c" --json >"$work/report.json"
r=$work/report.json

# Every trial that ran saw exactly its candidate's settings, each through its own channel.
checked=0 cpus2=0
while IFS=$'\t' read -r result mb verbose cpus mode; do
  tlog=$(dirname "$result")/log.txt
  [ -f "$tlog" ] || fail "no log for $result"
  want="seen: cpus=$cpus mb=$mb mode=$mode verbose=$([ "$verbose" = true ] && echo 1 || echo 0) label=[a b \$(touch pwned)]"
  grep -qxF -- "$want" "$tlog" || fail "trial $result saw '$(grep seen: "$tlog")', not '$want'"
  [ "$mb" -le 1 ] || [ "$cpus" -le 1 ] || fail "the constraint micro_batch * cpus <= 2 was broken by $result"
  checked=$((checked + 1))
  [ "$cpus" = 2 ] && cpus2=$((cpus2 + 1))
done < <(sqlite3 -separator $'\t' "$work/c/campaign.db" \
  "SELECT result_path, json_extract(candidate, '$.knobs.micro_batch'),
          CASE json_extract(candidate, '$.knobs.verbose') WHEN 1 THEN 'true' ELSE 'false' END,
          json_extract(candidate, '$.knobs.cpus'), json_extract(candidate, '$.knobs.mode')
   FROM trials WHERE outcome = 'ok'")
[ "$checked" -ge 8 ] || fail "only $checked trials ran ok"
[ "$cpus2" -ge 1 ] || fail "no trial ran with --cpus-per-task=2"
[ -z "$(find "$work" -name pwned)" ] || fail "an argument was run through a shell"
# Slurm allocated what the option asked for: the array job of the cpus=2 trials has NumCPUs=2.
split=$(sqlite3 "$work/c/campaign.db" "SELECT batch_id FROM arrays GROUP BY batch_id HAVING COUNT(*) > 1 LIMIT 1")
[ -n "$split" ] || fail "no batch was split into arrays by its sbatch options"
opts=$(sqlite3 "$work/c/campaign.db" "SELECT group_concat(options, ' ') FROM arrays WHERE batch_id = $split")
grep -qF -- '--cpus-per-task=1' <<<"$opts" && grep -qF -- '--cpus-per-task=2' <<<"$opts" \
  || fail "batch $split's arrays do not differ in --cpus-per-task: $opts"

# The winner in the form it is applied.
jq -e '.promoted | length >= 1' "$r" >/dev/null || fail "nothing promoted (micro-batch 2 halves the step time)"
"$bin" report --dir "$work/c" >"$work/report.txt"
"$bin" apply --dir "$work/c" --to "$work/out" >/dev/null
snippet=$work/out/infrarsi-sbatch-snippet.sh
jq -e '.promoted[0].sbatch_options[0] | test("^--cpus-per-task=[12]$")' "$r" >/dev/null || fail "no sbatch option in the report"
opt=$(jq -r '.promoted[0].sbatch_options[0]' "$r")
grep -qxF "#SBATCH $opt" "$snippet" || fail "the snippet lacks '#SBATCH $opt'"
grep -qF "#SBATCH $opt" "$work/report.txt" || fail "the report lacks '#SBATCH $opt'"
grep -qE "^export ARGLOAD_MODE=[ab]$" "$snippet" || fail "the snippet lacks the export line"
grep -qE "^infrarsi_args=\(--micro-batch=[12]( --verbose)?\)$" "$snippet" || fail "the snippet lacks the arguments: $(cat "$snippet")"
grep -qE "arguments: --micro-batch=[12]" "$work/report.txt" || fail "the report lacks the arguments"

# final_eval: the same job, its loss judged by its final evaluation.
sed -e 's/^loss_mode = .*/loss_mode = "final_eval"\nseed_arg = "--seed={}"/' -e '/^loss_tolerance/d' \
  -e 's/^doctor = 2/doctor = 3/' "$work/argload.contract.toml" >"$work/eval.contract.toml"
"$bin" init "$work/eval.contract.toml" --dir "$work/e" >/dev/null
log=$work/eval-run.log
"$bin" run --accept-noise --dir "$work/e" --scheduler slurm --proposer simple >"$log" 2>&1 || fail "infrarsi run (final_eval) failed"
db=$work/e/campaign.db
seeds=$(sqlite3 "$db" "SELECT result_path FROM trials WHERE kind = 'doctor' ORDER BY id" | while read -r p; do
  sed -n 's/^seed: //p' "$(dirname "$p")/log.txt"; done | tr '\n' ' ')
[ "$seeds" = "0 1 2 " ] || fail "the doctor's runs were not at seeds 0 1 2: '$seeds'"
[ "$(sqlite3 "$db" "SELECT DISTINCT json_extract(candidate, '$.knobs.mode') FROM trials WHERE kind = 'search'" | sort | tr -d '\n')" = ab ] \
  || fail "the search did not try both modes"
calibrated=$(sqlite3 "$db" "SELECT message FROM events WHERE message LIKE 'doctor: final evaluation loss%'")
grep -qE "final evaluation loss 2.604 \+- 0.004 \(sd over 3 seeds\); tolerance 0.0199" <<<"$calibrated" \
  || fail "no calibrated tolerance in the campaign's log: '$calibrated'"
bad=$(sqlite3 "$db" "SELECT COUNT(*) FROM trials WHERE kind = 'search' AND json_extract(candidate, '$.knobs.mode') = 'b'
                     AND NOT (outcome = 'contract_violation' AND violation = 'loss_invariant')")
[ "$bad" = 0 ] || fail "$bad search trials with mode=b were not loss-invariant violations"
good=$(sqlite3 "$db" "SELECT COUNT(*) FROM trials WHERE kind = 'search' AND json_extract(candidate, '$.knobs.mode') = 'a'
                      AND outcome != 'ok'")
[ "$good" = 0 ] || fail "$good search trials with mode=a failed"
"$bin" report --dir "$work/e" --json >"$work/eval-report.json"
jq -e '.promoted | length >= 1 and (.[0].candidate | test("mode=a"))' "$work/eval-report.json" >/dev/null \
  || fail "final_eval: nothing promoted, or a mode=b candidate"

echo "ok: $checked trials saw their arguments, option and environment; batch $split ran as arrays $opts; promoted $(jq -r '.promoted[0].candidate' "$r")"
rm -rf "$work"
