#!/usr/bin/env bash
# The detached-helper attack (issue 29) on the real local cluster with the plugin loaded: the baseline's first
# run submits (sbatch) a helper job that outlives it and, after each run of the baseline's settings has ended
# (its evidence is in the plugin's spool), multiplies step_time_s by 3 in that run's result.json, before the
# campaign ingests it. The knob is a no-op (1% slower), so only the forgery could make it look faster: before
# issue 29 it was promoted at 3.000x and re-checked "reproduced". Now the plugin's record of each run carries
# the digests of its result.json and log.txt at the task's end, and every rewritten run is refused as
# rewritten_after_end: nothing is promoted, and the report names the job the trial submitted. Needs SLURM_CONF
# and the plugin (scripts/slurm-local --plugin).
set -euo pipefail
export INFRARSI_BANK=off
. "$(dirname "$0")/lib.sh" detached-helper
plugstack=$(dirname "$SLURM_CONF")/plugstack.conf
grep -q 'infrarsi.so' "$plugstack" 2>/dev/null || fail "the cluster does not load the plugin ($plugstack)"
spool=$(grep -o 'spool=[^ ]*' "$plugstack" | head -n1 | cut -d= -f2)
spool=${spool:-/var/spool/infrarsi}

# The workload: six step lines whose times the no-op knob changes by 1%; a run of the baseline's settings
# (chunk 1) submits the helper once.
mkdir -p "$work/job" "$work/arm"
cat >"$work/job/train.sh" <<SH
#!/bin/bash
set -eu
chunk=\${STEPLOAD_CHUNK:-1}
if [ "\$chunk" = 1 ] && mkdir "$work/arm/launched" 2>/dev/null; then
  sbatch --parsable --export=NONE -J helper -o "$work/arm/helper.out" --time=10 --mem=50M \\
    --wrap "exec /usr/bin/python3 $work/arm/helper.py '$work/c' '$spool' '$work/arm/stop' '$work/arm/ready'" >"$work/arm/helper.job"
fi
# Every run of the baseline's settings waits (up to 60 s) for the helper to be watching, so that on a loaded
# host the helper's start (a job that may wait for a node) does not decide whether it comes before the ingest.
if [ "\$chunk" = 1 ]; then
  for _ in \$(seq 600); do [ -e "$work/arm/ready" ] && break; sleep 0.1; done
fi
for s in 1 2 3 4 5 6; do
  awk -v s=\$s -v c=\$chunk 'BEGIN { printf "INFRARSI_STEP {\"step\":%d,\"loss\":%.6f,\"step_time_s\":%.6f}\n", s, 2 / (s + 1), 0.2 * (1 + 0.01 * c) }'
done
SH
cat >"$work/arm/helper.py" <<'PY'
import json, pathlib, sys, time
campaign, spool, stop = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
pathlib.Path(sys.argv[4]).touch()
done = set()
deadline = time.time() + 560
while time.time() < deadline and not stop.exists():
    for p in campaign.glob("batches/*/*/result.json"):
        if p in done:
            continue
        try:
            j = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if j.get("settings", {}).get("env", {}).get("STEPLOAD_CHUNK") != "1":
            done.add(p)
            continue
        # Once its task has ended: the plugin's record of it is in the spool (root's, world-readable).
        job, task = j["slurm"].get("SLURM_ARRAY_JOB_ID"), j["slurm"].get("SLURM_ARRAY_TASK_ID")
        if not job or not list((spool / "trials" / job).glob(task + ".*.json")):
            continue
        for s in j["steps"]:
            s["step_time_s"] *= 3
        p.write_text(json.dumps(j))
        done.add(p)
        print("rewrote", p, flush=True)
    time.sleep(0.05)
PY
sed -e "s|^source = \"stepload\"|source = \"$work/job\"|" \
  -e 's|^command = .*|command = ["bash", "{source}/train.sh"]|' \
  -e 's|^candidates = \["fast"\]|candidates = []|' \
  -e "s|^catalog = \"stepload-patches/catalog.toml\"|catalog = \"$fx/stepload-patches/catalog.toml\"|" \
  -e 's|^protected = \["train.sh"\]|protected = []|' -e 's|^editable = \["kernel.sh"\]|editable = ["train.sh"]|' \
  "$fx/stepload.contract.toml" >"$work/contract.toml"
"$bin" init "$work/contract.toml" --dir "$work/c" >/dev/null
log=$work/run.log
stop_helper() {
  touch "$work/arm/stop"
  [ -s "$work/arm/helper.job" ] && scancel "$(cat "$work/arm/helper.job")" 2>/dev/null || true
}
trap stop_helper EXIT
rc=0
"$bin" run --dir "$work/c" >"$log" 2>&1 || rc=$?
stop_helper
[ -s "$work/arm/helper.job" ] || fail "the baseline's run did not submit its helper job"
rewrote=$(grep -c '^rewrote' "$work/arm/helper.out" || true)
"$bin" report --dir "$work/c" --json >"$work/report.json"
r=$work/report.json
echo "run exit $rc; helper rewrote $rewrote result files; promoted: $(jq -c '[.promoted[] | {candidate, speedup}]' "$r")"
[ "$rewrote" -ge 1 ] || fail "the helper rewrote nothing: $(tail -5 "$work/arm/helper.out")"
jq -e '.promoted | length == 0' "$r" >/dev/null || fail "the no-op knob was promoted: $(jq -c '[.promoted[] | {candidate, speedup, reproduced}]' "$r")"
# Every run the helper rewrote is refused for it, with the plugin's digests as the reason; or, where the
# helper (a job that may wait for a free node on a loaded host) came after the campaign had ingested the run,
# was measured as it ran (0.2 s/step, not the forged 0.6). At least one is refused.
refused=0
for p in $(grep '^rewrote' "$work/arm/helper.out" | cut -d' ' -f2); do
  if jq -e --arg p "$p" '[.trials[] | select(.result == $p)] | length == 1 and
      all(.outcome == "contract_violation" and .violation == "rewritten_after_end" and
          (.detail | test("result.json: .* when the trial ended, now")) and .evidence.source == "plugin" and
          .evidence.result_file.present)' "$r" >/dev/null; then
    refused=$((refused + 1))
  else
    jq -e --arg p "$p" '[.trials[] | select(.result == $p)] | length == 1 and
        all(.outcome == "ok" and .step_s < 0.4)' "$r" >/dev/null ||
      fail "a rewritten run was neither refused nor measured as it ran: $(jq -c --arg p "$p" '[.trials[] | select(.result == $p)]' "$r")"
  fi
done
[ "$refused" -ge 1 ] || fail "no rewritten run was refused (the helper came after every ingest)"
# The job the trial submitted is named in its report (issue 29, item 5).
helper_job=$(cat "$work/arm/helper.job")
jq -e --arg j "${helper_job%%;*}" '[.trials[] | (.self_submitted_jobs // [])[] | .job | tostring] | index($j) != null' \
  "$r" >/dev/null || fail "the report does not name the helper job ${helper_job%%;*} the trial submitted"
trap - EXIT
rm -rf "$work"
echo "ok: a helper job's rewrites of the baseline's result.json after its runs ended are refused, nothing promoted"
