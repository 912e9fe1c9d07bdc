#!/usr/bin/env bash
# Tune an unmodified job, on its own 1-node cluster: a user (nobody) submits `sbatch --wait --infrarsi=tune
# job.sbatch` with the toyload contract beside the script; the plugin writes the tune request; that user's
# `infrarsid --once --spool --root` starts campaign tune-<job> from it and runs it to done on the local scheduler;
# `infrarsi status` shows the request. The user may not move files in the plugin's root-owned tune/, so the
# request stays there, said once, and a second daemon run does not start it again. A site's root daemon then
# takes the request: it starts the campaign as the user in <root>/nobody/tune-<job>, runs it to done as the
# user (every file in it is the user's), and moves the request to done/.
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" tune-request --own-cluster
so=$build/spank/infrarsi.so
[ -f "$so" ] || fail "no plugin at $so (build first)"
dir=$work
chmod 0755 "$dir"
export INFRARSI_SLURM_DIR=$dir INFRARSI_SLURM_PORT=$((17600 + ${INFRARSI_TEST_PORT_OFFSET:-0}))
passed=0
cleanup() { "$src/scripts/slurm-local" stop >/dev/null 2>&1 || true; [ $passed = 0 ] || rm -rf "$work"; }
trap cleanup EXIT
eval "$("$src/scripts/slurm-local" start --nodes 1 --plugin "$so")"
spool=$dir/spank-spool
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }

# The user's directory: the toyload workload, its contract beside the job script.
u=$dir/alice
mkdir -p "$u"
cp -r "$fx/toyload" "$fx/toyload-patches" "$u/"
# A small budget (2 doctor runs, one search batch of 2, nothing to verify): what is under test is the request's
# way to a campaign run to done, twice, not what the search finds.
sed -e 's/^trials = .*/trials = 2/' -e 's/^batch_size = .*/batch_size = 2/' -e 's/^doctor = .*/doctor = 2/' \
  -e 's/^verify_top = .*/verify_top = 0/' "$fx/toyload.contract.toml" >"$u/job.contract.toml"
grep -q '^verify_top = 0' "$u/job.contract.toml" || fail "could not write the small contract"
# The user's job runs the baseline as the contract describes it (the toyload's baseline knobs, seed, steps).
cat >"$u/job.sbatch" <<'EOF'
#!/bin/bash
set -e
bin=$(mktemp -d)/toy
cc -O2 -o "$bin" toyload/main.c toyload/loss.c toyload/kernels/compute.c -lm
TOY_GLOBAL_BATCH=16 TOY_MICRO_BATCH=1 TOY_GRAD_ACCUM=16 TOY_RECOMPUTE=none TOY_STEPS=8 TOY_SEED=1 exec "$bin"
EOF
chown -R 65534:65534 "$u"

job=$(cd "$u" && as_user sbatch --parsable --wait --infrarsi=tune -o "$u/out.txt" job.sbatch) ||
  fail "the tune-mode job failed"
job=${job%%;*}
request=$spool/tune/$job.json
wait_for 60 "the tune request $request" test -f "$request"

log=$work/daemon.log
as_user "$daemon" --accept-noise --once --idle 1 --spool "$spool" --root "$u/campaigns" --scheduler local >"$log" 2>&1 ||
  fail "infrarsid failed"
file_has "tune request $job.json: campaign $u/campaigns/tune-$job started" "$log" || fail "the request started no campaign"
file_has "tune request $job.json: .*it stays in tune/" "$log" || fail "the daemon did not say why the request stays"
[ "$(grep -c "it stays in tune/" "$log")" = 1 ] || fail "the daemon repeated itself"
as_user "$bin" status --dir "$u/campaigns/tune-$job" --json >"$work/status.json"
jq -e --argjson job "$job" --arg script "$u/job.sbatch" \
  '.state == "done" and .tune.job_id == $job and .tune.script == $script and .tune.request.uid == 65534
   and .tune.submitted_job == "adopted"' \
  "$work/status.json" >/dev/null || fail "status: not done, or no tune object: $(cat "$work/status.json")"
as_user "$bin" status --dir "$u/campaigns/tune-$job" >"$work/status.txt"
file_has "^tune request: job $job \($u/job.sbatch\); as a baseline run: adopted" "$work/status.txt" ||
  fail "status text without the tune request: $(cat "$work/status.txt")"
# The submitted job is the doctor's first run, read like any trial's (its steps from its own output).
as_user "$bin" report --dir "$u/campaigns/tune-$job" --json >"$work/report.json"
jq -e --arg job "$job" '[.trials[] | select(.kind == "doctor" and (.reason | startswith("the submitted job " + $job)))]
  | length == 1 and .[0].outcome == "ok"' "$work/report.json" >/dev/null ||
  fail "the submitted job is not an ok doctor trial: $(jq -c '[.trials[] | select(.kind == "doctor")]' "$work/report.json")"

# A second run: the campaign exists, nothing starts again.
log=$work/daemon2.log
as_user "$daemon" --accept-noise --once --idle 1 --spool "$spool" --root "$u/campaigns" --scheduler local >"$log" 2>&1 ||
  fail "the second infrarsid failed"
file_has "tune request $job.json: campaign .* was started already" "$log" || fail "the second run did not see the campaign"
[ "$(find "$u/campaigns" -mindepth 1 -maxdepth 1 -name 'tune-*' | wc -l)" = 1 ] || fail "a request started twice"

# A site's root daemon takes the request still in tune/, and acts as its user.
log=$work/daemon-root.log
site=$work/site
"$daemon" --accept-noise --once --idle 1 --spool "$spool" --root "$site" --scheduler local >"$log" 2>&1 ||
  fail "the root infrarsid failed: $(tail -5 "$log")"
file_has "tune request $job.json: campaign $site/nobody/tune-$job started \\(moved to done/\\)" "$log" ||
  fail "the root daemon started no campaign: $(tail -5 "$log")"
[ -f "$spool/tune/done/$job.json" ] && [ ! -e "$request" ] || fail "the request was not moved to done/"
[ "$(stat -c %U:%a "$site/nobody")" = nobody:700 ] || fail "the user's directory is $(stat -c %U:%a "$site/nobody")"
[ -z "$(find "$site/nobody" ! -user nobody | head -1)" ] ||
  fail "the campaign has files not owned by the user: $(find "$site/nobody" ! -user nobody | head -3)"
as_user "$bin" status --dir "$site/nobody/tune-$job" --json >"$work/status-site.json"
jq -e '.state == "done"' "$work/status-site.json" >/dev/null ||
  fail "the site daemon's campaign is not done: $(cat "$work/status-site.json")"
passed=1
echo "ok: tune request of job $job: campaign run to done by the user's daemon, and as the user by a root daemon"
