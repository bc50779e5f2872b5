# fail.sh - sourced by the shell tests that go on after a failed check:
# `fail MESSAGE` says it and counts it in $fails; the script ends with
# `[ $fails -eq 0 ] || exit 1` (or its own summary).
fails=0
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}
