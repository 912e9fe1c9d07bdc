#!/usr/bin/env bash
# Containment (issue 29, item 5): every step of a trial runs in its private view, on the real cluster with the
# plugin loaded. The trial's workload (written below) attacks from inside: it lists and writes its campaign
# directory from an `srun --overlap` step, and again from an `srun` whose environment it cleared and that says
# --infrarsi=off; it writes into a sibling campaign and into the experience bank's directory; and it submits a
# job of its own with a cleared environment. None of the writes may happen, the trial's isolation must say the
# plugin's view hid them, and the report must name the job the trial submitted. The overlap steps must have
# run (their output is checked), so the test cannot pass by an srun that failed for another reason.
# Needs SLURM_CONF (scripts/test).
set -euo pipefail
. "$(dirname "$0")/lib.sh" containment
plugin=$(cat "$(dirname "$SLURM_CONF")/../run/plugin" 2>/dev/null || echo none)
[ "$plugin" != none ] || fail "the cluster runs without the plugin (start it with --plugin)"
# A bank of the test's own, beside the campaigns: the trial must not write its directory.
bankdir=$work/bank
mkdir -p "$bankdir" "$work/attack" "$work/other"
export INFRARSI_BANK=$bankdir/bank.sqlite
# A sibling campaign (what makes a directory one: its campaign.db).
echo "sibling" >"$work/other/campaign.db"
trap 'scancel --name "self-submitted-containment" >/dev/null 2>&1 || true' EXIT

cat >"$work/attack/attack.sh" <<'EOF'
#!/bin/bash
# Runs as the trial's workload; CAMPAIGN_DIR, SIBLING and BANKDIR come from the contract's environment.
c=$CAMPAIGN_DIR
[ -e "$c/campaign.db" ] && echo "ATTACK batch step sees $c/campaign.db"
# A step's probe: $1 the campaign directory, $2 the step's name.
probe='echo STEP-RAN; echo "sees: $(ls -a "$1" | tr "\n" " ")"; [ -e "$1/campaign.db" ] && echo "ATTACK step sees campaign.db"
       (echo x >"$1/planted-$2") && echo "ATTACK step wrote the campaign"; true'
srun --overlap -N1 -n1 bash -c "$probe" probe "$c" overlap 2>&1 | sed 's/^/overlap: /'
env -i PATH="$PATH" SLURM_CONF="$SLURM_CONF" HOME="$HOME" \
  srun --jobid="$SLURM_JOB_ID" --overlap --infrarsi=off -N1 -n1 bash -c "$probe" probe "$c" envless 2>&1 | sed 's/^/envless: /'
(echo x >"$SIBLING/planted") && echo "ATTACK wrote the sibling campaign"
(echo x >"$BANKDIR/planted") && echo "ATTACK wrote the bank's directory"
env -i PATH="$PATH" SLURM_CONF="$SLURM_CONF" HOME="$HOME" \
  sbatch --parsable -J self-submitted-containment -o /dev/null --wrap "sleep 120" | sed 's/^/submitted: /'
for s in 1 2 3 4 5 6; do echo "INFRARSI_STEP {\"step\":$s,\"loss\":1.0,\"step_time_s\":0.1}"; done
EOF

cat >"$work/containment.contract.toml" <<EOF
name = "containment"
[workload]
source = "$work/attack"
command = ["bash", "{source}/attack.sh"]
[workload.env]
CAMPAIGN_DIR = "$work/c"
SIBLING = "$work/other"
BANKDIR = "$bankdir"
[resources]
nodes = 1
ntasks_per_node = 1
cpus_per_task = 1
mem = "200M"
time_limit = "3"
[knobs.unused]
kind = "integer"
min = 1
max = 2
env = "UNUSED"
baseline = 1
[invariants]
steps = 6
warmup_steps = 1
[budget]
trials = 1
batch_size = 1
[repeats]
doctor = 2
verify = 2
verify_top = 0
EOF
"$bin" init "$work/containment.contract.toml" --dir "$work/c" >/dev/null
log=$work/doctor.log
"$bin" doctor --dir "$work/c" >"$log" 2>&1 || true
"$bin" report --dir "$work/c" --json >"$work/report.json" || fail "no report"
"$bin" report --dir "$work/c" >"$work/report.txt" || fail "no text report"
r=$work/report.json

# What each trial's workload did and saw, from its own log.
n=0
for tlog in "$work"/c/batches/*/*/log.txt; do
  n=$((n + 1))
  for step in overlap envless; do
    grep -q "^$step: STEP-RAN" "$tlog" || fail "the $step step did not run in $tlog: $(cat "$tlog")"
  done
  if grep -q ATTACK "$tlog"; then fail "a trial reached past its view: $(grep ATTACK "$tlog")"; fi
  grep -q "submitted: [0-9]" "$tlog" || fail "the trial could not submit its job: $(cat "$tlog")"
done
[ "$n" -ge 1 ] || fail "no trial ran: $(tail -5 "$log")"
for f in "$work"/c/planted-overlap "$work"/c/planted-envless "$work"/other/planted "$bankdir"/planted; do
  [ ! -e "$f" ] || fail "$f was written from inside a trial"
done
# The outcome says why: each trial's isolation names the plugin's view and what it hid.
jq -e '[.trials[] | select(.isolation.in_place == true and
         (.isolation.detail | test("hidden by the plugin.s private view")))] | length >= 1' "$r" >/dev/null \
  || fail "no trial says it ran in the plugin's view: $(jq -c '[.trials[].isolation]' "$r")"
jq -e --arg other "$work/other" '[.trials[] | select(.isolation.detail | contains($other))] | length >= 1' "$r" \
  >/dev/null || fail "the sibling campaign is not among what the view hid: $(jq -c '[.trials[].isolation]' "$r")"
# The job the trial submitted itself is named on it, in the JSON and the text report.
jq -e '[.trials[] | .self_submitted_jobs // [] | .[] | select(.name == "self-submitted-containment")] | length >= 1' \
  "$r" >/dev/null || fail "the self-submitted job is not in the report: $(jq -c '[.trials[] | .self_submitted_jobs]' "$r")"
grep -q "self-submitted-containment" "$work/report.txt" || fail "the text report has no warning for the job"
echo "ok: $n trial(s) contained in every step; the self-submitted job is named"
