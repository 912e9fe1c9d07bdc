#!/usr/bin/env bash
# Tune an unmodified job, on its own 1-node cluster: a user (nobody) submits `sbatch --wait --infrarsi=tune
# job.sbatch` with the toyload contract beside the script; the plugin writes the tune request; that user's
# `infrarsid --once --spool --root` starts campaign tune-<job> from it and runs it to done on the local scheduler;
# `infrarsi status` shows the request. The user may not move files in the plugin's root-owned tune/, so the
# request stays there, said once, and a second daemon run does not start it again. A root daemon refuses the
# request, saying why, and moves it to refused/.
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" tune-request --own-cluster
so=$build/spank/infrarsi.so
[ -f "$so" ] || fail "no plugin at $so (build first)"
dir=$work
chmod 0755 "$dir"
export INFRARSI_SLURM_DIR=$dir INFRARSI_SLURM_PORT=17600
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
cp "$fx/toyload.contract.toml" "$u/job.contract.toml"
printf '#!/bin/bash\necho baseline-ran\n' >"$u/job.sbatch"
chown -R 65534:65534 "$u"

job=$(cd "$u" && as_user sbatch --parsable --wait --infrarsi=tune -o "$u/out.txt" job.sbatch) ||
  fail "the tune-mode job failed"
job=${job%%;*}
request=$spool/tune/$job.json
wait_for 60 "the tune request $request" test -f "$request"

log=$work/daemon.log
as_user "$daemon" --once --idle 1 --spool "$spool" --root "$u/campaigns" --scheduler local >"$log" 2>&1 ||
  fail "infrarsid failed"
file_has "tune request $job.json: campaign $u/campaigns/tune-$job started" "$log" || fail "the request started no campaign"
file_has "tune request $job.json: .*it stays in tune/" "$log" || fail "the daemon did not say why the request stays"
[ "$(grep -c "it stays in tune/" "$log")" = 1 ] || fail "the daemon repeated itself"
as_user "$bin" status --dir "$u/campaigns/tune-$job" --json >"$work/status.json"
jq -e --argjson job "$job" --arg script "$u/job.sbatch" \
  '.state == "done" and .tune.job_id == $job and .tune.script == $script and .tune.request.uid == 65534' \
  "$work/status.json" >/dev/null || fail "status: not done, or no tune object: $(cat "$work/status.json")"
as_user "$bin" status --dir "$u/campaigns/tune-$job" >"$work/status.txt"
file_has "^tune request: job $job \($u/job.sbatch\)" "$work/status.txt" || fail "status text without the tune request"

# A second run: the campaign exists, nothing starts again.
log=$work/daemon2.log
as_user "$daemon" --once --idle 1 --spool "$spool" --root "$u/campaigns" --scheduler local >"$log" 2>&1 ||
  fail "the second infrarsid failed"
file_has "tune request $job.json: campaign .* was started already" "$log" || fail "the second run did not see the campaign"
[ "$(find "$u/campaigns" -mindepth 1 -maxdepth 1 -name 'tune-*' | wc -l)" = 1 ] || fail "a request started twice"

# A root daemon refuses, saying why, and moves the request to refused/.
log=$work/daemon-root.log
"$daemon" --once --idle 1 --spool "$spool" --root "$work/root-campaigns" >"$log" 2>&1 || fail "the root infrarsid failed"
file_has "refused: a root daemon does not start campaigns for users yet" "$log" || fail "the root daemon did not refuse"
[ -f "$spool/tune/refused/$job.json" ] && [ ! -e "$request" ] || fail "the refused request was not moved to refused/"
file_has "root daemon" "$spool/tune/refused/$job.reason" || fail "no reason beside the refused request"
[ ! -e "$work/root-campaigns/tune-$job" ] || fail "a root daemon started a campaign"
passed=1
echo "ok: tune request of job $job: campaign run to done by the user's daemon, refused by a root daemon"
