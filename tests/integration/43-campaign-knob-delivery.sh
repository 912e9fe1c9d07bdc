#!/usr/bin/env bash
# Knobs delivered the three ways a real job takes them, on the real local cluster (docs/contract.md,
# [knobs.NAME]): an argument appended to the script's arguments (after the contract's fixed ones), a flag, an
# sbatch option of the trial's own job (--cpus-per-task: Slurm allocates it and the job sees
# SLURM_CPUS_PER_TASK), and an environment variable. The workload (tests/fixtures/argload) has no build step.
# Trials with different --cpus-per-task values run as separate array jobs of one batch, the constraint over an
# argument knob and an option knob holds, an argument with spaces and $(...) arrives as written, and report and
# apply show the winner as #SBATCH lines, export lines and an argument list. Needs SLURM_CONF (scripts/test).
set -euo pipefail
export INFRARSI_BANK=off
. "$(dirname "$0")/lib.sh" knob-delivery
cp -r "$fx/argload" "$work/argload"
cp "$fx/argload.contract.toml" "$work/"
"$bin" init "$work/argload.contract.toml" --dir "$work/c" >/dev/null
log=$work/run.log
"$bin" run --dir "$work/c" --scheduler slurm --proposer simple >"$log" 2>&1 || fail "infrarsi run failed"
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
echo "ok: $checked trials saw their arguments, option and environment; batch $split ran as arrays $opts; promoted $(jq -r '.promoted[0].candidate' "$r")"
rm -rf "$work"
