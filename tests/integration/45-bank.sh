#!/usr/bin/env bash
# The experience bank end to end: a first campaign records its verified findings; a second campaign on the
# same hardware starts from them (seeds shown in its report, run in its first batch); export/import
# round-trips, a second import changes nothing, and a corrupted export is refused leaving the bank as it was.
# Needs SLURM_CONF (scripts/test).
set -euo pipefail
. "$(dirname "$0")/lib.sh" bank
bank=$work/bank.sqlite

# The first campaign: the toyload contract with 2 doctor runs and one search batch of 4 (its micro-batch gain is
# about 2x: found in any first batch), then verified.
cp -r "$fx/toyload" "$fx/toyload-patches" "$work/"
sed -e 's/^trials = .*/trials = 4/' -e 's/^doctor = .*/doctor = 2/' "$fx/toyload.contract.toml" >"$work/first.contract.toml"
"$bin" init "$work/first.contract.toml" --dir "$work/first" >/dev/null
"$bin" run --accept-noise --dir "$work/first" --bank "$bank" >"$work/first.log" 2>&1 || { cat "$work/first.log"; fail "first campaign failed"; }
"$bin" report --dir "$work/first" --json | jq -e '.promoted | length >= 1' >/dev/null || fail "first campaign promoted nothing"
"$bin" report --dir "$work/first" >"$work/first.txt"
grep -q "^Experience bank .*: unseen hardware (the bank is empty); 0 seeds" "$work/first.txt" \
  || fail "the first campaign's report does not say the bank was empty"
"$bin" bank show --bank "$bank" --json >"$work/show.json"
jq -e '[.hardware[0].findings[] | select(.kind == "knob_setting" and .verified)] | length >= 1' "$work/show.json" >/dev/null \
  || fail "no verified knob setting in the bank after the first campaign"
# Same topology; the workload is not named by `bank show`, which costs one software factor (0.9).
jq -e '.hardware[0].seen and .hardware[0].similarity > 0.85' "$work/show.json" >/dev/null || fail "the bank does not know this machine"
# Its nodes: the cluster's node names where the run found the plugin's allocation records (n1..n4 here), else
# this host's name; at least one, and none that is neither.
sinfo -h -N -o %N | sort -u >"$work/cluster-nodes.txt"
hostname >>"$work/cluster-nodes.txt"
jq -e --rawfile known "$work/cluster-nodes.txt" '.hardware[0].nodes as $n |
    ($known | split("\n") | map(select(. != ""))) as $k | ($n | length) >= 1 and all($n[]; . as $x | $k | index($x) != null)' \
  "$work/show.json" >/dev/null \
  || fail "the bank's entry does not name this cluster's nodes (or this host): $(jq -c '.hardware[0].nodes' "$work/show.json") vs $(tr '\n' ' ' <"$work/cluster-nodes.txt")"
"$bin" bank show --bank "$bank" >"$work/show.txt"
grep -q "prior" "$work/show.txt" || fail "bank show prints no prior"

# The second campaign is checked up to its search (the same small contract), without verification.
"$bin" init "$work/first.contract.toml" --dir "$work/second" >/dev/null
"$bin" run --accept-noise --no-verify --dir "$work/second" --bank "$bank" >"$work/second.log" 2>&1 || { cat "$work/second.log"; fail "second campaign failed"; }
"$bin" report --dir "$work/second" --json >"$work/second.json"
jq -e '.bank.seeds | length >= 1' "$work/second.json" >/dev/null || fail "the second campaign has no seeds from the bank"
jq -e '.bank.seeds[0].reason | test("experience bank")' "$work/second.json" >/dev/null || fail "seed without its provenance"
"$bin" report --dir "$work/second" >"$work/second.txt"
grep -q "^Experience bank .*: seen hardware (similarity [0-9.]* to [0-9a-f]*); [1-9][0-9]* seeds" "$work/second.txt" \
  || fail "the report does not show the seeds on seen hardware: $("$bin" report --dir "$work/second" | grep '^Experience bank')"
jq -e '.bank.hardware.seen and .bank.hardware.entries >= 1' "$work/second.json" >/dev/null || fail "report --json: hardware not seen"
# The inherited candidate was tried in the first search batch, after the doctor's re-baseline.
seed=$(jq -r '.bank.seeds[0].candidate | tojson' "$work/second.json")
sqlite3 "$work/second/campaign.db" "SELECT candidate FROM trials WHERE kind='search' AND reason LIKE '%experience bank%'" \
  | jq -s -e --argjson seed "$seed" 'map(. == $seed) | any' >/dev/null || fail "the seed never ran as a search trial"
first_search=$(sqlite3 "$work/second/campaign.db" "SELECT min(batch_id) FROM trials WHERE kind='search'")
seed_batch=$(sqlite3 "$work/second/campaign.db" "SELECT min(batch_id) FROM trials WHERE kind='search' AND reason LIKE '%experience bank%'")
[ "$first_search" = "$seed_batch" ] || fail "the seed ran in batch $seed_batch, not in the first search batch $first_search"

# Across clusters: export, import twice into another bank, refuse a corrupted file.
"$bin" bank export --bank "$bank" "$work/export.json" >/dev/null
out1=$("$bin" bank import --bank "$work/other.sqlite" "$work/export.json")
out2=$("$bin" bank import --bank "$work/other.sqlite" "$work/export.json")
grep -q " 0 new findings" <<<"$out1" && fail "first import added nothing: $out1"
grep -q " 0 new hardware entries, 0 new findings" <<<"$out2" || fail "second import changed the bank: $out2"
before=$("$bin" bank show --bank "$work/other.sqlite" --json | jq '[.hardware[].findings[]] | length')
head -c 300 "$work/export.json" >"$work/cut.json"
if "$bin" bank import --bank "$work/other.sqlite" "$work/cut.json" 2>"$work/err.txt"; then fail "a truncated export was accepted"; fi
grep -q "cut.json" "$work/err.txt" || fail "the error does not name the file: $(cat "$work/err.txt")"
after=$("$bin" bank show --bank "$work/other.sqlite" --json | jq '[.hardware[].findings[]] | length')
[ "$before" = "$after" ] || fail "a refused import changed the bank ($before -> $after findings)"
rm -rf "$work"
echo "ok: findings recorded, second campaign seeded from them, export/import idempotent, corrupted file refused"
