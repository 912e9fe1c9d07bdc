#!/usr/bin/env bash
# A site's root daemon never runs a user's content as root (issue 29, item 1). A user (nobody) makes the
# directory a site daemon gave them, <root>/nobody, a campaign of their own (`infrarsi init --dir`); its
# contract's build and command first append `id -u` to a file. A root `infrarsid --once --root R --spool S`
# then drives it, on the local scheduler and on Slurm (a second root): the build and every trial ran as the
# user (the file has only the user's uid; Slurm's completion record says UserId=nobody for every job), and
# every file in the campaign is the user's. Before the fix, root drove the planted campaign itself: uid 0.
# Root's own `infrarsi run` on it acts as the user too.
# Needs SLURM_CONF (scripts/test).
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" root-planted-campaign
chmod 0755 "$work" # the user reaches their directories through it
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }

# The user's source: the stepload fixture, its build and command telling who ran them; the smallest budget.
plant() { # plant SRC ROOT: the user's copy in SRC, and their campaign in ROOT/nobody
  local src=$1 root=$2
  mkdir -p "$src" "$root/nobody"
  cp -r "$fx/stepload" "$fx/stepload-patches" "$src/"
  sed -e "s|^build = .*|build = [[\"sh\", \"-c\", \"id -u >>$src/uids \\&\\& mkdir -p {build}\"]]|" \
    -e 's|^command = \["bash", |command = ["sh", "-c", "id -u >>{contract_dir}/uids \&\& exec bash \\"$0\\" \\"$@\\"", |' \
    -e 's|^trials = 3|trials = 1|' -e 's|^batch_size = 2|batch_size = 1|' -e 's|^doctor = 3|doctor = 2|' \
    -e 's|^verify_top = 1|verify_top = 0|' "$fx/stepload.contract.toml" >"$src/job.contract.toml"
  grep -q 'id -u >>{contract_dir}/uids && exec' "$src/job.contract.toml" || fail "the contract edit did not apply"
  chmod 0755 "$root"
  chown -R 65534:65534 "$src" "$root/nobody" # root made the user's directory and gave it away, as the intake does
  as_user "$bin" init "$src/job.contract.toml" --dir "$root/nobody" >"$work/init.log" 2>&1 ||
    { log=$work/init.log; fail "the user's init failed"; }
}
# check SRC ROOT: nothing ran as root, the build and the trials ran as the user, all files are the user's.
check() {
  local src=$1 root=$2
  [ -s "$src/uids" ] || fail "the campaign ran nothing (no $src/uids)"
  [ -z "$(grep -vx 65534 "$src/uids")" ] || fail "ran as another uid than the user's: $(sort "$src/uids" | uniq -c | tr '\n' ' ')"
  [ "$(wc -l <"$src/uids")" -ge 3 ] || fail "the build and two trials did not all run: $(cat "$src/uids")"
  [ -z "$(find "$root/nobody" ! -user nobody | head -1)" ] ||
    fail "the campaign has files not owned by the user: $(find "$root/nobody" ! -user nobody | head -3)"
  as_user "$bin" status --dir "$root/nobody" --json >"$work/status.json"
  jq -e '.state == "done"' "$work/status.json" >/dev/null || fail "the planted campaign is not done: $(cat "$work/status.json")"
}

# The local scheduler.
plant "$work/src-local" "$work/site-local"
mkdir -m 0755 "$work/spool"
log=$work/daemon-local.log
"$daemon" --once --idle 1 --root "$work/site-local" --spool "$work/spool" --scheduler local >"$log" 2>&1 ||
  fail "the root infrarsid (local) failed"
file_has "campaigns of nobody under $work/site-local/nobody: driven as uid 65534" "$log" ||
  fail "the root daemon did not hand the user's directory to a worker"
check "$work/src-local" "$work/site-local"

# Root's own `infrarsi` on the user's campaign (an administrator's `run`, `status`): it acts as the user who
# controls the directory, for good, before it opens anything there; the build and trials run as the user.
plant "$work/src-cli" "$work/site-cli"
log=$work/cli.log
"$bin" run --accept-noise --dir "$work/site-cli/nobody" >"$log" 2>&1 || fail "root's infrarsi run failed"
file_has "^infrarsi: $work/site-cli/nobody is nobody.s \\(uid 65534\\): acting as nobody, not as root" "$log" ||
  fail "root's infrarsi run did not say it acts as the user"
check "$work/src-cli" "$work/site-cli"
"$bin" status --dir "$work/site-cli/nobody" --json >"$work/status-root.json" 2>"$log" || fail "root's status failed"
file_has "acting as nobody" "$log" || fail "root's infrarsi status did not act as the user"

# Slurm: the trials are jobs; the plugin's spool is the daemon's (its trial evidence, root's, 0640 in the
# job's group, is read by the worker as the user).
plant "$work/src-slurm" "$work/site-slurm"
spool=$(grep -o 'spool=[^ ]*' "$(dirname "$SLURM_CONF")/plugstack.conf" 2>/dev/null | head -n1 | cut -d= -f2 || true)
jobcomp=$(scontrol show config | awk -F' = ' '/^JobCompLoc/ {print $2}')
[ -f "$jobcomp" ] || fail "no completion file ($jobcomp)"
before=$(wc -l <"$jobcomp")
log=$work/daemon-slurm.log
"$daemon" --once --idle 1 --root "$work/site-slurm" ${spool:+--spool "$spool"} --scheduler slurm >"$log" 2>&1 ||
  fail "the root infrarsid (slurm) failed"
check "$work/src-slurm" "$work/site-slurm"
# Every job the campaign ran is the user's in Slurm's own record (the completion file may lag its jobs).
new_jobs() { tail -n +"$((before + 1))" "$jobcomp" >"$work/jobcomp.new"; [ "$(grep -c 'JobState=' "$work/jobcomp.new")" -ge 2 ]; }
wait_for 30 "the campaign's jobs in $jobcomp" new_jobs
[ -z "$(grep -v 'UserId=nobody(65534)' "$work/jobcomp.new")" ] ||
  fail "a job ran as another user: $(grep -v 'UserId=nobody(65534)' "$work/jobcomp.new" | head -2)"
if [ -n "$spool" ]; then
  # The plugin's per-user files: root's, in the job's group, unreadable by other users.
  evidence=$(find "$spool/trials" -name '*.json' -newer "$work/src-slurm/job.contract.toml" -print -quit)
  [ -n "$evidence" ] || fail "no trial evidence of the campaign's jobs in $spool/trials"
  [ "$(stat -c %u:%g:%a "$evidence")" = 0:65534:640 ] || fail "trial evidence $evidence is $(stat -c %u:%g:%a "$evidence")"
fi
echo "ok: a campaign a user planted under a root daemon's root ran as the user (local and Slurm), never as root"
rm -rf "$work"
