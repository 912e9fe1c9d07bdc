#!/usr/bin/env bash
# The HTML report in a real browser: a small real campaign (the toyload fixture on the local scheduler, a
# tight memory limit so that it has OOMs, a patch that does not build and one that breaks the loss), its
# `infrarsi report --html`, rendered by headless Chromium (Debian's chromium). Fails on any console message
# (the page's one script sorts the trial table and prints nothing: any message is a load, parse or script
# error), on a plot or view the browser did not draw (each of the ten by name: an <svg> with a non-empty box
# and drawn elements), on a trial table that a click on "step s" does not sort or that marks no setting
# differing from the baseline's, and checks that the check itself catches a missing plot. Saves the
# screenshot as <build>/browser/report.png.
set -euo pipefail
build=${INFRARSI_BUILD_DIR:?the build directory}
src=${INFRARSI_SOURCE_DIR:?the source directory}
infrarsi=$build/orchestrator/infrarsi
chromium=${INFRARSI_CHROMIUM:-chromium}
command -v "$chromium" >/dev/null || { echo "FAIL: $chromium not found (scripts/setup installs Debian's chromium)"; exit 1; }
command -v gnuplot >/dev/null || { echo "FAIL: gnuplot not found (scripts/setup installs gnuplot-nox)"; exit 1; }

work=$(mktemp -d /tmp/infrarsi-browser-XXXXXX)
trap 'rm -rf "$work"' EXIT
fx=$src/tests/fixtures
cp -r "$fx/toyload" "$fx/toyload-patches" "$work/"
# The toyload contract, smaller: four steps of less work, a limit that micro_batch 8 and 16 exceed, six
# trials, a minute of wall time (what verification and ablation may take is cut to it).
sed -e 's/^TOY_GLOBAL_BATCH = 16$/TOY_GLOBAL_BATCH = 16\nTOY_WORK = 150000/' -e 's/^mem = "300M"$/mem = "120M"/' \
    -e 's/^trials = 8$/trials = 6/' -e 's/^batch_size = 4$/batch_size = 3/' -e 's/^verify = 3$/verify = 2/' \
    -e 's/^steps = 8$/steps = 4/' -e 's/^warmup_steps = 2$/warmup_steps = 1/' -e 's/^wall_time = .*$/wall_time = "00:01:00"/' \
    "$fx/toyload.contract.toml" > "$work/toyload.contract.toml"
grep -q 'TOY_WORK = 150000' "$work/toyload.contract.toml" && grep -q 'mem = "120M"' "$work/toyload.contract.toml" \
  || { echo "FAIL: the toyload contract changed; update the edits above"; exit 1; }

start=$(date +%s)
"$infrarsi" init "$work/toyload.contract.toml" --dir "$work/c" >/dev/null
INFRARSI_BANK=off "$infrarsi" run --dir "$work/c" --scheduler local > "$work/run.log" 2>&1 \
  || { cat "$work/run.log"; echo "FAIL: the campaign failed"; exit 1; }
echo "campaign: $(( $(date +%s) - start )) s; outcomes: $("$infrarsi" status --dir "$work/c" --json | jq -c .outcomes)"

out=$build/browser
rm -rf "$out"; mkdir -p "$out"
"$infrarsi" report --dir "$work/c" --html "$out/report.html" --html-dir "$out/audit" >/dev/null

browse() { # browse OUTPUT-ARGS... FILE: chromium's stderr (console messages included) to $work/console.log
  timeout 60 "$chromium" --headless=new --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/profile" \
    --enable-logging=stderr --v=0 "$@" 2> "$work/console.log"
}
browse --screenshot="$out/report.png" --window-size=1280,3000 --hide-scrollbars "file://$out/report.html" >/dev/null
[ -s "$out/report.png" ] || { echo "FAIL: no screenshot"; exit 1; }
if grep -a 'CONSOLE' "$work/console.log"; then echo "FAIL: console messages from the report"; exit 1; fi

# Each plot as the browser laid it out: a copy of the page with a checker appended, its DOM after load.
plots='["progress-trials","progress-node-hours","memory","oom-map","verification","cost","loss-curves","step-time-curves","parallel-coordinates","timeline"]'
checker="<script>
const want = $plots; let ok = 0;
for (const id of want) {
  const svg = document.querySelector('figure[data-plot=\"' + id + '\"] svg');
  const box = svg ? svg.getBoundingClientRect() : null;
  const drawn = svg ? svg.querySelectorAll('path, polyline, use, rect, polygon').length : 0;
  if (!svg || box.width < 100 || box.height < 100 || drawn < 5) console.error('plot missing or empty: ' + id);
  else ok++;
}
document.body.setAttribute('data-plots-drawn', ok + '/' + want.length);
// The trial table: a click on its step-time column sorts the rows by it, ascending, trials without one last.
const table = document.querySelector('table.sortable');
const heads = table ? Array.from(table.tHead.rows[0].cells) : [];
const col = heads.findIndex((h) => h.textContent === 'step s');
let sorted = 'no';
if (col >= 0) {
  heads[col].click();
  const cells = Array.from(table.tBodies[0].rows).map((r) => r.cells[col].getAttribute('data-v'));
  const vals = cells.filter((v) => v !== null).map(Number);
  const missingLast = cells.every((v, i) => v !== null || cells.slice(i).every((w) => w === null));
  if (vals.length > 1 && missingLast && vals.every((v, i) => i === 0 || vals[i - 1] <= v)) sorted = 'yes';
}
document.body.setAttribute('data-table-sorted', sorted);
document.body.setAttribute('data-table-marked', table ? table.querySelectorAll('mark.differs').length : 0);
</script>"
check() { # check PAGE: prints the drawn count, the console messages
  local page=$1
  { sed '/<\/body>/,$d' "$page"; echo "$checker"; echo '</body></html>'; } > "$work/check.html"
  browse --dump-dom "file://$work/check.html" > "$work/dom.html"
  grep -o 'data-plots-drawn="[^"]*"' "$work/dom.html" || echo 'data-plots-drawn="none"'
  grep -o 'data-table-[a-z]*="[^"]*"' "$work/dom.html" || true
  grep -a 'CONSOLE' "$work/console.log" || true
}
result=$(check "$out/report.html")
echo "$result"
grep -qx 'data-plots-drawn="10/10"' <<<"$result" || { echo "FAIL: not every plot was drawn"; exit 1; }
grep -qx 'data-table-sorted="yes"' <<<"$result" || { echo "FAIL: the trial table did not sort by step time"; exit 1; }
grep -q 'data-table-marked="[1-9]' <<<"$result" || { echo "FAIL: no setting marked as differing from the baseline's"; exit 1; }
if grep -a 'CONSOLE' <<<"$result"; then echo "FAIL: console messages from the checked page"; exit 1; fi
# What the page says of the campaign: a log linked beside each result, no empty Verifications table.
grep -q '>log.txt</a>' "$out/report.html" || { echo "FAIL: no trial's log.txt linked"; exit 1; }
# The check catches a missing plot: the cost plot's SVG taken out.
python3 - "$out/report.html" "$work/broken.html" <<'PY'
import re, sys
page = open(sys.argv[1]).read()
open(sys.argv[2], "w").write(re.sub(r'(data-plot="cost">.*?)<svg.*?</svg>', r'\1', page, flags=re.S))
PY
broken=$(check "$work/broken.html")
echo "$broken" | grep -q 'data-plots-drawn="9/10"' && echo "$broken" | grep -q 'plot missing or empty: cost' \
  || { echo "$broken"; echo "FAIL: the check did not catch the missing plot"; exit 1; }
echo "PASS: 10 plots and views drawn, the trial table sorted, no console message; screenshot $out/report.png ($(( $(date +%s) - start )) s)"
