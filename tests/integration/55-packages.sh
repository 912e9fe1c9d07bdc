#!/usr/bin/env bash
# The Debian packages (cmake/packaging.cmake, docs/install.md): `cpack -G DEB` of the build makes infrarsi,
# infrarsi-spank and infrarsi-workloads with the expected files, conffiles and Depends (the plugin's on the Slurm
# release it was built for, Debian's or SchedMD's; Open MPI only for the workloads), Debian's copyright and
# changelog, man pages with their sections, and no test material; lintian finds nothing but the tags
# docs/install.md explains. The maintainer scripts are run with stubs: an upgrade try-restarts infrarsid, a first
# install starts nothing. As root the packages are installed with dpkg and used from the installed paths only:
# `infrarsi --version`, `infrarsi init` of the installed minigpt preset and torchgpt contract; the plugin is not
# enabled by the install (`srun --help` through a plugstack.conf.d include has no --infrarsi) and is once the
# shipped snippet is linked in (as docs/install.md tells the operator); the man pages, bash completion and the
# systemd unit. Then all are purged and the infrarsi user they made is removed, leaving the machine as it was.
# No cluster: srun --help only reads a private slurm.conf and plugstack.conf.
set -euo pipefail
export INFRARSI_BANK=off
. "$(dirname "$0")/lib.sh" packages --own-cluster # no cluster: SLURM_CONF is this test's own
passed=0
installed=0
user_existed=0
getent passwd infrarsi >/dev/null && user_existed=1
packages="infrarsi-spank infrarsi-workloads infrarsi"
uninstall() {
  # shellcheck disable=SC2086 # the package names
  dpkg -P $packages >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; return 1; }
  if [ $user_existed = 0 ]; then
    if getent passwd infrarsi >/dev/null; then userdel infrarsi; fi
    if getent group infrarsi >/dev/null; then groupdel infrarsi; fi
  fi
  installed=0
}
cleanup() {
  if [ $installed = 1 ]; then
    echo "cleanup: purging the packages this test installed" >&2
    uninstall || echo "cleanup: dpkg -P $packages failed; remove them by hand" >&2
  fi
  [ $passed = 0 ] || rm -rf "$work"
}
trap cleanup EXIT

for t in cpack dpkg-deb dpkg-shlibdeps dpkg-architecture; do
  command -v "$t" >/dev/null || fail "no $t (scripts/setup installs cmake and dpkg-dev)"
done
[ -f "$build/CPackConfig.cmake" ] || fail "no $build/CPackConfig.cmake: configure the build first"
version=$("$bin" --version) || fail "$bin --version failed"
version=${version#infrarsi }
release=$(sed -n 's/^INFRARSI_PACKAGE_RELEASE:STRING=//p' "$build/CMakeCache.txt")
debversion=$version-${release:-1} # the packages' Version: VERSION-INFRARSI_PACKAGE_RELEASE
contact=$(sed -n 's/^INFRARSI_PACKAGE_CONTACT:STRING=//p' "$build/CMakeCache.txt")
[ -n "$contact" ] || fail "no INFRARSI_PACKAGE_CONTACT in $build/CMakeCache.txt"
# The Slurm release the plugin was built for, from the headers the build used (spank/CMakeLists.txt).
slurm_include=$(sed -n 's/^SLURM_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")
slurm_hex=$(sed -n 's/^#define SLURM_VERSION_NUMBER \(0x[0-9a-fA-F]*\).*/\1/p' "$slurm_include/slurm/slurm_version.h")
[ -n "$slurm_hex" ] || fail "no SLURM_VERSION_NUMBER in $slurm_include/slurm/slurm_version.h"
slurm_release=$(printf '%d.%02d' $((slurm_hex >> 16 & 255)) $((slurm_hex >> 8 & 255)))
slurm_bound=$(printf '%d.%02d' $((slurm_hex >> 16 & 255)) $(((slurm_hex >> 8 & 255) + 1)))
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)
plugin=/usr/lib/$multiarch/slurm-wlm/infrarsi.so

# 1. The packages, from the build as it is (cpack installs each component under /usr into its own staging).
log=$work/cpack.log
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/pkg" >"$log" 2>&1 || fail "cpack -G DEB failed"
main=$work/pkg/infrarsi_${debversion}_$arch.deb
spank=$work/pkg/infrarsi-spank_${debversion}_$arch.deb
wl=$work/pkg/infrarsi-workloads_${debversion}_$arch.deb
for deb in "$main" "$spank" "$wl"; do
  [ -f "$deb" ] || fail "cpack made no $(basename "$deb"): $(ls "$work/pkg")"
done
[ "$(find "$work/pkg" -maxdepth 1 -name '*.deb' | wc -l)" = 3 ] || fail "cpack made other packages: $(ls "$work/pkg")"
log=""

field() { dpkg-deb -f "$1" "$2"; }
[ "$(field "$main" Package)" = infrarsi ] || fail "infrarsi's Package: $(field "$main" Package)"
[ "$(field "$spank" Package)" = infrarsi-spank ] || fail "infrarsi-spank's Package: $(field "$spank" Package)"
[ "$(field "$wl" Package)" = infrarsi-workloads ] || fail "infrarsi-workloads' Package: $(field "$wl" Package)"
for deb in "$main" "$spank" "$wl"; do
  [ "$(field "$deb" Version)" = "$debversion" ] || fail "$(basename "$deb"): Version $(field "$deb" Version), not $debversion"
  [ "$(field "$deb" Maintainer)" = "$contact" ] || fail "$(basename "$deb"): Maintainer '$(field "$deb" Maintainer)', not the build's '$contact'"
  [ -n "$(field "$deb" Description)" ] || fail "$(basename "$deb") has no Description"
done
main_depends=$(field "$main" Depends)
spank_depends=$(field "$spank" Depends)
wl_depends=$(field "$wl" Depends)
echo "infrarsi Depends: $main_depends"
echo "infrarsi-spank Depends: $spank_depends"
echo "infrarsi-spank Provides: $(field "$spank" Provides)"
echo "infrarsi-workloads Depends: $wl_depends"
# Declared, and computed by dpkg-shlibdeps from the binaries (hwloc, sqlite; MPI for minigpt only).
for d in adduser patch 'libhwloc[0-9]+ ' 'libsqlite3-0 ' 'libssl3 ' 'libstdc\+\+6 '; do
  grep -qE "(^|, )$d" <<<"$main_depends" || fail "infrarsi's Depends lacks $d: $main_depends"
done
if grep -qiE 'openmpi|libgomp' <<<"$main_depends"; then fail "infrarsi depends on Open MPI or OpenMP (minigpt's): $main_depends"; fi
for d in "infrarsi \\(= $debversion\\)" 'libopenmpi[0-9]+ '; do
  grep -qE "(^|, )$d" <<<"$wl_depends" || fail "infrarsi-workloads' Depends lacks $d: $wl_depends"
done
# The plugin's Slurm: this release of Debian's packages or of SchedMD's, nothing before it nor from the next one.
r=${slurm_release//./\\.}
b=${slurm_bound//./\\.}
for d in "infrarsi \\(= $debversion\\)" 'libhwloc[0-9]+ \([^)]*\)' \
  "slurm-wlm-basic-plugins \\(>= $r\\) \\| slurm-smd \\(>= $r\\)" \
  "slurm-wlm-basic-plugins \\(<< $b\\) \\| slurm-smd \\(<< $b\\)"; do
  grep -qE "(^|, )$d(,|$)" <<<"$spank_depends" || fail "infrarsi-spank's Depends lacks $d: $spank_depends"
done
[ "$(field "$spank" Provides)" = "infrarsi-spank-slurm-$slurm_release" ] || fail "infrarsi-spank's Provides: $(field "$spank" Provides)"
grep -qF "Slurm $slurm_release" <<<"$(field "$spank" Description)" || fail "infrarsi-spank's Description does not name Slurm $slurm_release"
# What those bounds admit, as dpkg compares versions: Debian's and SchedMD's x.y.z-n of this release; not the next.
if ! dpkg --compare-versions "$slurm_release.8-4+deb12u3" ge "$slurm_release" || ! dpkg --compare-versions "$slurm_release.99-1" lt "$slurm_bound" ||
  dpkg --compare-versions "$slurm_bound.0-1" lt "$slurm_bound"; then
  fail "the bounds $slurm_release, $slurm_bound do not bracket the release"
fi
# And as apt resolves them, where this release of Debian's Slurm is installed: the package is installable, and the
# same package claiming the next release (its control rewritten) is refused for this Slurm.
installed_slurm=$(dpkg-query -W -f='${Version}' slurm-wlm-basic-plugins 2>/dev/null || true)
if [ -n "$installed_slurm" ] && dpkg --compare-versions "$installed_slurm" ge "$slurm_release" &&
  dpkg --compare-versions "$installed_slurm" lt "$slurm_bound"; then
  apt-get install --simulate "$main" "$spank" >"$work/apt-sim.txt" 2>&1 || { log=$work/apt-sim.txt; fail "apt-get cannot install infrarsi-spank beside Slurm $installed_slurm"; }
  dpkg-deb -R "$spank" "$work/next"
  next=$(printf '%d.%02d' $((slurm_hex >> 16 & 255)) $(((slurm_hex >> 8 & 255) + 2)))
  sed -i -e "/^Depends:/s/(>= $r)/(>= $slurm_bound)/g" -e "/^Depends:/s/(<< $b)/(<< $next)/g" "$work/next/DEBIAN/control"
  grep -q "slurm-smd (>= $slurm_bound)" "$work/next/DEBIAN/control" || fail "could not rewrite the copy's Depends: $(grep ^Depends "$work/next/DEBIAN/control")"
  dpkg-deb -b "$work/next" "$work/next.deb" >/dev/null
  if apt-get install --simulate "$main" "$work/next.deb" >"$work/apt-sim.txt" 2>&1; then
    log=$work/apt-sim.txt; fail "apt-get would install a plugin package for Slurm $slurm_bound beside Slurm $installed_slurm"
  fi
  grep -q "slurm-wlm-basic-plugins (>= $slurm_bound) but $installed_slurm" "$work/apt-sim.txt" || { log=$work/apt-sim.txt; fail "apt-get refused the next release's package, but not for its Slurm"; }
  echo "ok: apt installs infrarsi-spank beside Slurm $installed_slurm and refuses a package of it for $slurm_bound"
else
  echo "SKIP: apt's verdict on the Slurm Depends (Debian's Slurm $slurm_release is not installed here)"
fi

# Their files (dpkg-deb -c lists ./path).
dpkg-deb -c "$main" | awk '{print $6}' >"$work/main.files"
dpkg-deb -c "$spank" | awk '{print $6}' >"$work/spank.files"
dpkg-deb -c "$wl" | awk '{print $6}' >"$work/wl.files"
snippet=/usr/share/infrarsi/plugstack.conf.d/infrarsi.conf
for f in usr/bin/infrarsi usr/bin/infrarsid usr/share/infrarsi/sbatch/trial.sbatch usr/share/infrarsi/sbatch/infrarsid.sbatch \
  usr/share/doc/infrarsi/README.md usr/share/doc/infrarsi/install.md usr/share/man/man1/infrarsi.1.gz \
  usr/share/man/man1/infrarsid.1.gz usr/share/bash-completion/completions/infrarsi \
  usr/share/bash-completion/completions/infrarsid lib/systemd/system/infrarsid.service etc/default/infrarsid; do
  grep -qxF "./$f" "$work/main.files" || fail "infrarsi's package lacks /$f"
done
for f in "${plugin#/}" "${snippet#/}" usr/share/man/man8/infrarsi-spank.8.gz; do
  grep -qxF "./$f" "$work/spank.files" || fail "infrarsi-spank's package lacks /$f"
done
for f in usr/libexec/infrarsi/minigpt usr/share/infrarsi/sbatch/minigpt.sbatch usr/share/infrarsi/workloads/minigpt/CMakeLists.txt \
  usr/share/infrarsi/workloads/minigpt/presets/dense-1node.contract.toml usr/share/infrarsi/workloads/minigpt/patches/catalog.toml \
  usr/share/infrarsi/workloads/torchgpt/torchgpt.contract.toml usr/share/infrarsi/workloads/torchgpt/train.py; do
  grep -qxF "./$f" "$work/wl.files" || fail "infrarsi-workloads' package lacks /$f"
done
# Debian's policy files, in each package.
for p in main:infrarsi spank:infrarsi-spank wl:infrarsi-workloads; do
  for f in copyright changelog.Debian.gz; do
    grep -qxF "./usr/share/doc/${p#*:}/$f" "$work/${p%%:*}.files" || fail "${p#*:}'s package lacks /usr/share/doc/${p#*:}/$f"
  done
done
if grep -q 'infrarsi\.so$' "$work/main.files" "$work/wl.files"; then fail "the plugin is in the infrarsi or infrarsi-workloads package"; fi
if grep -qE '^\./usr/(libexec|share/infrarsi/workloads)/' "$work/main.files" "$work/spank.files"; then
  fail "a workload outside infrarsi-workloads: $(grep -hE '^\./usr/(libexec|share/infrarsi/workloads)/' "$work/main.files" "$work/spank.files" | head -3)"
fi
if grep -q '^\./usr/bin/' "$work/spank.files" "$work/wl.files"; then fail "infrarsi-spank or infrarsi-workloads has commands"; fi
if grep -q '^\./etc/' "$work/spank.files"; then fail "infrarsi-spank installs into /etc (it must not enable itself): $(grep '^\./etc/' "$work/spank.files")"; fi
if grep -q 'plugstack' "$work/main.files" "$work/wl.files"; then fail "a plugstack snippet outside infrarsi-spank: $(grep -h plugstack "$work/main.files" "$work/wl.files")"; fi
if grep -qE '/build[^/]*/|^\./usr/etc/|^\./usr/local/' "$work/main.files" "$work/spank.files" "$work/wl.files"; then
  fail "a build tree, /usr/etc or /usr/local in a package: $(grep -hE '/build[^/]*/|^\./usr/etc/|^\./usr/local/' "$work/main.files" "$work/spank.files" "$work/wl.files" | head -3)"
fi
# No test material: no tests/ or fixtures/ directory, nothing adversarial, none of the adversarial catalogs'
# patches by name (listed from the source tree, so a new one is looked for too).
adversarial=$(find "$src"/workloads/*/patches/adversarial -name '*.patch' -printf '%f\n' | sort -u)
[ -n "$adversarial" ] || fail "no adversarial patches found in the source tree to look for"
for l in main spank wl; do
  if grep -E '/tests?/|adversarial|/fixtures/' "$work/$l.files"; then fail "test material in a package (above)"; fi
  while read -r p; do
    if grep -qF "/$p" "$work/$l.files"; then fail "the adversarial patch $p is in a package"; fi
  done <<<"$adversarial"
done

# Control files: conffiles for /etc, the infrarsi user made by infrarsi's postinst.
dpkg-deb -e "$main" "$work/main.control"
dpkg-deb -e "$spank" "$work/spank.control"
dpkg-deb -e "$wl" "$work/wl.control"
[ "$(cat "$work/main.control/conffiles")" = /etc/default/infrarsid ] || fail "infrarsi's conffiles: $(cat "$work/main.control/conffiles" 2>&1)"
for l in spank wl; do
  [ ! -e "$work/$l.control/conffiles" ] || fail "$l has conffiles: $(cat "$work/$l.control/conffiles")"
  [ -z "$(find "$work/$l.control" -name 'p*inst' -o -name 'p*rm')" ] || fail "$l has maintainer scripts: $(ls "$work/$l.control")"
done
grep -q 'adduser --system --group' "$work/main.control/postinst" || fail "infrarsi's postinst does not make the infrarsi user"
postinst=$(grep -v '^ *#' "$work/main.control/postinst")
if grep -qE 'systemctl (enable|start)|deb-systemd-helper enable|deb-systemd-invoke (start|restart)' <<<"$postinst"; then
  fail "the postinst enables or starts infrarsid"
fi

# The maintainer scripts, run with stubs for what they call, on a /run that says systemd runs (a private mount
# namespace: the host's /run is untouched): an upgrade (postinst configure OLD) try-restarts infrarsid, a first
# install (configure with no OLD) starts and restarts nothing; prerm stops it on remove, not on upgrade.
if [ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null; then
  stubs=$work/stubs
  mkdir -p "$stubs"
  for c in deb-systemd-invoke systemctl adduser; do
    printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$c" "$work/calls.log" >"$stubs/$c"
    chmod +x "$stubs/$c"
  done
  printf '#!/bin/sh\nexit 0\n' >"$stubs/getent" && chmod +x "$stubs/getent" # the user exists
  calls() { # SCRIPT ARGS...: run one maintainer script with the stubs; prints what it called
    : >"$work/calls.log"
    unshare --mount sh -c 'mount -t tmpfs none /run && mkdir -p /run/systemd/system && PATH="$0:$PATH" sh "$@"' \
      "$stubs" "$@" >/dev/null 2>&1 || fail "$* failed"
    cat "$work/calls.log"
  }
  out=$(calls "$work/main.control/postinst" configure "$debversion")
  grep -qx 'deb-systemd-invoke try-restart infrarsid.service' <<<"$out" || fail "postinst configure $debversion (an upgrade) did not try-restart infrarsid: $out"
  out=$(calls "$work/main.control/postinst" configure)
  if grep -qE 'start' <<<"$out"; then fail "postinst configure (a first install) starts infrarsid: $out"; fi
  grep -qx 'systemctl --system daemon-reload' <<<"$out" || fail "postinst configure did not reload systemd: $out"
  out=$(calls "$work/main.control/prerm" upgrade "$debversion")
  [ -z "$out" ] || fail "prerm upgrade stopped something: $out"
  out=$(calls "$work/main.control/prerm" remove)
  grep -qx 'deb-systemd-invoke stop infrarsid.service' <<<"$out" || fail "prerm remove did not stop infrarsid: $out"
  echo "ok: maintainer scripts: an upgrade try-restarts infrarsid, a first install starts nothing, remove stops it"
else
  echo "SKIP: running the maintainer scripts (needs root and unshare --mount)"
fi

# The snippet names the installed plugin; the unit runs the installed daemon as root, bounded to the capabilities that
# dropping to users needs, with its config file.
dpkg-deb --fsys-tarfile "$spank" | tar -xO ".$snippet" >"$work/snippet.conf"
grep -qE "^required $plugin( |$)" "$work/snippet.conf" || fail "the snippet does not name $plugin: $(grep -v '^#' "$work/snippet.conf")"
dpkg-deb --fsys-tarfile "$main" | tar -xO ./lib/systemd/system/infrarsid.service >"$work/infrarsid.service"
for l in 'CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_CHOWN' 'EnvironmentFile=/etc/default/infrarsid' 'ExecStart=/usr/bin/infrarsid --root ${INFRARSID_ROOT} --spool ${INFRARSID_SPOOL}' \
  'NoNewPrivileges=yes' 'ProtectSystem=strict' 'PrivateTmp=yes' 'StateDirectory=infrarsi'; do
  grep -qF "$l" "$work/infrarsid.service" || fail "infrarsid.service lacks $l"
done
# Its sandbox, as systemd rates it (3.4 when written; 7.3 before the hardening): below 5 (MEDIUM and worse).
if systemd-analyze security --help 2>/dev/null | grep -q -- --offline; then
  systemd-analyze security --offline=yes "$work/infrarsid.service" >"$work/security.txt" 2>&1 || true
  score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$work/security.txt")
  [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s < 5) }' ||
    { log=$work/security.txt; fail "systemd-analyze security rates infrarsid.service ${score:-?} (expected below 5)"; }
fi
# Man pages: the sections an operator looks for (read from the packages, so this holds where dpkg leaves man
# pages out).
for page in infrarsi.1 infrarsid.1; do
  dpkg-deb --fsys-tarfile "$main" | tar -xO "./usr/share/man/man1/$page.gz" | zcat >"$work/$page"
done
dpkg-deb --fsys-tarfile "$spank" | tar -xO ./usr/share/man/man8/infrarsi-spank.8.gz | zcat >"$work/infrarsi-spank.8"
for page in infrarsi.1 infrarsid.1 infrarsi-spank.8; do
  for section in NAME SYNOPSIS DESCRIPTION 'EXIT STATUS' FILES EXAMPLES 'SEE ALSO'; do
    grep -qE "^\.SH \"?$section\"?\$" "$work/$page" || fail "$page has no $section section"
  done
done
grep -q '^\.SH COMMANDS' "$work/infrarsi.1" || fail "the infrarsi man page has no COMMANDS section"
grep -qE '^\.SH "?PLUGSTACK ARGUMENTS"?$' "$work/infrarsi-spank.8" || fail "infrarsi-spank.8 has no PLUGSTACK ARGUMENTS section"
# Every plugstack argument docs/plugin.md's table lists is in the man page too.
keys=$(sed -n '/^| key | default | meaning |$/,/^$/p' "$src/docs/plugin.md" | sed -nE 's/^\| `([a-z_]+)=.*/\1/p')
[ "$(wc -l <<<"$keys")" -ge 10 ] || fail "the plugstack keys from docs/plugin.md: $keys"
while read -r k; do
  grep -qE "^\.B[IR] $k=" "$work/infrarsi-spank.8" || fail "infrarsi-spank.8 does not describe the plugstack argument $k="
done <<<"$keys"
if command -v man >/dev/null; then
  for page in infrarsi.1 infrarsid.1 infrarsi-spank.8; do
    LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$work/$page" 2>"$work/man-warnings.txt" >/dev/null || true
    [ ! -s "$work/man-warnings.txt" ] || { log=$work/man-warnings.txt; fail "man --warnings complains about $page"; }
  done
fi
# Debian's copyright (machine-readable, DEP-5) and changelog, whose latest entry is this version.
dpkg-deb --fsys-tarfile "$main" | tar -xO ./usr/share/doc/infrarsi/copyright >"$work/copyright"
grep -qx 'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' "$work/copyright" || fail "the copyright file is not DEP-5"
grep -qE '^Files: \*$' "$work/copyright" && grep -qE '^License: ' "$work/copyright" || fail "the copyright file has no Files/License paragraph"
dpkg-deb --fsys-tarfile "$spank" | tar -xO ./usr/share/doc/infrarsi-spank/changelog.Debian.gz | zcat >"$work/changelog"
[ "$(dpkg-parsechangelog -l "$work/changelog" -S Version)" = "$debversion" ] || fail "changelog.Debian's version: $(dpkg-parsechangelog -l "$work/changelog" -S Version 2>&1)"
[ "$(dpkg-parsechangelog -l "$work/changelog" -S Maintainer)" = "$contact" ] || fail "changelog.Debian is not signed by $contact"

# lintian, where installed: no error or warning but the tags docs/install.md explains ("What lintian says").
if command -v lintian >/dev/null; then
  lintian --no-tag-display-limit "$main" "$spank" "$wl" >"$work/lintian.txt" 2>&1 || true
  explained=$(sed -n '/^<!-- lintian-explained -->$/,/^<!-- \/lintian-explained -->$/p' "$src/docs/install.md" |
    sed -nE 's/^\| `([a-z0-9-]+)` \|.*/\1/p')
  unexplained=$(grep -E '^[EW]: ' "$work/lintian.txt" | awk '{print $3}' | sort -u | grep -vxF -f <(echo "${explained:-none}") || true)
  [ -z "$unexplained" ] || { log=$work/lintian.txt; fail "lintian tags not explained in docs/install.md: $unexplained"; }
  echo "ok: lintian: $(grep -cE '^[EW]: ' "$work/lintian.txt" || true) errors and warnings, each of a tag docs/install.md explains"
else
  echo "SKIP: lintian (not installed: apt-get install lintian)"
fi
echo "ok: $(basename "$main"), $(basename "$spank") and $(basename "$wl"): files, conffiles, Depends, policy files, man pages, no test material"

# 2. Installed, as root only.
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: not root, so the packages are not installed (dpkg -i) nor used from /usr"
  passed=1
  exit 0
fi
for p in $packages; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case $status in "" | *not-installed) ;;
  *) fail "$p is already on this machine ($status); this test would replace it: dpkg -P $packages first" ;;
  esac
done
[ ! -e /usr/bin/infrarsi ] || fail "/usr/bin/infrarsi exists, from no package: remove it first"
installed=1
log=$work/dpkg.log
if ! dpkg -i "$main" "$spank" "$wl" >"$log" 2>&1; then
  grep -q "dependency problems" "$log" || fail "dpkg -i failed"
  echo "dpkg -i: dependencies missing (scripts/setup should have installed them); apt-get -f install:"
  grep -E "depends on|Package .* is not installed" "$log" || true
  DEBIAN_FRONTEND=noninteractive apt-get -y -q -f install --no-install-recommends >"$work/apt.log" 2>&1 ||
    { log=$work/apt.log; fail "apt-get -f install failed"; }
fi
for p in $packages; do
  [ "$(dpkg-query -W -f='${Status}' "$p")" = "install ok installed" ] || fail "$p is not installed: $(dpkg-query -W -f='${Status}' "$p")"
done
log=""
dpkg-query -W -f='${Conffiles}\n' infrarsi | grep -q '/etc/default/infrarsid' || fail "dpkg has no conffile /etc/default/infrarsid"
# A reinstall is an upgrade to dpkg (postinst configure OLD): it goes through too.
dpkg -i "$main" >"$work/reinstall.log" 2>&1 || { log=$work/reinstall.log; fail "dpkg -i of infrarsi over itself failed"; }

# The commands, from /usr.
[ "$(/usr/bin/infrarsi --version)" = "infrarsi $version" ] || fail "/usr/bin/infrarsi --version: $(/usr/bin/infrarsi --version 2>&1)"
[ "$(/usr/bin/infrarsid --version)" = "infrarsid $version" ] || fail "/usr/bin/infrarsid --version: $(/usr/bin/infrarsid --version 2>&1)"
for f in /usr/bin/infrarsi /usr/bin/infrarsid /usr/libexec/infrarsi/minigpt "$plugin"; do
  libs=$(ldd "$f" 2>&1) || fail "ldd $f: $libs"
  if grep -q "not found" <<<"$libs"; then fail "$f lacks libraries the packages' Depends should bring: $(grep "not found" <<<"$libs")"; fi
done
pw=$(getent passwd infrarsi) || fail "the postinst made no infrarsi user"
IFS=: read -r _ _ uid _ _ home shell <<<"$pw"
[ "$uid" -lt 1000 ] && [ "$home" = /var/lib/infrarsi ] && [[ $shell == */nologin ]] ||
  fail "infrarsi is not a system user with home /var/lib/infrarsi and no login: $pw"
getent group infrarsi >/dev/null || fail "the postinst made no infrarsi group"
for c in /usr/share/infrarsi/workloads/minigpt/presets/dense-1node.contract.toml \
  /usr/share/infrarsi/workloads/torchgpt/torchgpt.contract.toml; do
  name=$(basename "$c" .contract.toml)
  out=$(cd "$work" && /usr/bin/infrarsi init "$c" --dir "$work/campaign-$name" 2>&1) || fail "infrarsi init $c: $out"
  grep -q "initialized in $work/campaign-$name" <<<"$out" || fail "infrarsi init $c said: $out"
  /usr/bin/infrarsi status --dir "$work/campaign-$name" --json >"$work/status-$name.json" || fail "infrarsi status of $name failed"
  jq -e '.trials.used == 0' "$work/status-$name.json" >/dev/null || fail "status of the new $name campaign: $(head -c 500 "$work/status-$name.json")"
done

# The plugin, in a private slurm.conf (srun --help reads plugstack, starts nothing) whose plugstack.conf includes a
# plugstack.conf.d, as Debian's includes /etc/slurm/plugstack.conf.d: installing put nothing there, so the
# plugin is not loaded; the operator's link to the shipped snippet (docs/install.md, "Enable the plugin") loads it.
[ ! -e /etc/slurm/plugstack.conf.d/infrarsi.conf ] || fail "installing made /etc/slurm/plugstack.conf.d/infrarsi.conf"
if grep -rls 'infrarsi\.so' /etc/slurm 2>/dev/null; then fail "installing named the plugin in /etc/slurm (above)"; fi
mkdir -p "$work/slurm/plugstack.conf.d"
cat >"$work/slurm/slurm.conf" <<EOF
ClusterName=pkgtest
SlurmctldHost=localhost
PlugStackConfig=$work/slurm/plugstack.conf
EOF
echo "include $work/slurm/plugstack.conf.d/*.conf" >"$work/slurm/plugstack.conf"
[ -f "$plugin" ] || fail "no plugin at $plugin"
[ -f "$snippet" ] || fail "no snippet at $snippet"
SLURM_CONF=$work/slurm/slurm.conf srun --help >"$work/srun-help.txt" 2>&1 || { log=$work/srun-help.txt; fail "srun --help failed"; }
if grep -q -- '--infrarsi' "$work/srun-help.txt"; then log=$work/srun-help.txt; fail "the plugin is loaded before the operator enabled it"; fi
ln -s "$snippet" "$work/slurm/plugstack.conf.d/infrarsi.conf"
SLURM_CONF=$work/slurm/slurm.conf srun --help >"$work/srun-help.txt" 2>&1 || { log=$work/srun-help.txt; fail "srun --help with the installed plugin failed"; }
grep -qE -- '--infrarsi(=\[MODE\])? ' "$work/srun-help.txt" || { log=$work/srun-help.txt; fail "srun --help has no --infrarsi once the snippet is linked"; }

# Man pages (unless this machine's dpkg leaves man pages out: path-exclude, as slim container images do; the
# package's own list was checked above) and bash completion.
dpkg_excludes() { # PATH: dpkg is configured not to install PATH
  local pattern
  while read -r pattern; do
    # shellcheck disable=SC2053 # the pattern is a glob
    [[ $1 == $pattern ]] && return 0
  done < <(cat /etc/dpkg/dpkg.cfg /etc/dpkg/dpkg.cfg.d/* 2>/dev/null | sed -nE 's/^path-exclude[= ]+//p')
  return 1
}
if dpkg_excludes /usr/share/man/man1/infrarsi.1.gz; then
  echo "SKIP: the installed man pages (dpkg's path-exclude leaves /usr/share/man out here)"
else
  if command -v man >/dev/null; then
    for p in infrarsi infrarsid; do
      [ "$(man -w "$p")" = "/usr/share/man/man1/$p.1.gz" ] || fail "man -w $p: $(man -w "$p" 2>&1)"
    done
    [ "$(man -w 8 infrarsi-spank)" = /usr/share/man/man8/infrarsi-spank.8.gz ] || fail "man -w 8 infrarsi-spank: $(man -w 8 infrarsi-spank 2>&1)"
  fi
  zcat /usr/share/man/man1/infrarsi.1.gz >"$work/infrarsi.1"
  grep -q '^\.SH COMMANDS' "$work/infrarsi.1" || fail "the infrarsi man page has no COMMANDS section"
  grep -q 'infrarsi bank show' "$work/infrarsi.1" || fail "the infrarsi man page lacks \`infrarsi bank show --help\`"
fi
out=$(bash -c 'source /usr/share/bash-completion/completions/infrarsi && complete -p infrarsi infrarsid' 2>&1) ||
  fail "sourcing the bash completion failed: $out"
grep -q 'complete -F _infrarsi infrarsi$' <<<"$out" && grep -q 'complete -F _infrarsid infrarsid$' <<<"$out" ||
  fail "the bash completion does not complete infrarsi and infrarsid: $out"
out=$(bash -c 'source /usr/share/bash-completion/completions/infrarsi
  COMP_WORDS=(infrarsi run --scheduler ""); COMP_CWORD=3; _infrarsi; echo "${COMPREPLY[*]}"')
[ "$out" = "auto slurm local" ] || fail "completing \`infrarsi run --scheduler \` gave: $out"

# The unit, where systemd can check it (not started: the package only installs it).
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify /lib/systemd/system/infrarsid.service >"$work/verify.txt" 2>&1 ||
    { log=$work/verify.txt; fail "systemd-analyze verify infrarsid.service failed"; }
  if grep -q infrarsid "$work/verify.txt"; then log=$work/verify.txt; fail "systemd-analyze verify complains about infrarsid.service"; fi
fi
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  [ "$(systemctl is-enabled infrarsid.service 2>&1)" = disabled ] || fail "infrarsid.service is $(systemctl is-enabled infrarsid.service 2>&1), not disabled"
fi

# 3. Purged, and gone.
uninstall || fail "dpkg -P $packages failed"
for f in /usr/bin/infrarsi /usr/bin/infrarsid "$plugin" /etc/default/infrarsid "$snippet" /usr/libexec/infrarsi \
  /lib/systemd/system/infrarsid.service /usr/share/infrarsi /usr/share/doc/infrarsi-spank; do
  [ ! -e "$f" ] || fail "$f is left after the purge"
done
[ $user_existed = 1 ] || ! getent passwd infrarsi >/dev/null || fail "the infrarsi user is left"
# The operator's link, now dangling, breaks no job command (Slurm's include skips it).
SLURM_CONF=$work/slurm/slurm.conf srun --help >"$work/srun-help.txt" 2>&1 || { log=$work/srun-help.txt; fail "srun --help with the plugstack link dangling failed"; }
if grep -q -- '--infrarsi' "$work/srun-help.txt"; then fail "srun --help has --infrarsi after the purge"; fi
passed=1
echo "ok: built, checked, installed ($debversion, $arch, the plugin for Slurm $slurm_release), used from /usr (--version, init, not enabled until linked, srun --help --infrarsi, man, completion, unit, upgrade) and purged"
