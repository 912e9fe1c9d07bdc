#!/usr/bin/env bash
# The Debian packages (cmake/packaging.cmake, docs/install.md): `cpack -G DEB` of the build makes infrarsi and
# infrarsi-spank with the expected files, conffiles and Depends; as root they are installed with dpkg and used
# from the installed paths only: `infrarsi --version`, `infrarsi init` of the installed minigpt preset and
# torchgpt contract, the plugin's `--infrarsi` in `srun --help` through the installed plugstack snippet, the man
# pages, bash completion and the systemd unit. Then both are purged and the infrarsi user they made is removed,
# leaving the machine as it was. No cluster: srun --help only reads a private slurm.conf and plugstack.conf.
set -euo pipefail
export INFRARSI_BANK=off
. "$(dirname "$0")/lib.sh" packages --own-cluster # no cluster: SLURM_CONF is this test's own
passed=0
installed=0
user_existed=0
getent passwd infrarsi >/dev/null && user_existed=1
uninstall() {
  dpkg -P infrarsi-spank infrarsi >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; return 1; }
  if [ $user_existed = 0 ]; then
    if getent passwd infrarsi >/dev/null; then userdel infrarsi; fi
    if getent group infrarsi >/dev/null; then groupdel infrarsi; fi
  fi
  installed=0
}
cleanup() {
  if [ $installed = 1 ]; then
    echo "cleanup: purging the packages this test installed" >&2
    uninstall || echo "cleanup: dpkg -P infrarsi-spank infrarsi failed; remove them by hand" >&2
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
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)
plugin=/usr/lib/$multiarch/slurm-wlm/infrarsi.so

# 1. The packages, from the build as it is (cpack installs each component under /usr into its own staging).
log=$work/cpack.log
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/pkg" >"$log" 2>&1 || fail "cpack -G DEB failed"
main=$work/pkg/infrarsi_${version}_$arch.deb
spank=$work/pkg/infrarsi-spank_${version}_$arch.deb
[ -f "$main" ] || fail "cpack made no $(basename "$main"): $(ls "$work/pkg")"
[ -f "$spank" ] || fail "cpack made no $(basename "$spank"): $(ls "$work/pkg")"
log=""

field() { dpkg-deb -f "$1" "$2"; }
[ "$(field "$main" Package)" = infrarsi ] || fail "infrarsi's Package: $(field "$main" Package)"
[ "$(field "$spank" Package)" = infrarsi-spank ] || fail "infrarsi-spank's Package: $(field "$spank" Package)"
for deb in "$main" "$spank"; do
  [ "$(field "$deb" Version)" = "$version" ] || fail "$(basename "$deb"): Version $(field "$deb" Version), not $version"
  [ -n "$(field "$deb" Maintainer)" ] || fail "$(basename "$deb") has no Maintainer"
  [ -n "$(field "$deb" Description)" ] || fail "$(basename "$deb") has no Description"
done
main_depends=$(field "$main" Depends)
spank_depends=$(field "$spank" Depends)
echo "infrarsi Depends: $main_depends"
echo "infrarsi-spank Depends: $spank_depends"
# Declared, and computed by dpkg-shlibdeps from the binaries (hwloc, sqlite, MPI for minigpt).
for d in adduser patch 'libhwloc[0-9]+ ' 'libsqlite3-0 ' 'libssl3 ' 'libopenmpi[0-9]+ ' 'libstdc\+\+6 '; do
  grep -qE "(^|, )$d" <<<"$main_depends" || fail "infrarsi's Depends lacks $d: $main_depends"
done
for d in "infrarsi \\(= $version\\)" slurm-wlm-basic-plugins 'libhwloc[0-9]+ '; do
  grep -qE "(^|, )$d" <<<"$spank_depends" || fail "infrarsi-spank's Depends lacks $d: $spank_depends"
done

# Their files (dpkg-deb -c lists ./path).
dpkg-deb -c "$main" | awk '{print $6}' >"$work/main.files"
dpkg-deb -c "$spank" | awk '{print $6}' >"$work/spank.files"
for f in usr/bin/infrarsi usr/bin/infrarsid usr/libexec/infrarsi/minigpt usr/share/infrarsi/sbatch/trial.sbatch \
  usr/share/infrarsi/sbatch/minigpt.sbatch usr/share/infrarsi/workloads/minigpt/CMakeLists.txt \
  usr/share/infrarsi/workloads/minigpt/presets/dense-1node.contract.toml \
  usr/share/infrarsi/workloads/torchgpt/torchgpt.contract.toml usr/share/doc/infrarsi/README.md \
  usr/share/doc/infrarsi/install.md usr/share/man/man1/infrarsi.1.gz usr/share/man/man1/infrarsid.1.gz \
  usr/share/bash-completion/completions/infrarsi usr/share/bash-completion/completions/infrarsid \
  lib/systemd/system/infrarsid.service etc/default/infrarsid; do
  grep -qxF "./$f" "$work/main.files" || fail "infrarsi's package lacks /$f"
done
for f in "${plugin#/}" etc/slurm/plugstack.conf.d/infrarsi.conf; do
  grep -qxF "./$f" "$work/spank.files" || fail "infrarsi-spank's package lacks /$f"
done
if grep -q 'infrarsi\.so$' "$work/main.files"; then fail "the plugin is in the infrarsi package"; fi
if grep -q '^\./usr/bin/' "$work/spank.files"; then fail "infrarsi-spank has commands: $(grep '^\./usr/bin/' "$work/spank.files")"; fi
if grep -qE '/build[^/]*/|^\./usr/etc/|^\./usr/local/' "$work/main.files" "$work/spank.files"; then
  fail "a build tree, /usr/etc or /usr/local in a package: $(grep -hE '/build[^/]*/|^\./usr/etc/|^\./usr/local/' "$work/main.files" "$work/spank.files" | head -3)"
fi

# Control files: conffiles for /etc, the infrarsi user made by infrarsi's postinst.
dpkg-deb -e "$main" "$work/main.control"
dpkg-deb -e "$spank" "$work/spank.control"
[ "$(cat "$work/main.control/conffiles")" = /etc/default/infrarsid ] || fail "infrarsi's conffiles: $(cat "$work/main.control/conffiles" 2>&1)"
[ "$(cat "$work/spank.control/conffiles")" = /etc/slurm/plugstack.conf.d/infrarsi.conf ] ||
  fail "infrarsi-spank's conffiles: $(cat "$work/spank.control/conffiles" 2>&1)"
grep -q 'adduser --system --group' "$work/main.control/postinst" || fail "infrarsi's postinst does not make the infrarsi user"
postinst=$(grep -v '^ *#' "$work/main.control/postinst")
if grep -qE 'systemctl (enable|start)|deb-systemd-invoke' <<<"$postinst"; then
  fail "the postinst enables or starts infrarsid"
fi
# The snippet names the installed plugin; the unit runs the installed daemon as root, bounded to the capabilities that
# dropping to users needs, with its config file.
dpkg-deb --fsys-tarfile "$spank" | tar -xO ./etc/slurm/plugstack.conf.d/infrarsi.conf >"$work/snippet.conf"
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
echo "ok: $(basename "$main") and $(basename "$spank"): files, conffiles, Depends"

# 2. Installed, as root only.
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: not root, so the packages are not installed (dpkg -i) nor used from /usr"
  passed=1
  exit 0
fi
for p in infrarsi infrarsi-spank; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  case $status in "" | *not-installed) ;;
  *) fail "$p is already on this machine ($status); this test would replace it: dpkg -P infrarsi-spank infrarsi first" ;;
  esac
done
[ ! -e /usr/bin/infrarsi ] || fail "/usr/bin/infrarsi exists, from no package: remove it first"
installed=1
log=$work/dpkg.log
if ! dpkg -i "$main" "$spank" >"$log" 2>&1; then
  grep -q "dependency problems" "$log" || fail "dpkg -i failed"
  echo "dpkg -i: dependencies missing (scripts/setup should have installed them); apt-get -f install:"
  grep -E "depends on|Package .* is not installed" "$log" || true
  DEBIAN_FRONTEND=noninteractive apt-get -y -q -f install --no-install-recommends >"$work/apt.log" 2>&1 ||
    { log=$work/apt.log; fail "apt-get -f install failed"; }
fi
for p in infrarsi infrarsi-spank; do
  [ "$(dpkg-query -W -f='${Status}' "$p")" = "install ok installed" ] || fail "$p is not installed: $(dpkg-query -W -f='${Status}' "$p")"
done
log=""
dpkg-query -W -f='${Conffiles}\n' infrarsi | grep -q '/etc/default/infrarsid' || fail "dpkg has no conffile /etc/default/infrarsid"
dpkg-query -W -f='${Conffiles}\n' infrarsi-spank | grep -q '/etc/slurm/plugstack.conf.d/infrarsi.conf' ||
  fail "dpkg has no conffile /etc/slurm/plugstack.conf.d/infrarsi.conf"

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

# The plugin, through the installed snippet, in a private slurm.conf (srun --help reads plugstack, starts nothing).
mkdir "$work/slurm"
cat >"$work/slurm/slurm.conf" <<EOF
ClusterName=pkgtest
SlurmctldHost=localhost
PlugStackConfig=$work/slurm/plugstack.conf
EOF
echo "include /etc/slurm/plugstack.conf.d/*.conf" >"$work/slurm/plugstack.conf"
[ -f "$plugin" ] || fail "no plugin at $plugin"
SLURM_CONF=$work/slurm/slurm.conf srun --help >"$work/srun-help.txt" 2>&1 || { log=$work/srun-help.txt; fail "srun --help with the installed plugin failed"; }
grep -qE -- '--infrarsi(=\[MODE\])? ' "$work/srun-help.txt" || { log=$work/srun-help.txt; fail "srun --help has no --infrarsi"; }

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
uninstall || fail "dpkg -P infrarsi-spank infrarsi failed"
for f in /usr/bin/infrarsi /usr/bin/infrarsid "$plugin" /etc/default/infrarsid /etc/slurm/plugstack.conf.d/infrarsi.conf \
  /lib/systemd/system/infrarsid.service /usr/share/infrarsi; do
  [ ! -e "$f" ] || fail "$f is left after the purge"
done
[ $user_existed = 1 ] || ! getent passwd infrarsi >/dev/null || fail "the infrarsi user is left"
passed=1
echo "ok: built, checked, installed ($version, $arch), used from /usr (--version, init, srun --help --infrarsi, man, completion, unit) and purged"
