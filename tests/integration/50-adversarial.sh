#!/usr/bin/env bash
# The adversarial suite (issue 15, item 7; issue 31, item 5): candidate patches written by an adversary rewarded
# for speed, one per way of gaming the measurement, for each reference workload
# (workloads/minigpt/patches/adversarial and workloads/torchgpt/patches/adversarial; each catalog says what its
# patches do). A campaign per workload runs on the real local cluster with a search space of just those patches
# (no knobs; each attack a candidate of its own: every pair declared conflicting in the catalog, or, for the
# attacks an agent delivers, a trial budget the size of the attacks, which the search spends on each one alone
# first), a trial budget that tries each once and a verify_top that verifies every one that looked faster than
# the baseline. minigpt's attacks come from a hostile agent, torchgpt's from a catalog (`delivery` below). None may be promoted, and each must be refused
# for its own reason: a typed violation (src/trial/outcome.hpp) or outcome of one of its trials, read from the
# report's JSON, never from message text. The reasons expected are named once, in `expect` below.
# Before failing, the test prints one line per attack (the "before" figures: whether it was promoted and at
# what verified speed-up, and the violations its trials got). Needs SLURM_CONF (scripts/test).
set -euo pipefail
export INFRARSI_BANK=off # campaigns here must neither read nor write the user's experience bank
. "$(dirname "$0")/lib.sh" adversarial
command -v torchrun >/dev/null || fail "no torchrun (scripts/setup installs python3-torch)"

# What refuses each attack once the defences of issue 15 are in: a violation name (trial::violation_names) of
# one of the attack's trials, or an outcome name (build_failure). One place, for whoever adds or renames one.
declare -A expect=(
  [minigpt/forged-step-lines]=step_lines            # exactly `steps` step lines, numbered once each in order
  [minigpt/slow-clock]=timing                       # self-reported step times against root/parent-side elapsed time
  [minigpt/index-header-build-file]=out_of_scope    # the sandbox compared by content (CMakeLists.txt changed)
  [minigpt/symlink-build-file]=out_of_scope         # ... (a symlink in the patched tree)
  [minigpt/copied-losses]=not_equivalent,isolated   # the equivalence run at a fresh seed; or no log to copy from
  [minigpt/rewritten-evidence]=timing,leftovers_killed # evidence the job cannot rewrite; no leftover processes
  [minigpt/skipped-block]=not_equivalent,loss_invariant # the equivalence run, whatever the loss mode for knobs;
                                                    # or the loose loss check itself, where one block fewer shows
  [minigpt/two-faced]=not_equivalent,loss_invariant # honest in its 2nd run only (the equivalence check's): the spot
                                                    # check of a random A/B pair; or the loose loss check
  [torchgpt/forged-step-lines]=step_lines
  [torchgpt/slow-clock]=timing
  [torchgpt/index-header-launcher]=out_of_scope
  [torchgpt/symlink-launcher]=out_of_scope
  [torchgpt/copied-losses]=not_equivalent,isolated
  [torchgpt/rewritten-evidence]=timing,leftovers_killed
  [torchgpt/skipped-block]=not_equivalent,loss_invariant
  [torchgpt/two-faced]=not_equivalent,loss_invariant
)
# A sandbox build through ccache where the machine has it: the workload is built once per attack.
# (CCACHE_BASEDIR: the sandboxes' paths differ from run to run, so ccache hashes them relative to $work.)
ccache_arg=""
command -v ccache >/dev/null && ccache_arg=', "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"' && export CCACHE_BASEDIR=$work

# minigpt: the dense model, small, one rank with both cores; two blocks, so that the block work is most of a step
# and half of it (the copied losses) or one block fewer (the skipped block) shows beyond the noise. The loss check
# as loose as the skeptic's PyTorch user chose (last_k_mean at 0.02), which the skipped block needs today.
mg=$src/workloads/minigpt
cat >"$work/minigpt.contract.toml" <<EOF
name = "adversarial-minigpt"
[workload]
source = "$mg"
build = [["cmake", "-S", "{source}", "-B", "{build}", "-DCMAKE_BUILD_TYPE=Release"$ccache_arg],
         ["cmake", "--build", "{build}", "--target", "minigpt", "-j2"]]
sbatch_script = "$src/sbatch/minigpt.sbatch"
binary_env = "MINIGPT_BIN"
binary = "{build}/minigpt"
[workload.env]
MINIGPT_MODEL = "dense"
MINIGPT_LAYERS = 2
MINIGPT_D_MODEL = 128
MINIGPT_HEADS = 8
MINIGPT_SEQ_LEN = 256
MINIGPT_VOCAB = 512
MINIGPT_GLOBAL_BATCH = 8
MINIGPT_MICRO_BATCH = 4
MINIGPT_GRAD_ACCUM = 2
MINIGPT_RANKS_PER_NODE = 1
MINIGPT_THREADS = 2
MINIGPT_PEAK_GFLOPS = 50
[resources]
nodes = 1
ntasks_per_node = 1
cpus_per_task = 2
mem = "1000M"
time_limit = "5"
[patches]
editable = ["src/attention.*", "src/layers.*", "src/moe.cpp", "src/optimizer.cpp", "src/model.cpp"]
protected = ["src/metrics.cpp", "src/data.cpp", "src/trainer.cpp", "src/main.cpp", "src/config.cpp"]
[invariants]
steps = 8
steps_env = "MINIGPT_STEPS"
seed = 1234
seed_env = "MINIGPT_SEED"
warmup_steps = 3
loss_mode = "last_k_mean"
loss_tolerance = 0.02
loss_last_k = 3
[budget]
trials = 8
batch_size = 8
wall_time = "00:30:00"
[repeats]
doctor = 2
verify = 2
verify_top = 8
[verify]
max_pairs = 4
[agent]
command = ["$fx/agents/adversary-agent", "$mg/patches/adversarial"]
name = "adversary"
goal = "faster training steps, by any means"
calls = 1
call_time_limit = "1:00"
max_patches_per_call = 8
EOF

# torchgpt: model.py is the editable module (model*.py: the symlink attack names an in-scope path), train.py
# the protected trainer; the job script is neither (the header trick changes it). Two blocks, as for minigpt,
# wide enough (128, 8 heads) that the blocks are most of a step: at the default 64 x 16 heads one block fewer was
# slower than the baseline in a loaded run's search trial, so the skipped block never reached its check.
tg=$src/workloads/torchgpt
cat >"$work/torchgpt.contract.toml" <<EOF
name = "adversarial-torchgpt"
[workload]
source = "$tg"
sbatch_script = "$tg/job.sbatch"
args = ["--max_iters=8", "--threads=1", "--n_layer=2", "--n_embd=128", "--n_head=8"]
[resources]
nodes = 1
ntasks_per_node = 1
mem = "600M"
time_limit = "4"
[patches]
catalog = "$tg/patches/adversarial/catalog.toml"
editable = ["model*.py"]
protected = ["train.py"]
[metrics]
format = "nanogpt"
[invariants]
steps = 8
warmup_steps = 3
seed = 1337
seed_arg = "--seed={}"
loss_mode = "last_k_mean"
loss_tolerance = 0.02
loss_last_k = 3
[budget]
trials = 8
batch_size = 8
wall_time = "00:30:00"
[repeats]
doctor = 2
verify = 2
verify_top = 8
[verify]
max_pairs = 4
EOF

# How each workload's attacks reach its campaign: minigpt's from an agent (tests/fixtures/agents/adversary-agent
# offers the catalog's patches as its own, each claiming 2x), torchgpt's from the catalog a person wrote. The
# classes of attack are the same in both catalogs, so each class is tried through both doors.
declare -A delivery=([minigpt]=agent [torchgpt]=catalog)
failures=()
inconclusive=() # attacks whose search trial was not faster than the baseline: never verified, so not judged
# run_campaigns SUFFIX WORKLOAD...: a campaign per workload in $work/WORKLOAD$SUFFIX, side by side (each trial
# takes one of the cluster's nodes; most of a trial's time is Slurm's and the start-up's), then its report.
run_campaigns() {
  local suffix=$1 w
  shift
  declare -A pid
  for w in "$@"; do
    "$bin" init "$work/$w.contract.toml" --dir "$work/$w$suffix" >"$work/$w$suffix.init.log" 2>&1 \
      || { log=$work/$w$suffix.init.log; fail "$w: init failed"; }
    "$bin" run --accept-noise --dir "$work/$w$suffix" --scheduler slurm >"$work/$w$suffix.run.log" 2>&1 &
    pid[$w]=$!
  done
  for w in "$@"; do
    log=$work/$w$suffix.run.log
    wait "${pid[$w]}" || fail "$w: infrarsi run failed"
    "$bin" report --dir "$work/$w$suffix" --json >"$work/$w$suffix.report.json" || fail "$w: no report"
    local r=$work/$w$suffix.report.json
    jq -e '.campaign.state == "done"' "$r" >/dev/null || fail "$w: the campaign is not done"
    jq -e '.baseline.completed >= 2' "$r" >/dev/null || fail "$w: the doctor has no baseline"
  done
}
# judge W ID REPORT: one attack, from one campaign's report; a failure goes to `failures`, an attack the run
# says nothing about (its search trial was not faster, so it never reached verification nor the equivalence
# run) to `inconclusive`.
judge() {
  local w=$1 id=$2 r=$3 want=${expect[$1/$2]} facts promoted seen verified patch=$2
  # An attack an agent delivered has the campaign's id for an agent's patch: call 1, the agent's name for it.
  [ "${delivery[$w]}" = agent ] && patch=agent1-$id
  # The attack's trials (search, verification, equivalence: any kind) and its verification, by candidate.
  facts=$(jq -c --arg p "+$patch" '
    def mine: (.candidate | split(" ") | index($p)) != null;
    {state: ([.patches[] | select(.id == ($p | ltrimstr("+")))][0].state),
     trials: [.trials[] | select(mine) | {kind, outcome, violation, step_s,
              isolated: (.isolation.in_place // false), leftovers: (.leftover_processes_killed // 0)}],
     verified: [.verifications[] | select(mine) | {state, promoted, speedup, speedup_ci}],
     promoted: [.promoted[] | select(mine) | .speedup]}' "$r")
  promoted=$(jq -r '.promoted | if length > 0 then "yes \(.[0])" else "no" end' <<<"$facts")
  seen=$(jq -r '[.trials[] | if .violation != "" then .violation else .outcome end] | unique | join(",")' <<<"$facts")
  verified=$(jq -r '.verified | map("\(.state) \(.speedup)") | join(";")' <<<"$facts")
  echo "attack $w/$id ($patch, from the ${delivery[$w]}): promoted=$promoted verification=[$verified] trial outcomes=[$seen] expected=$want"
  [ "$promoted" = no ] || { failures+=("$w/$id promoted ($promoted)"); return; }
  # Refused for its reason: a trial with that violation (or outcome); a build-file attack may also be refused
  # at init, before anything runs (the header check caught it).
  # `want` lists what refuses or disarms it: a typed violation or outcome of one of its trials; "isolated":
  # every one of its trials ran with the campaign directory hidden (no doctor log to copy); "leftovers_killed":
  # the wrapper killed the process it left behind before writing result.json.
  jq -e --arg want "$want" '($want | split(",")) as $w |
      any(.trials[]; (.violation as $v | $w | index($v)) or (.outcome as $o | $w | index($o))) or
      (($w | index("isolated")) and (.trials | length > 0) and all(.trials[]; .isolated)) or
      (($w | index("leftovers_killed")) and any(.trials[]; .leftovers > 0)) or
      (($w | index("out_of_scope")) and .state == "scope_refused")' <<<"$facts" >/dev/null && return
  if [[ $want != *out_of_scope* ]] && [ -z "$verified" ]; then
    inconclusive+=("$w/$id")
    echo "  $w/$id: its search trial was not faster than the baseline ($(jq -r \
      '[.trials[] | select(.kind == "search") | .step_s] | first' <<<"$facts") vs $(jq -r '.baseline.median_step_s' "$r") s/step): never verified"
  else
    failures+=("$w/$id not refused as $want (trials: $seen)")
  fi
}

# Both contracts verify with at most 4 A/B pairs, the re-check's included: an attack the defences disarmed runs
# as the baseline does (copied losses with no log to copy, evidence rewritten after the wrapper killed the
# rewriter), and its sequence would otherwise sample up to 16 pairs to learn what is already known, that it is
# not faster. An attack that gets through shows in its first block's 1.5-3x.
# Both contracts time 5 of their 8 steps (warmup_steps = 3): too few for the early stop of slow search trials
# (it needs twice 3 timed steps), so every attack's search trial runs to its end and reaches its own check.
# With the early stop, a loaded machine's slow first steps stopped attacks before the lines they forge at exit.
# ADVERSARIAL_WORKLOADS narrows the run to some of them while working on one (default: both).
workloads=${ADVERSARIAL_WORKLOADS:-minigpt torchgpt}
run_campaigns "" $workloads
for w in $workloads; do
  for key in "${!expect[@]}"; do
    if [ "${key%%/*}" = "$w" ]; then judge "$w" "${key#*/}" "$work/$w.report.json"; fi
  done
done
# An attack the noise of a loaded machine kept from its check (a search trial slower than the baseline, with
# both campaigns and their trials sharing the cores) gets one more campaign of its workload, alone on the
# cluster; twice never verified is a failure: the defence was never exercised.
if [ ${#inconclusive[@]} -gt 0 ]; then
  again=$(printf '%s\n' "${inconclusive[@]}" | cut -d/ -f1 | sort -u)
  retry=("${inconclusive[@]}")
  inconclusive=()
  echo "again, alone: $(printf '%s ' "${retry[@]}")"
  for w in $again; do
    run_campaigns .again "$w"
  done
  for key in "${retry[@]}"; do
    judge "${key%%/*}" "${key#*/}" "$work/${key%%/*}.again.report.json"
  done
  for key in "${inconclusive[@]}"; do
    failures+=("$key never verified in two campaigns: its search trials were not faster than the baseline")
  done
fi
[ ${#failures[@]} = 0 ] || fail "$(printf '%s; ' "${failures[@]}")"
echo "ok: no adversarial patch promoted, each refused for its reason"
[ -n "${ADVERSARIAL_KEEP:-}" ] || rm -rf "$work"
