#!/usr/bin/env bash
# The experience bank across hardware. The machines are synthetic hwloc topologies
# (tests/fixtures/hwloc/gpu-*.xml), handed to campaigns as the plugin's allocation records
# (tests/fixtures/bank/*.jsonl, written with the plugin's writer; `--spool`), so the result does not depend
# on the host the test runs on; the trials themselves run on the local cluster.
#   A  (2x16 cores, PCIe Gen4 GPU): a campaign records its verified findings.
#   A' (A's near twin: another host name, 3% less memory): seen hardware; the seed is A's setting as is.
#   B  (2x32 cores, PCIe Gen5 GPU; its nodes give the job 180M instead of 300M): unseen hardware. The doctor
#      re-baselines before any inherited candidate runs; the seeds are hypotheses with their provenance, in
#      `report --json` and the text report; micro-batch is carried as a rule relative to memory (scaled by
#      180/300), not as A's raw value; an unverified hypothesis never becomes a finding of B.
# Needs SLURM_CONF (scripts/test).
set -euo pipefail
. "$(dirname "$0")/lib.sh" bank-transfer
bank=$work/bank.sqlite

# The toyload fixture copied with its tree (same content: the same workload version in the bank), one
# contract per machine: memory limit, search trials and doctor repeats.
cp -r "$fx/toyload" "$fx/toyload-patches" "$work/"
contract() { # NAME MEM TRIALS BATCH DOCTOR
  sed -e "s/^mem = .*/mem = \"$2\"/" -e "s/^trials = .*/trials = $3/" -e "s/^batch_size = .*/batch_size = $4/" \
    -e "s/^doctor = .*/doctor = $5/" "$fx/toyload.contract.toml" >"$work/$1.contract.toml"
  grep -q "^mem = \"$2\"" "$work/$1.contract.toml" || fail "could not write the contract of $1"
}
contract a 300M 8 4 3
contract twin 300M 2 2 2
contract b 180M 2 2 2
for m in a twin b; do mkdir -p "$work/spool-$m"; done
cp "$fx/bank/allocations-gpu-2s32c-pcie4.jsonl" "$work/spool-a/allocations.jsonl"
cp "$fx/bank/allocations-gpu-2s32c-pcie4-twin.jsonl" "$work/spool-twin/allocations.jsonl"
cp "$fx/bank/allocations-gpu-2s64c-pcie5.jsonl" "$work/spool-b/allocations.jsonl"

run_campaign() { # NAME [run options]
  local name=$1; shift
  "$bin" init "$work/$name.contract.toml" --dir "$work/$name" >/dev/null
  "$bin" run --accept-noise --dir "$work/$name" --bank "$bank" --spool "$work/spool-$name" "$@" >"$work/$name.log" 2>&1 \
    || { cat "$work/$name.log"; fail "campaign $name failed"; }
  "$bin" report --dir "$work/$name" --json >"$work/$name.json"
  "$bin" report --dir "$work/$name" >"$work/$name.txt"
}

# A: verified findings, recorded under A's hardware with the memory rule's inputs.
run_campaign a
jq -e '.promoted | length >= 1' "$work/a.json" >/dev/null || fail "campaign A promoted nothing"
"$bin" bank export --bank "$bank" "$work/export-a.json" >/dev/null
fp_a=$(jq -r '.hardware[] | select(.key.topology.cores == 32) | .fingerprint' "$work/export-a.json")
[ -n "$fp_a" ] || fail "A's hardware (32 cores, from the allocation record) is not in the bank"
node_a=$(jq -rs '.[0].node' "$fx/bank/allocations-gpu-2s32c-pcie4.jsonl")
jq -e --arg fp "$fp_a" --arg n "$node_a" '.hardware[] | select(.fingerprint == $fp) | .nodes | index($n) != null' \
  "$work/export-a.json" >/dev/null || fail "A's hardware entry does not name its node $node_a (from the allocation record)"
setting=$(jq -c --arg fp "$fp_a" '[.findings[] | select(.hardware == $fp and .kind == "knob_setting" and .verified)][0]' "$work/export-a.json")
[ "$setting" != null ] || fail "no verified knob setting of A in the bank"
jq -e '.content.memory_ratio > 0 and .content.memory_ratio < 1 and .content.limit_bytes == 314572800' <<<"$setting" >/dev/null \
  || fail "A's knob setting does not carry memory_ratio and limit_bytes: $setting"
mb_a=$(jq -r '.content.knobs.micro_batch' <<<"$setting")
campaign_a=$(jq -r '.campaign' <<<"$setting")

# A': seen hardware, same memory limit: A's setting as it was, not a hypothesis.
run_campaign twin --no-verify
jq -e '.bank.seeds | length >= 1' "$work/twin.json" >/dev/null || fail "A' got no seeds from A's findings"
jq -e '.bank.seeds | all(.hypothesis == false and (.reason | test("unseen") | not))' "$work/twin.json" >/dev/null \
  || fail "A' (a near twin of A) was treated as unseen hardware: $(jq -c '.bank.seeds' "$work/twin.json")"
jq -e --argjson s "$setting" '.bank.seeds | any(.candidate == $s.content.candidate)' "$work/twin.json" >/dev/null \
  || fail "A' did not inherit A's setting as is: $(jq -c '.bank.seeds' "$work/twin.json")"
jq -e '.bank.hardware.seen' "$work/twin.json" >/dev/null || fail "report --json: A' is not seen hardware"

# B: unseen hardware, less memory per job.
run_campaign b --no-verify
db=$work/b/campaign.db
jq -e '.bank.seeds | length >= 1' "$work/b.json" >/dev/null || fail "B got no seeds from A's findings"
jq -e '.bank.seeds | all(.hypothesis == true)' "$work/b.json" >/dev/null \
  || fail "B's seeds are not marked hypotheses: $(jq -c '.bank.seeds' "$work/b.json")"
jq -e --arg c "$campaign_a" '.bank.seeds | all(.reason | test("unseen hardware") and test("hypothesis to verify, not a result") and test("campaign " + $c))' \
  "$work/b.json" >/dev/null || fail "B's seeds lack the unseen-hardware note or A's provenance: $(jq -c '.bank.seeds' "$work/b.json")"
grep -q "^Experience bank .*: unseen hardware (nearest of [0-9]* entries: similarity [0-9.]*); [1-9][0-9]* seeds" "$work/b.txt" \
  || fail "B's text report does not show unseen hardware and its seeds: $(grep '^Experience bank' "$work/b.txt")"
jq -e '.bank.hardware.seen == false' "$work/b.json" >/dev/null || fail "report --json: B's hardware is not unseen"
grep -q "^  seed .*unseen hardware.*a hypothesis to verify, not a result" "$work/b.txt" \
  || fail "B's text report does not say the hardware was not seen: $(grep -A3 '^Experience bank' "$work/b.txt")"

# Capacity as a rule relative to memory: A's micro-batch scaled by 180/300, rounded down to a power of two.
want=1
while [ $((want * 2 * 300)) -le $((mb_a * 180)) ]; do want=$((want * 2)); done
seed=$(jq -c '[.bank.seeds[] | select(.reason | test("capacity rule"))][0].candidate' "$work/b.json")
[ "$seed" != null ] || fail "B's seeds do not apply the capacity rule: $(jq -c '.bank.seeds' "$work/b.json")"
jq -e --argjson w "$want" '.knobs.micro_batch == $w and .knobs.micro_batch * .knobs.grad_accum == 16' <<<"$seed" >/dev/null \
  || fail "A's micro_batch=$mb_a at 300M should be micro_batch=$want at 180M, got $seed"

# The doctor re-baselined on B before any inherited candidate ran.
seed_batch=$(sqlite3 "$db" "SELECT min(batch_id) FROM trials WHERE kind='search' AND reason LIKE '%experience bank%'")
[ -n "$seed_batch" ] || fail "B's seeds never ran"
order=$(sqlite3 "$db" "SELECT (SELECT max(finished) FROM batches WHERE kind='doctor') <= submitted AND
  (SELECT max(id) FROM batches WHERE kind='doctor') < id FROM batches WHERE id=$seed_batch")
[ "$order" = 1 ] || fail "B's seeded batch $seed_batch was submitted before the doctor's re-baseline finished"
sqlite3 "$db" "SELECT count(*) FROM trials WHERE kind='doctor' AND state='finished' AND outcome='ok'" | grep -qv '^0$' \
  || fail "B has no successful baseline run"
seeded=$(sqlite3 "$db" "SELECT candidate FROM trials WHERE kind='search' AND reason LIKE '%capacity rule%'")
jq -s -e --argjson s "$seed" 'map(. == $s) | any' <<<"$seeded" >/dev/null || fail "the scaled seed never ran on B"
oom=$(sqlite3 "$db" "SELECT count(*) FROM trials WHERE kind='search' AND reason LIKE '%capacity rule%' AND outcome='oom'")
[ "$oom" = 0 ] || fail "the seed scaled to B's memory ran out of memory"

# Hypotheses, not results: nothing of B's became a verified knob setting in the bank.
"$bin" bank export --bank "$bank" "$work/export-b.json" >/dev/null
fp_b=$(jq -r '.hardware[] | select(.key.topology.cores == 64) | .fingerprint' "$work/export-b.json")
[ -n "$fp_b" ] || fail "B's hardware (64 cores) is not in the bank"
jq -e --arg fp "$fp_b" '[.findings[] | select(.hardware == $fp and .kind == "knob_setting")] | length == 0' \
  "$work/export-b.json" >/dev/null || fail "an unverified hypothesis on B became a knob setting in the bank"
rm -rf "$work"
echo "ok: A's findings seed its twin as is; on unseen B the doctor re-baselines first, seeds are hypotheses with provenance, micro-batch $mb_a -> $want by the memory rule"
