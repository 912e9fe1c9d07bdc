#!/usr/bin/env bash
# Every doctest binary given: no test case name may hold a semicolon. doctest_discover_tests hands the names
# to CMake as a list, which splits one at ';': the halves become ctest tests whose filter matches no test case,
# and doctest passes a run of nothing. Such a test never ran under ctest (48 did not until this check).
set -euo pipefail
status=0
for bin in "$@"; do
  if names=$("$bin" --list-test-cases --no-version | grep -F ';'); then
    echo "test-names: $bin: test case names with ';' (ctest would never run them; use ',' instead):" >&2
    echo "$names" >&2
    status=1
  fi
done
exit $status
