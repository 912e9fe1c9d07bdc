#!/usr/bin/env bash
# The infrarsid unit stays sandboxed (issue 29: `systemd-analyze security` rated it 7.3 MEDIUM before; 3.4 OK
# with ProtectSystem=strict, NoNewPrivileges, PrivateTmp, capabilities limited to dropping to users): its
# exposure, judged offline from the unit file (no systemd needed as PID 1), must stay at most the limit given.
# Where systemd-analyze is missing or has no --offline (before systemd 250) it says so and passes.
set -euo pipefail
unit=$1 limit=$2
if ! command -v systemd-analyze >/dev/null; then
  echo "skipped: no systemd-analyze"
  exit 0
fi
if ! out=$(systemd-analyze security --offline=yes --no-pager "$unit" 2>&1); then
  if grep -q -- "--offline" <<<"$out" || grep -qi "unrecognized option" <<<"$out"; then
    echo "skipped: this systemd-analyze cannot judge a unit file offline: $(head -n 1 <<<"$out")"
    exit 0
  fi
fi
score=$(grep -oE 'Overall exposure level for [^:]*: [0-9]+\.[0-9]+' <<<"$out" | grep -oE '[0-9]+\.[0-9]+$' || true)
[ -n "$score" ] || { echo "no exposure level in systemd-analyze's output:"; tail -n 5 <<<"$out"; exit 1; }
echo "systemd-analyze security --offline=yes $(basename "$unit"): exposure $score (at most $limit)"
awk -v s="$score" -v l="$limit" 'BEGIN { exit !(s <= l) }' || {
  echo "the unit's exposure $score is above $limit: what changed?"
  grep -E '^✗' <<<"$out" | head -n 20
  exit 1
}
