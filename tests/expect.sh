#!/bin/sh
# expect.sh CODE PATTERN [PATTERN...] -- COMMAND...
# Run COMMAND; pass when it exits with CODE and its combined output
# matches every PATTERN (grep -E). Prints the output on failure.
code=$1; shift
pats=""
while [ "$1" != "--" ]; do pats="$pats
$1"; shift; done
shift
out=$("$@" 2>&1); rc=$?
fail=0
if [ "$rc" != "$code" ]; then echo "expected exit $code, got $rc"; fail=1; fi
echo "$pats" | while IFS= read -r p; do
  [ -z "$p" ] && continue
  if ! printf '%s\n' "$out" | grep -Eq -- "$p"; then echo "missing: $p"; exit 1; fi
done || fail=1
if [ $fail != 0 ]; then printf '%s\n--- output of: %s\n' "$out" "$*"; exit 1; fi
exit 0
