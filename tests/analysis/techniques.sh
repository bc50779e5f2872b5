#!/bin/sh
# techniques.sh MGRUN DIR WORK - scripts/techniques.sh at CI size: the
# four techniques of conf/sweep_techniques.ini (LoRA, QLoRA, DPO, QAT)
# on the tiny llama for 12 steps each, then the QAT and PTQ int4
# evaluations. Every technique must have produced its numbers (step
# time, tokens/s, peak memory and its categories, h2d bytes) and its
# quality metric (held-out loss; DPO: rewards/accuracies), the charts
# must exist and be well-formed, and quant.csv must hold both int4 rows.
set -eu
mgrun=$1 here=$2 work=$3
fail() {
	echo "FAIL: $*"
	exit 1
}
rm -rf "$work"
mkdir -p "$work"
sh "$here/../../scripts/techniques.sh" "$mgrun" --set run.out_dir="$work" \
	--set run.max_steps=12 --set run.threads=2 \
	--set dataset.train_samples=512 --set dataset.test_samples=64 \
	>"$work/log" 2>&1 || {
	tail -40 "$work/log"
	fail "scripts/techniques.sh exit status"
}
dir=$work/sweep_techniques
csv=$dir/table.csv
[ -f "$csv" ] || fail "no table.csv"
# column of a header name in table.csv
col() { head -1 "$csv" | tr ',' '\n' | grep -nx "$1" | cut -d: -f1; }
cell() { # technique column-name
	awk -F, -v t="$1" -v c="$(col "$2")" '$1 == t { print $c }' "$csv"
}
isnum() { echo "$1" | grep -Eq '^-?[0-9.]+(e[-+]?[0-9]+)?$'; }
[ "$(awk 'END { print NR }' "$csv")" = 5 ] || fail "table.csv: not 4 points"
for t in lora qlora dpo qat; do
	[ "$(cell $t status)" = ok ] || fail "$t: status '$(cell $t status)'"
	for c in step_median_s tokens_per_s samples_per_s \
		peak_device_memory_bytes peak_activations_bytes \
		peak_params_bytes h2d_bytes d2h_bytes; do
		v=$(cell $t $c)
		isnum "$v" || fail "$t: $c is '$v'"
	done
	awk -v v="$(cell $t tokens_per_s)" 'BEGIN { exit !(v > 0) }' ||
		fail "$t: tokens/s not positive"
	awk -v v="$(cell $t h2d_bytes)" 'BEGIN { exit !(v > 0) }' ||
		fail "$t: no host-to-device bytes"
done
for t in lora qlora qat; do
	v=$(cell $t test_loss)
	isnum "$v" || fail "$t: held-out loss '$v'"
	awk -v v="$v" 'BEGIN { exit !(v > 0 && v < 10) }' || fail "$t: loss $v"
	[ -z "$(cell $t test_rewards/accuracies)" ] ||
		fail "$t: has a DPO metric"
done
v=$(cell dpo test_rewards/accuracies)
isnum "$v" || fail "dpo: rewards/accuracies '$v'"
awk -v v="$v" 'BEGIN { exit !(v >= 0 && v <= 1) }' || fail "dpo: accuracy $v"
# QLoRA's frozen base is NF4: less parameter memory than LoRA's fp32 one
awk -v a="$(cell qlora peak_params_bytes)" -v b="$(cell lora peak_params_bytes)" \
	'BEGIN { exit !(a < b) }' || fail "qlora params not below lora's"
grep -q '| qat ' "$dir/table.md" || fail "table.md"
for f in step tokens_per_s memory_peak transfers test_loss \
	test_rewards_accuracies phases; do
	[ -s "$dir/$f.svg" ] || fail "no $f.svg"
	grep -q '</svg>' "$dir/$f.svg" || fail "$f.svg not closed"
	if command -v xmllint >/dev/null 2>&1; then
		xmllint --noout "$dir/$f.svg" || fail "$f.svg not well-formed"
	fi
done
grep -q '"sets"' "$dir/sweep.json" || fail "sweep.json: no group sets"
# QAT vs PTQ
q=$dir/quant.csv
[ -f "$q" ] && [ -f "$dir/quant.md" ] || fail "no quant.csv / quant.md"
for t in qat lora; do
	row=$(awk -F, -v t=$t '$1 == t' "$q")
	[ -n "$row" ] || fail "quant.csv: no $t row"
	f=$(echo "$row" | cut -d, -f3) i=$(echo "$row" | cut -d, -f4)
	isnum "$f" && isnum "$i" || fail "quant.csv $t: '$row'"
	[ "$f" = "$(cell $t test_loss)" ] ||
		awk -v a="$f" -v b="$(cell $t test_loss)" \
			'BEGIN { d = a - b; exit !(d < 1e-6 && d > -1e-6) }' ||
		fail "quant.csv $t float loss $f is not the sweep's"
done
echo "ok: 4 techniques with their metrics, charts, QAT and PTQ int4 losses"
