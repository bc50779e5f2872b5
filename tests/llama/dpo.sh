#!/bin/sh
# dpo.sh MGRUN INI WORK - DPO end to end (conf/dpo.ini: a tiny llama with
# LoRA on conf/data/fortune_pairs.jsonl, fortunes against their words
# shuffled): the first step is at the reference (loss ln 2, reward
# accuracy 0: ties), training must raise the held-out
# rewards/accuracies well above chance with a positive margin, and
# TRL's metric names must reach the progress line and report.json;
# --eval-only (pairs from the token cache) reproduces the held-out loss.
# Skipped (77) without the Llama 2 tokenizer (scripts/fetch-tokenizers.sh).
set -eu
mgrun=$1 ini=$2 work=$3
tok=$(dirname "$ini")/../.deps/tokenizers/llama2
if [ ! -e "$tok/tokenizer.json" ]; then
	echo "SKIPPED: no $tok/tokenizer.json (scripts/fetch-tokenizers.sh)"
	exit 77
fi
rm -rf "$work"
mkdir -p "$work"
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=dpo \
	--set run.threads=2 --set run.epochs=1 --set run.max_steps=24 \
	--set run.log_every=4 >"$work/train.log" 2>&1 || {
	cat "$work/train.log"
	echo "FAIL: training did not finish"
	exit 1
}
cat "$work/train.log"
line=$(grep '^epoch 1: ' "$work/train.log")
val() { # the test split's value of metric $1
	echo "$line" | sed "s/.*, test loss//; s|.* $1 \([-0-9.]*\).*|\1|"
}
acc=$(val rewards/accuracies) margin=$(val rewards/margins)
echo "held-out rewards/accuracies $acc, rewards/margins $margin"
awk -v a="$acc" -v m="$margin" 'BEGIN { exit !(a >= 0.75 && m > 0) }' || {
	echo "FAIL: DPO did not learn the preferences"
	exit 1
}
# --eval-only from the checkpoint, the pairs from the token cache: the
# same held-out loss.
loss=$(echo "$line" | sed 's/.*, test loss \([0-9.]*\).*/\1/')
"$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=dpo \
	--set run.threads=2 --eval-only >"$work/eval.log" 2>&1 || {
	cat "$work/eval.log"
	echo "FAIL: --eval-only"
	exit 1
}
grep -q "tokens from cache .*p.bin .*pairs" "$work/eval.log" &&
	grep -q "test loss $loss " "$work/eval.log" || {
	cat "$work/eval.log"
	echo "FAIL: --eval-only (pairs from the cache) does not give test loss $loss"
	exit 1
}
# Step 0 is the reference itself: loss ln 2, no pair counted correct.
awk -F, 'NR == 2 { exit !($3 > 0.693147 && $3 < 0.693148 && $4 == 0) }' \
	"$work/dpo/steps.csv" || {
	head -3 "$work/dpo/steps.csv"
	echo "FAIL: the first step is not at the reference (ln 2, accuracy 0)"
	exit 1
}
for m in loss rewards/chosen rewards/rejected rewards/accuracies \
	rewards/margins logps/chosen logps/rejected; do
	grep -q "^epoch 1/1 step .* $m " "$work/train.log" || {
		echo "FAIL: $m not in the progress line"
		exit 1
	}
	grep -q "\"$m\":" "$work/dpo/report.json" || {
		echo "FAIL: $m not in report.json"
		exit 1
	}
done
# Refusals, each naming what to change: SFT data under objective = dpo, and a hostile preference file (file:line, sample,
# field).
refused() { # refused NAME PATTERN --set ...
	name=$1 pat=$2
	shift 2
	if "$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name="$name" \
		--set run.max_steps=1 --set dataset.cache=false "$@" \
		>"$work/$name.log" 2>&1; then
		echo "FAIL: $name was not refused"
		exit 1
	fi
	grep -q "$pat" "$work/$name.log" || {
		cat "$work/$name.log"
		echo "FAIL: $name: no '$pat' in the error"
		exit 1
	}
}
# Full fine-tuning: the reference is a frozen copy of the start, so the
# first step is log 2 with zero rewards, and the copy is in no checkpoint.
if ! "$mgrun" -c "$ini" --set run.out_dir="$work" --set run.name=full_ft \
	--set run.max_steps=3 --set run.log_every=1 --set model.lora_rank=0 \
	>"$work/full_ft.log" 2>&1; then
	cat "$work/full_ft.log"
	echo "FAIL: full fine-tuning under dpo did not run"
	exit 1
fi
grep -q "step 1/.* loss 0.6931 rewards/chosen 0.0000 rewards/rejected 0.0000" \
	"$work/full_ft.log" || {
	cat "$work/full_ft.log"
	echo "FAIL: full fine-tuning's first DPO step is not log 2 with zero rewards"
	exit 1
}
grep -q "step 3/.* rewards/margins 0.0000" "$work/full_ft.log" && {
	echo "FAIL: full fine-tuning's rewards did not move"
	exit 1
}
head -c 65536 "$work/full_ft/checkpoint.safetensors" | grep -q 'ref\.' && {
	echo "FAIL: the frozen reference copy was checkpointed"
	exit 1
}
refused sft_data "is not a preference pair.*format = preference" \
	--set dataset.train="$(dirname "$ini")/data/alpaca_sample.json" \
	--set dataset.format=auto
printf '%s\n%s\n' \
	'{"prompt": "p", "chosen": "a", "rejected": "b"}' \
	'{"prompt": "p", "chosen": "a", "rejected": 3}' >"$work/bad.jsonl"
refused bad_file "bad.jsonl:2: sample 1: \"chosen\" is a string and \"rejected\" a number" \
	--set dataset.train="$work/bad.jsonl"
echo "PASS: dpo"
