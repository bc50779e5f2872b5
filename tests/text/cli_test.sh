#!/bin/sh
# cli_test.sh - `mgrun tokenize` as a user meets it, on the hand-written
# SentencePiece-style file (tests/text/data/sp): ids per line, --json,
# --no-special, --no-added, --decode, and the errors: usage (exit 2), bad
# input naming its line (exit 1), an unsupported component named.
#
# usage: cli_test.sh MGRUN DATA_DIR
set -u
mgrun=$1 data=$2
fails=0
# check NAME WANT_RC WANT_STDOUT STDERR_PATTERN INPUT -- ARGS...
check() {
	name=$1 want_rc=$2 want_out=$3 want_err=$4 input=$5
	shift 6
	out=$(printf '%b' "$input" | "$mgrun" tokenize "$@" 2>/tmp/cli_test.$$)
	rc=$?
	err=$(cat /tmp/cli_test.$$)
	rm -f /tmp/cli_test.$$
	if [ "$rc" != "$want_rc" ] || [ "$out" != "$want_out" ] ||
		! printf '%s\n' "$err" | grep -Eq -- "$want_err"; then
		echo "FAIL $name: exit $rc (want $want_rc)"
		echo "  stdout: [$out] want [$want_out]"
		echo "  stderr: [$err] want /$want_err/"
		fails=$((fails + 1))
	else
		echo "ok $name"
	fi
}
sp=$data/sp
check lines 0 "1 10 10
1 8 1 5 7
1" "" 'ab ab\na<s>b\n\n' -- --tokenizer "$sp"
check no_special 0 "10 10" "" 'ab ab\n' -- --tokenizer "$sp" --no-special
check json 0 "1 10 5 8" "" '"ab\\u0020 a"\n' -- --tokenizer "$sp" --json
# the newline has no token and no byte token: unk (0)
check json_newline 0 "8 0 5 7" "" '"a\\n b"\n' -- --tokenizer "$sp/tokenizer.json" \
	--json --no-special
check no_added 0 "5 7" "" 'b\n' -- --tokenizer "$sp" --no-added --no-special
check decode 0 '"<s> aé"
"a"
""' "" '1 8 3 4\n8\n\n' -- --tokenizer "$sp" --decode
check decode_skip 0 '"aé"' "" '1 8 3 4\n' -- --tokenizer "$sp" --decode \
	--skip-special
check no_tokenizer 2 "" "--tokenizer PATH is required" "" --
check bad_option 2 "" "unrecognized option" "" -- --tokenizer "$sp" --frobnicate
check json_decode 2 "" "--json is for encoding" "" -- --tokenizer "$sp" --json \
	--decode
check bad_utf8 1 "1 8" "line 2: .*invalid UTF-8 at byte offset 1" \
	'a\nb\377\n' -- --tokenizer "$sp"
check bad_json 1 "" "line 1: not a JSON string" 'ab\n' -- --tokenizer "$sp" --json
check lone_surrogate 1 "" "line 1: lone high surrogate" '"\\ud800"\n' -- \
	--tokenizer "$sp" --json
check bad_id 1 '"a"' "line 2: .*id 99 \\(position 0\\) is not in the vocabulary" \
	'8\n99\n' -- --tokenizer "$sp" --decode
check not_an_id 1 "" "line 1: 'x' is not an id" 'x\n' -- --tokenizer "$sp" --decode
check unknown_component 1 "" "unknown.json: pre_tokenizer: unsupported type 'Digits'" \
	"" -- --tokenizer "$data/unknown.json"
check missing 1 "" "data/nowhere: cannot open" "" -- \
	--tokenizer "$data/nowhere"
# A run of 12 million spaces through Llama 3's whitespace alternatives:
# PCRE2's default match limit refused it (its \s*[\r\n]+ backtracks over
# the run), HF tokenizes it; here the spaces are removed, "a" and "b" left.
out=$(python3 -c "print('a' + ' ' * 12000000 + 'b')" |
	"$mgrun" tokenize --tokenizer "$data/ws_removed.json" 2>&1)
if [ "$out" = "0 1" ]; then echo "ok whitespace_run"; else
	echo "FAIL whitespace_run: [$(printf '%s' "$out" | cut -c1-200)]"
	fails=$((fails + 1))
fi
# A pattern whose every match scans to the end of the piece (quadratic in
# total, each call within its limit) stops at the piece's time budget,
# naming the file and the pattern, instead of running for hours.
out=$(python3 -c "print('a' * 1000000)" | timeout 120 "$mgrun" tokenize \
	--tokenizer "$data/quadratic.json" 2>&1)
rc=$?
if [ $rc = 1 ] && printf '%s' "$out" | grep -qF \
	"line 1: tokenizer $data/quadratic.json: pre-tokenizer regex /a(?=[^b]*\$)/ on a piece of 1000000 bytes (at byte " &&
	printf '%s' "$out" | grep -qF "): more than its time budget"; then
	echo "ok quadratic_regex"
else
	echo "FAIL quadratic_regex: exit $rc: [$(printf '%s' "$out" | cut -c1-300)]"
	fails=$((fails + 1))
fi
[ $fails = 0 ] || { echo "$fails failures"; exit 1; }
