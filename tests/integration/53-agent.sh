#!/usr/bin/env bash
# An agent writes the patches (issue 31, docs/agent.md), end to end on the real local cluster: minigpt's dense
# preset with the reference agent (agents/reference: rules, not an LLM) and no patch catalog. The agent's call
# runs contained; its patches are stored in the campaign, built in sandboxes and searched; its fused attention
# (claimed 1.35x; about 1.7x measured at this test's attention-bound shape) is promoted after the equivalence check and the A/B verification with
# its re-check; its window attention, which changes the model's math without saying so, is refused by the
# checks; its claims stand against what was measured in the report. Needs SLURM_CONF (scripts/test).
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" agent
command -v python3 >/dev/null || fail "no python3 (the reference agent is a Python script)"

# The preset, smaller: fewer knob values, two doctor runs, the agent's three first-call patches (window
# attention, fused attention and fused bias-GELU) in one batch; which of them the agent ranks first follows
# the doctor's phase times, so the test takes all three. An attention-bound shape (2 layers, d_model 64,
# 8 heads, 1024 positions, vocabulary 512) and one thread a rank: the batch's trials share the host's two
# cores, and there two spinning OpenMP threads a trial made a 2x gain measure anywhere from 0.6x to 1.5x (the
# preset's shape at two threads: 1.00x in one CI run), where one thread a trial measured 1.66-1.73x for this
# shape in three concurrent runs out of three (1.21x for the preset's shape).
preset=$src/workloads/minigpt/presets/dense-1node-agent.contract.toml
sed -e 's|^source = ".."|source = "'"$src"'/workloads/minigpt"|' \
    -e 's|^sbatch_script = "[^"]*"|sbatch_script = "'"$src"'/sbatch/minigpt.sbatch"|' \
    -e 's|{contract_dir}/../../..|'"$src"'|' \
    -e 's|^max = 16|max = 4|' \
    -e 's|^MINIGPT_LAYERS = .*|MINIGPT_LAYERS = 2|' -e 's|^MINIGPT_D_MODEL = .*|MINIGPT_D_MODEL = 64|' \
    -e 's|^MINIGPT_HEADS = .*|MINIGPT_HEADS = 8|' -e 's|^MINIGPT_SEQ_LEN = .*|MINIGPT_SEQ_LEN = 1024|' \
    -e 's|^MINIGPT_VOCAB = .*|MINIGPT_VOCAB = 512|' -e '/^\[knobs.threads\]/,/^baseline/s|^baseline = 2|baseline = 1|' \
    -e 's|^trials = 10|trials = 3|' -e 's|^doctor = 3|doctor = 2|' -e 's|^wall_time = .*|wall_time = "00:20:00"|' \
    "$preset" >"$work/agent.contract.toml"
grep -q '^MINIGPT_SEQ_LEN = 1024' "$work/agent.contract.toml" &&
  sed -n '/^\[knobs.threads\]/,/^baseline/p' "$work/agent.contract.toml" | grep -q '^baseline = 1$' ||
  fail "the preset's shape or its threads knob changed: this test's edits of it no longer apply"
# A looser rule than the preset's (this test is about the agent's path, not the rule's stringency): a
# 1.2x gain is decided in fewer pairs.
printf '\n[verify]\nalpha = 0.2\nmin_speedup = 0.0\n' >>"$work/agent.contract.toml"
grep -q '^\[agent\]' "$work/agent.contract.toml" || fail "the preset has no [agent] section"
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$work
  sed -i 's|"-DCMAKE_BUILD_TYPE=Release"\]|"-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]|' \
    "$work/agent.contract.toml"
fi

"$bin" init "$work/agent.contract.toml" --dir "$work/c" >"$work/init.log"
log=$work/run.log
"$bin" run --accept-noise --dir "$work/c" >"$log" 2>&1 || fail "infrarsi run failed"
"$bin" report --dir "$work/c" --json >"$work/report.json"
"$bin" report --dir "$work/c" >"$work/report.txt"
cat "$work/report.txt"
r=$work/report.json

# The agent was called, contained, and answered.
jq -e '.agent.calls | length >= 1' "$r" >/dev/null || fail "the agent was never called"
jq -e '.agent.calls[0] | .outcome == "ok" and .trigger == "after_doctor" and .accepted == 3 and .isolated' "$r" >/dev/null ||
  fail "the agent's first call did not answer with patches, contained"
fa=$(jq -r '[.patches[] | select(.id | test("^agent1-fused-attention$"))][0].id // empty' "$r")
wa=$(jq -r '[.patches[] | select(.id | test("^agent1-local-window-attention$"))][0].id // empty' "$r")
[ -n "$fa" ] && [ -n "$wa" ] || fail "the agent's fused and window attention patches are not in the campaign"
[ -f "$work/c/agent/patches/$fa.patch" ] || fail "the agent's patch is not stored in the campaign"

# The window attention changes the math: never promoted, and a trial (the contract's loss tolerance) or the
# equivalence check (the same losses at a fresh seed) refused it. Which one depends on the shape: early in
# training a 128-position window can keep the losses within the contract's 0.1%.
jq -e --arg w "$wa" '[.promoted[] | select(.candidate | contains($w))] | length == 0' "$r" >/dev/null ||
  fail "the math-changing agent patch was promoted"
jq -e --arg w "$wa" '([.trials[] | select((.candidate | contains($w)) and .outcome == "contract_violation")] | length > 0)
    or ([.patches[] | select(.id == $w and .state == "equivalence_refused")] | length == 1)' "$r" >/dev/null ||
  fail "neither a trial nor the equivalence check refused the math-changing agent patch"

# The fused attention is promoted, verified and reproduced, and apply writes it into the patch series.
jq -e --arg f "$fa" '[.promoted[] | select((.candidate | contains($f)) and .reproduced == true)] | length >= 1' "$r" >/dev/null ||
  fail "the agent's fused attention was not promoted with a reproduced re-check"
"$bin" apply --dir "$work/c" --to "$work/apply" >/dev/null || fail "apply failed"
ls "$work/apply/infrarsi-patches/" | grep -q -- "-$fa.patch" || fail "apply did not write the agent's patch"
cmp -s "$work/apply/infrarsi-patches/"*"-$fa.patch" "$work/c/agent/patches/$fa.patch" || fail "apply wrote another patch"

# Claims against measurements: the fused attention's claim (1.35x) is in the report beside what trials measured.
jq -e --arg f "$fa" '[.agent.claims[] | select(.id == $f)][0] | .claimed.speedup == 1.35 and .measured.speedup > 1' "$r" >/dev/null ||
  fail "the report does not show the fused attention's claim against its measurement"
grep -q "claimed 1.35x, measured" "$work/report.txt" || fail "the text report does not show claimed against measured"
echo "PASS: 53-agent"
