#!/usr/bin/env bash
# A campaign end to end through the commands on a machine where Slurm does not answer: `--scheduler auto`
# picks the local scheduler and says why, the trials run as child processes under the contract's limits, and
# the result is a verified promotion as on the cluster (40-campaign). Needs no cluster.
set -euo pipefail
export INFRARSI_BANK=off
. "$(dirname "$0")/lib.sh" campaign-local --own-cluster
export SLURM_CONF=$work/no-such-slurm.conf # whatever this machine has, Slurm does not answer here

"$bin" init "$fx/toyload.contract.toml" --dir "$work/c" >/dev/null
log=$work/run.log
"$bin" run --accept-noise --dir "$work/c" --scheduler auto >"$log" 2>&1 || fail "infrarsi run failed"
file_has "scheduler: local \(Slurm does not answer" "$log" || fail "auto did not say it fell back to the local scheduler"
file_has "submitted to local as job array" "$log" || fail "no batch went to the local scheduler"
# How the local scheduler holds the memory limit (a cgroup v2 or v1, or the watchdog and why) is said once.
file_has "to local \(memory limit: (a cgroup v[12] per trial|a watchdog .* no cgroup: )" "$log" \
  || fail "run did not say how the local scheduler holds the memory limit"
[ -f "$work/c/local-jobs/1/job.json" ] || fail "no local job state in the campaign"

"$bin" report --dir "$work/c" --json >"$work/report.json"
r=$work/report.json
"$bin" status --dir "$work/c" --json >"$work/status.json"
jq -e '.state == "done" and .trials.used == 8' "$work/status.json" >/dev/null || fail "status: not done with 8 trials"
jq -e '[.trials[] | select(.state != "finished")] | length == 0' "$r" >/dev/null || fail "unfinished trials"
[ "$(jq '[.promoted[] | select(.candidate | test("math_shortcut"))] | length' "$r")" = 0 ] || fail "math-changing patch promoted"
jq -e '.promoted | length >= 1' "$r" >/dev/null || fail "nothing promoted (toyload has a 2x micro-batch speed-up)"
jq -e '.promoted[0] | .speedup_ci[0] > 1 + .mde and (.pairs | length) >= 2' "$r" >/dev/null \
  || fail "promotion without a lower bound above the MDE"
# A campaign keeps its scheduler: it finished on local, and asking for Slurm now changes nothing that ran.
"$bin" run --accept-noise --dir "$work/c" --scheduler slurm >"$work/rerun.log" 2>&1 || fail "re-running a finished campaign failed"
echo "ok: campaign on the local scheduler: $(jq -c '.outcomes' "$r"), promoted $(jq -r '.promoted[0].candidate' "$r")"
rm -rf "$work"
