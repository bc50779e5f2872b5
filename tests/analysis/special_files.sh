#!/bin/sh
# special_files.sh MGRUN INI WORK - mgrun compare on run directories
# whose artefacts are not files mgrun wrote: a FIFO (would block in
# open()), /dev/zero (would never end), a directory, a sparse file past
# the size cap, a CSV header with too many columns. Each is refused at
# once (exit 2) naming the file; nothing hangs or eats memory.
set -u
mgrun=$1 ini=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=good \
	--set run.max_steps=4 >"$work/good.txt" 2>&1 ||
	{ cat "$work/good.txt"; fail "the reference run"; }
# case NAME FILE PATTERN SETUP...: a copy of the good run with FILE
# replaced by what SETUP makes (run in the copy), compared against the
# good run: exit 2 within 20 s (and 2 GiB of memory), saying PATTERN.
# The memory cap, where the binary runs under one: AddressSanitizer's
# shadow memory cannot be mapped below ulimit -v, so a sanitizer build
# runs with the time limit only.
cap=2097152
(ulimit -v $cap; "$mgrun" --version) >/dev/null 2>&1 || cap=unlimited
case_() {
	name=$1 file=$2 pat=$3
	shift 3
	d="$work/$name"
	cp -r "$work/good" "$d" && rm -f "$d/$file" || fail "copy for $name"
	(cd "$d" && eval "$*") || fail "setup of $name"
	out=$( (ulimit -v $cap; timeout 20 "$mgrun" compare "$work/good" \
		"$d") 2>&1)
	rc=$?
	[ $rc -eq 2 ] || { echo "$out"; fail "$name: exit $rc, expected 2"; }
	echo "$out" | grep -Eq -- "$pat" ||
		{ echo "$out"; fail "$name: missing: $pat"; }
	echo "ok: $name"
}
reg="not a regular file"
case_ report_fifo report.json "report.json: $reg" mkfifo report.json
case_ report_zero report.json "report.json: $reg" ln -s /dev/zero report.json
case_ report_dir report.json "report.json: .*directory" mkdir report.json
case_ report_huge report.json "report.json: [0-9]+ bytes, more than" \
	truncate -s 100M report.json
case_ steps_fifo steps.csv "steps.csv: $reg" mkfifo steps.csv
case_ steps_zero steps.csv "steps.csv: $reg" ln -s /dev/zero steps.csv
case_ steps_huge steps.csv "steps.csv: [0-9]+ bytes, more than" \
	truncate -s 2G steps.csv
case_ memory_fifo memory.csv "memory.csv: $reg" mkfifo memory.csv
case_ copies_fifo profile_memcpy.csv "profile_memcpy.csv: $reg" \
	mkfifo profile_memcpy.csv
case_ steps_wide steps.csv "steps.csv:1: more than 4096 columns" \
	"seq 5000 | tr '\n' , >steps.csv; echo >>steps.csv"
echo "special run artefacts refused"
