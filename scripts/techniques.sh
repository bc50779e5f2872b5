#!/bin/sh
# techniques.sh MGRUN [ARG...] - seed 001's fine-tuning techniques
# compared (conf/sweep_techniques.ini), then the quantized models:
#  1. the sweep (LoRA, QLoRA, DPO, QAT) with ARG... passed on (--set,
#     --repeats, --sweep);
#  2. the qat point and the lora point (post-training quantization: the
#     same export of a run trained without qat) exported as 8da4w int4
#     folders (mgrun export --dtype int4), each evaluated on the held-out
#     split with model.quant = int4 (int4 weights, int8 activations);
#  3. quant.md / quant.csv in the sweep directory: per technique the
#     float held-out loss (the sweep's) and the int4 model's.
# Every number comes from these runs; nothing is written when a step
# fails (exit 1). The run's effective configuration (report.json
# "config") drives export and evaluation, so --set arguments carry over.
set -eu
mgrun=$1
shift
here=$(cd "$(dirname "$0")/.." && pwd)
ini=$here/conf/sweep_techniques.ini
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$mgrun" -c "$ini" "$@" 2>&1 | tee "$log"
rc=$(grep -c '^mgrun: sweep: .* failed' "$log" || true)
dir=$(sed -n 's/^== sweep results (\(.*\))$/\1/p' "$log" | tail -1)
if [ -z "$dir" ] || [ ! -f "$dir/sweep.json" ]; then
	echo "techniques.sh: the sweep wrote no results" >&2
	exit 1
fi
[ "$rc" = 0 ] || echo "techniques.sh: a point failed; going on with the others" >&2

# The --set arguments of "$@" (export and evaluation take no --sweep),
# and each point's own values as --print-config lists them.
sets=
while [ $# -gt 0 ]; do
	case $1 in
	--set) sets="$sets --set $2"; shift 2 ;;
	--set=*) sets="$sets --set ${1#--set=}"; shift ;;
	--repeats | --sweep) shift 2 ;;
	*) shift ;;
	esac
done
# shellcheck disable=SC2086
points=$("$mgrun" -c "$ini" $sets --print-config | sed -n 's/^;   \(p[0-9]*-[^ ]*\) */\1 /p')
# A number of a flat JSON object's key in a file: "loss": 5.4
json_num() {
	tr ',{}' '\n\n\n' <"$2" | sed -n "s/^[[:space:]]*\"$1\":[[:space:]]*\([-0-9.eE+]*\)[[:space:]]*$/\1/p" | head -1
}

out=$dir/quant
rm -rf "$out"
mkdir -p "$out"
printf 'technique,scheme,float_test_loss,int4_test_loss,int4_minus_float\n' >"$out.csv.tmp"
for tech in qat lora; do
	pt=$(ls -d "$dir"/points/p*-"$tech"-r1 2>/dev/null | head -1)
	if [ -z "$pt" ] || ! grep -q '"status":[[:space:]]*"finished"' "$pt/report.json" 2>/dev/null; then
		echo "techniques.sh: no finished $tech point in $dir/points" >&2
		exit 1
	fi
	id=$(basename "$pt")
	own=""
	for v in $(echo "$points" | awk -v id="${id%-r1}" '$1 == id { $1 = ""; print }'); do
		own="$own --set $v"
	done
	# shellcheck disable=SC2086
	"$mgrun" export -c "$ini" $sets $own --set run.out_dir="$dir/points" \
		--set run.name="$id" --out "$out/$id-int4" --dtype int4 ||
		{ echo "techniques.sh: export of $id failed" >&2; exit 1; }
	# shellcheck disable=SC2086
	"$mgrun" -c "$ini" --no-sweep $sets $own --eval-only --set model.qat=none \
		--set model.quant=int4 --set model.lora_rank=0 \
		--set model.hf_dir="$out/$id-int4" --set run.out_dir="$out" \
		--set run.name="$id-int4-eval" ||
		{ echo "techniques.sh: int4 evaluation of $id failed" >&2; exit 1; }
	q=$(json_num loss "$out/$id-int4-eval/eval.json")
	f=$(tr ',{}' '\n\n\n' <"$pt/report.json" | sed -n 's/^[[:space:]]*"test_loss":[[:space:]]*\([-0-9.eE+]*\)[[:space:]]*$/\1/p' | tail -1)
	if [ -z "$q" ] || [ -z "$f" ]; then
		echo "techniques.sh: no held-out loss for $id (float '$f', int4 '$q')" >&2
		exit 1
	fi
	scheme=$([ "$tech" = qat ] && echo "QAT (8da4w)" || echo "PTQ (8da4w)")
	awk -v t="$tech" -v s="$scheme" -v f="$f" -v q="$q" \
		'BEGIN { printf "%s,%s,%.9g,%.9g,%.9g\n", t, s, f, q, q - f }' >>"$out.csv.tmp"
done
mv "$out.csv.tmp" "$dir/quant.csv"
{
	echo "# Quantized model: QAT against post-training quantization"
	echo
	echo "int4 weights (groups of 32) and int8 per-token activations (8da4w),"
	echo "exported with \`mgrun export --dtype int4\` and evaluated on the"
	echo "held-out split with \`model.quant = int4\`; float: the sweep's test loss."
	echo
	echo "| technique | scheme | float test loss | int4 test loss | int4 - float |"
	echo "| --- | --- | ---: | ---: | ---: |"
	awk -F, 'NR > 1 { printf "| %s | %s | %.4f | %.4f | %+.4f |\n", $1, $2, $3, $4, $5 }' "$dir/quant.csv"
} >"$dir/quant.md"
echo
cat "$dir/quant.md"
echo
echo "techniques.sh: $dir/table.md, $dir/quant.md"
[ "$rc" = 0 ]
