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
# (By its id: the report names jobs by what Slurm alone writes, never by the name their owner gave them.)
self_job=$(squeue -h --name self-submitted-containment -t all -o %i | sort -n | tail -n 1) # this run's: the newest
[ -n "$self_job" ] || fail "squeue does not list the job the trial submitted"
jq -e --arg j "$self_job" '[.trials[] | .self_submitted_jobs // [] | .[] | select(.job == $j)] | length >= 1' \
  "$r" >/dev/null || fail "the self-submitted job $self_job is not in the report: $(jq -c '[.trials[] | .self_submitted_jobs]' "$r")"
grep -q "did not submit: .*$self_job (" "$work/report.txt" || fail "the text report has no warning for job $self_job"
# The same from a job of an unprivileged user, the way a site runs trials: slurmstepd switches each task to the
# user before the plugin makes the view, which it then makes inside a user namespace of the user's own. A
# campaign's layout written by hand (a manifest the plugin reads; no orchestrator needed).
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
  u=$work/as-nobody
  mkdir -p "$u/c/batches/1/0" "$u/other"
  echo db >"$u/c/campaign.db"
  echo db >"$u/other/campaign.db"
  cat >"$u/c/batches/1/manifest.json" <<EOF
{"format":"infrarsi-manifest/3","campaign":"nobody","knobs":{},"tasks":[{"index":0,"trial_id":"t0","env":{},
 "result":"$u/c/batches/1/0/result.json","workdir":"$u/c/batches/1/0","log":"$u/c/batches/1/0/log.txt"}]}
EOF
  # $1 the campaign, $2 the step's name.
  cat >"$u/probe.sh" <<'EOF'
echo STEP-RAN
[ -e "$1/campaign.db" ] && echo "ATTACK $2 sees campaign.db"
(echo x >"$1/planted-$2") 2>/dev/null && echo "ATTACK $2 wrote the campaign"
true
EOF
  cat >"$u/job.sh" <<EOF
#!/bin/bash
bash "$u/probe.sh" "$u/c" batch
srun --overlap -N1 -n1 bash "$u/probe.sh" "$u/c" overlap
env -i PATH="\$PATH" SLURM_CONF="\$SLURM_CONF" srun --jobid="\$SLURM_JOB_ID" --overlap -N1 -n1 bash "$u/probe.sh" "$u/c" envless
(echo x >"$u/other/planted") 2>/dev/null && echo "ATTACK wrote the sibling campaign"
(echo x >"$u/c/batches/1/0/own") && echo OWN-WRITTEN
EOF
  chmod 755 "$work" "$u/job.sh"
  chown -R nobody "$u"
  su -s /bin/bash nobody -c "SLURM_CONF='$SLURM_CONF' INFRARSI_MANIFEST='$u/c/batches/1/manifest.json' \
    sbatch --wait -o '$u/out.txt' --chdir '$u/c/batches/1' '$u/job.sh'" >/dev/null \
    || fail "the job of nobody failed: $(cat "$u/out.txt")"
  [ "$(grep -c STEP-RAN "$u/out.txt")" = 3 ] || fail "not every step of nobody's job ran: $(cat "$u/out.txt")"
  if grep -q ATTACK "$u/out.txt"; then fail "an unprivileged trial reached past its view: $(cat "$u/out.txt")"; fi
  grep -q OWN-WRITTEN "$u/out.txt" || fail "nobody's trial could not write its own directory: $(cat "$u/out.txt")"
  for f in "$u"/c/planted-* "$u/other/planted"; do [ ! -e "$f" ] || fail "$f was written by nobody's trial"; done
  echo "ok: an unprivileged user's trial is contained in every step too"
fi
echo "ok: $n trial(s) contained in every step; the self-submitted job is named"
