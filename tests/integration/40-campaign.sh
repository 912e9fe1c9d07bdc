#!/usr/bin/env bash
# A small campaign on the toyload fixture, end to end on the real local cluster: init (the out-of-scope and
# protected-file patches are refused before anything runs), doctor, run, verification, report and apply. The
# math-changing patch is never promoted; the user's tree is untouched. It runs from an installed prefix
# (`cmake --install` of the build into a new directory): the prefix's infrarsi submits its trials with the
# prefix's trial wrapper and they run the prefix's infrarsi, found beside the binary, not through the build or
# source tree. Needs SLURM_CONF (scripts/test).
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" campaign
install_prefix "$work/prefix"
tree_before=$(cd "$fx/toyload" && find . -type f -exec sha256sum {} + | sort | sha256sum)

out=$("$bin" init "$fx/toyload.contract.toml" --dir "$work/c")
echo "$out"
grep -q "patch outside_scope refused: touches 'bench/extra.c', outside the editable scope" <<<"$out" || fail "out-of-scope patch not refused at init"
grep -q "patch edit_loss refused: touches protected file 'loss.c'" <<<"$out" || fail "protected-file patch not refused at init"

# The plugin's spool, when the cluster loads it: its root-side trial evidence is what timing is checked against.
# The run finds it itself (plugstack.conf through scontrol's PlugStackConfig): no --spool.
spool=""
plugstack=$(dirname "$SLURM_CONF")/plugstack.conf
if [ -f "$plugstack" ] && grep -q 'infrarsi.so' "$plugstack"; then
  spool=$(grep -o 'spool=[^ ]*' "$plugstack" | head -n1 | cut -d= -f2)
fi
"$bin" run --accept-noise --dir "$work/c" >"$work/run.log" 2>&1 || { cat "$work/run.log"; fail "infrarsi run failed"; }
if [ -n "$spool" ]; then
  file_has "plugin spool $spool \\(the plugin's spool= in $plugstack\\)" "$work/run.log" ||
    fail "the run did not find the plugin's spool $spool by itself"
fi
file_has "trials run $work/prefix/bin/infrarsi trial-exec, submitted with $work/prefix/share/infrarsi/sbatch/trial.sbatch" \
  "$work/run.log" || fail "the campaign's trials did not use the prefix's infrarsi and trial wrapper"
"$bin" report --dir "$work/c" --json >"$work/report.json"
"$bin" report --dir "$work/c"
"$bin" status --dir "$work/c" --json | jq -e '.state == "done" and .trials.used == 8' >/dev/null || fail "status: not done with 8 trials"

r=$work/report.json
# The refused patches never ran.
[ "$(jq '[.trials[] | select(.candidate | test("outside_scope|edit_loss"))] | length' "$r")" = 0 ] || fail "a refused patch ran"
# Doctor: repeats, MDE and phases are stored.
jq -e '.baseline.completed >= 2 and .baseline.minimum_detectable_effect > 0 and (.baseline.phases | length) > 0' "$r" >/dev/null || fail "no doctor result"
# Every search trial is classified; costs are recorded.
jq -e '[.trials[] | select(.kind == "search" and .state != "finished")] | length == 0' "$r" >/dev/null || fail "unfinished trials"
# The math-changing patch: never promoted, and any run of it broke the loss invariant.
[ "$(jq '[.promoted[] | select(.candidate | test("math_shortcut"))] | length' "$r")" = 0 ] || fail "math-changing patch promoted"
[ "$(jq '[.trials[] | select(.kind == "search" and (.candidate | test("math_shortcut")) and .outcome == "ok")] | length' "$r")" = 0 ] \
  || fail "a math-changing trial was scored ok"
# A verified speed-up with the loss held, and its audit path.
jq -e '.promoted | length >= 1' "$r" >/dev/null || fail "nothing promoted (toyload has a 2x micro-batch speed-up)"
jq -e '.promoted[0] | .speedup_ci[0] > 1 + .mde and (.supporting_trials | length) >= 1 and (.pairs | length) >= 2' "$r" >/dev/null \
  || fail "promotion without lower bound above the MDE or without audit"
# Every verification's pairs: each pair's two runs on one node (Slurm's record of where each ran), in both
# orders, node-blocked (a block's two pairs on one node, the next block on another node); a promotion
# reproduced in a re-check on nodes the first stage did not use.
jq -e '[.verifications[] | select(.state == "done" and (.pairs | length) > 0) | .pairs[]] | length > 0 and
       all(.same_node and .baseline_node == .candidate_node and (.baseline_node | length) > 0)' "$r" >/dev/null \
  || fail "a verification pair ran on two nodes"
jq -e '[.verifications[] | select((.pairs | length) >= 2)] | all([.pairs[].order] | unique == ["AB", "BA"])' "$r" >/dev/null \
  || fail "verification pairs not counterbalanced"
jq -e '[.verifications[] | [.pairs[].baseline_node] as $n |
       [range(0; $n | length; 2) | $n[.:. + 2] | map(select(. != null and . != "")) | unique | length] | all(. <= 1)] | all' "$r" >/dev/null \
  || fail "a verification block's pairs not on one node"
jq -e '[.verifications[] | select((.pairs | length) >= 4)] | all([.pairs[].baseline_node] | unique | length >= 2)' "$r" >/dev/null \
  || fail "verification blocks not spread over the nodes"
jq -e '.promoted | all(.reproduced == true and (.recheck.pairs | length) >= 2 and
       ([.recheck.pairs[] | select(.same_node | not)] | length == 0) and
       (([.pairs[].baseline_node] - [.recheck.pairs[].baseline_node]) | length) == ([.pairs[].baseline_node] | length))' "$r" >/dev/null \
  || fail "a promotion without a re-check on other nodes that reproduced it"
"$bin" report --dir "$work/c" >"$work/report.txt"
grep -q "re-check in a fresh allocation: reproduced" "$work/report.txt" || fail "the report does not say the promotion reproduced"
# The memory checked against the limit is the job cgroup's, read by the trial wrapper on the node.
jq -e '[.trials[] | select(.kind == "doctor")][0].result' "$r" >/dev/null || fail "no doctor trial"
result=$(jq -r '[.trials[] | select(.kind == "doctor")][0].result' "$r")
jq -e '.job_cgroup_peak_bytes > 1000000' "$result" >/dev/null || fail "no job cgroup peak in $result"
jq -e '[.trials[] | select(.outcome == "ok")] | all(.peak_memory_bytes > 1000000)' "$r" >/dev/null ||
  fail "an ok trial without its peak memory"

# Evidence the candidate cannot forge: every trial that ran has it (the plugin's, written by root, where the
# cluster loads the plugin; else Slurm's accounting), and the doctor measured the startup it is checked with.
jq -e '[.trials[] | select(.outcome == "ok")] | all(.evidence.elapsed_s > 0)' "$r" >/dev/null ||
  fail "an ok trial has no evidence"
jq -e '[.trials[] | select(.outcome == "ok")] | all(.isolation.in_place == true)' "$r" >/dev/null ||
  fail "an ok trial ran without the campaign directory hidden: $(jq -c '[.trials[] | .isolation][0]' "$r")"
if [ -n "$spool" ]; then
  jq -e '[.trials[] | select(.outcome == "ok")] | all(.evidence.source == "plugin" and .evidence.memory_peak_bytes > 1000000)' "$r" >/dev/null ||
    fail "an ok trial without the plugin's evidence: $(jq -c '[.trials[] | select(.outcome == "ok") | .evidence][0]' "$r")"
  job=$(jq -r '[.trials[] | select(.outcome == "ok")][0].evidence.job' "$r")
  f=$(ls "$spool/trials/${job%_*}/${job#*_}."*.json | head -n1)
  # Root's, readable by the job's group (its orchestrator), by no other user.
  [ "$(stat -c '%u %g %a' "$f")" = "0 $(id -g) 640" ] || fail "trial evidence $f is not root's 0640 in the job's group: $(stat -c '%u %g %a' "$f")"
  [ "$(stat -c '%u %a' "$spool/trials/${job%_*}")" = "0 755" ] || fail "the evidence directory is not root's 0755"
fi

"$bin" apply --dir "$work/c" --to "$work/apply" >/dev/null
grep -q '^TOY_MICRO_BATCH=' "$work/apply/infrarsi.env" || fail "apply wrote no env file"
grep -q '^export TOY_MICRO_BATCH=' "$work/apply/infrarsi-sbatch-snippet.sh" || fail "apply wrote no sbatch snippet"
[ -f "$work/apply/infrarsi-patches/series" ] || fail "apply wrote no patch series"
tree_after=$(cd "$fx/toyload" && find . -type f -exec sha256sum {} + | sort | sha256sum)
[ "$tree_before" = "$tree_after" ] || fail "the user's tree changed"
rm -rf "$work"
echo "ok: campaign init, doctor, run, verify, report, apply"
