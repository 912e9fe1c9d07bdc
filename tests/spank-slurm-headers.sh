#!/usr/bin/env bash
# The SPANK plugin compiles against another Slurm release's public headers (scripts/build-slurm --headers: the
# upstream tarball's slurm/*.h, seconds, no Slurm build), with the build's own compile commands for the plugin's
# sources and those headers first on the include path. CI's check that the plugin still builds for 24.11, where
# building and running a whole 24.11 cluster does not fit (scripts/test-slurm does that).
#   tests/spank-slurm-headers.sh VERSION BUILD_DIR SOURCE_DIR
set -euo pipefail
version=$1 build=$2 source=$3
headers=$build/slurm-headers-$version
"$source/scripts/build-slurm" --headers "$version" "$headers" >/dev/null
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json" >&2; exit 1; }
n=0
while IFS=$'\t' read -r dir cmd; do
  eval "args=($cmd)"
  out=()
  skip=0
  for a in "${args[@]}"; do
    if [ $skip -eq 1 ]; then skip=0; continue; fi
    case "$a" in
      ccache) continue ;;
      -o) skip=1; continue ;;
    esac
    out+=("$a")
    # Slurm's headers right after the compiler: before any -I and the system's /usr/include/slurm.
    [ ${#out[@]} -eq 1 ] && out+=("-I$headers/include")
  done
  (cd "$dir" && "${out[@]}" -fsyntax-only) || { echo "the plugin does not compile against Slurm $version: ${args[*]}" >&2; exit 1; }
  n=$((n + 1))
done < <(jq -r --arg src "$source/spank/" \
  '.[] | select(.file | startswith($src)) | select(.file | test("/(plugin|options|submit|stepd)\\.cpp$"))
   | [.directory, .command] | @tsv' "$build/compile_commands.json")
[ $n -eq 4 ] || { echo "expected the plugin's 4 sources in compile_commands.json, found $n" >&2; exit 1; }
echo "the plugin's $n sources compile against Slurm $version ($(grep -m1 'define SLURM_VERSION_NUMBER' "$headers/include/slurm/slurm_version.h"))"
