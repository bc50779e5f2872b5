#!/bin/sh
# crash_points.sh MGRUN CKPT_DIFF REPO WORK - issue 35 items 2 and 3.
# A run folder is always completable: for EVERY write point of a run's
# end (MG_TEST_CRASH_AT=list names them; core/engine/crash_point.c) a
# LoRA run on text data exits there as a kill would, then --resume must
# exit 0 with report.json "finished" holding the final evaluation, a
# complete adapter/ and the checkpoint of an uninterrupted run. Then the
# report covers the whole run: a run.stop_after stop reports "stopped"
# (not "finished"), and after --resume report.json lists every epoch
# with the uninterrupted run's train and test losses.
set -u
mgrun=$1 ckpt_diff=$2 repo=$3 work=$4
rm -rf "$work"
mkdir -p "$work/d"
. "$(dirname "$0")/../common/fail.sh"
i=0
while [ $i -lt 200 ]; do
	printf 'abc ab %d\n%%\nba ab\n%%\n' $i
	i=$((i + 1))
done >"$work/d/a.txt"
cat >"$work/t.ini" <<INI
[run]
device = cpu
batch_size = 2
eval_batch_size = 2
epochs = 1
max_steps = 4
threads = 1
out_dir = $work/runs
[optimizer]
name = adamw
lr = 0.001
[model]
name = llama
preset = tiny
vocab_size = 11
hidden_size = 16
intermediate_size = 32
num_heads = 2
num_kv_heads = 1
lora_rank = 4
lora_targets = all
[dataset]
name = text
separator = %
dir = $work/d
files = a.txt
tokenizer = $repo/tests/text/data/sp
seq_len = 16
val_fraction = 0.02
cache = false
[strategy]
name = single
INI
run() {
	name=$1
	shift
	timeout 120 "$mgrun" -c "$work/t.ini" --set run.name="$name" "$@" \
		>>"$work/$name.log" 2>&1
}
# field RUN EXPR: a value of RUN's report.json (python3)
field() {
	python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" \
		"$work/runs/$1/report.json" 2>/dev/null
}
run ref || fail "reference run: $(tail -3 "$work/ref.log")"
points=$(MG_TEST_CRASH_AT=list "$mgrun" -c "$work/t.ini")
[ "$(echo "$points" | wc -l)" -ge 5 ] || fail "crash points: '$points'"
MG_TEST_CRASH_AT=nosuch run typo
[ $? -eq 1 ] && grep -q "no such write point" "$work/typo.log" ||
	fail "an unknown MG_TEST_CRASH_AT accepted"
ref_losses=$(field ref "[(e['train_loss'], e['test_loss']) for e in r['epochs']]")
for p in $points; do
	# a checkpoint at step 2, then a process that crashes at p in the
	# run's final writes (each point's first time in that process)
	run "$p" --set run.stop_after=2 ||
		{ fail "$p: first 2 steps: $(tail -3 "$work/$p.log")"; continue; }
	MG_TEST_CRASH_AT=$p run "$p" --resume
	rc=$?
	[ $rc -eq 99 ] || { fail "$p: exit $rc, not the injected crash"; continue; }
	if [ "$p" = report_final ]; then
		# report.json says finished: nothing is left to complete
		run "$p" --resume && fail "$p: a finished run resumed"
		grep -q "the run is complete" "$work/$p.log" ||
			fail "$p: a finished run's --resume not refused"
	else
		run "$p" --resume ||
			{ fail "$p: --resume: $(tail -3 "$work/$p.log")"; continue; }
	fi
	[ "$(field "$p" "r['status']")" = finished ] ||
		fail "$p: report.json not finished after --resume"
	[ "$(field "$p" "[(e['train_loss'], e['test_loss']) for e in r['epochs']]")" = "$ref_losses" ] ||
		fail "$p: epochs $(field "$p" "r['epochs']"), expected $ref_losses"
	python3 -c "import json,sys; c=json.load(open(sys.argv[1])); assert c['r'] == 4" \
		"$work/runs/$p/adapter/adapter_config.json" 2>/dev/null ||
		fail "$p: adapter/adapter_config.json missing or wrong"
	cmp -s "$work/runs/$p/adapter/adapter_model.safetensors" \
		"$work/runs/ref/adapter/adapter_model.safetensors" ||
		fail "$p: adapter_model.safetensors differs from the reference"
	"$ckpt_diff" "$work/runs/ref/checkpoint.safetensors" \
		"$work/runs/$p/checkpoint.safetensors" 0 >"$work/$p.diff" 2>&1 ||
		fail "$p: checkpoint differs: $(tail -2 "$work/$p.diff")"
	# and a finished run is not resumed again
	run "$p" --resume && fail "$p: a finished run resumed again"
	grep -q "the run is complete" "$work/$p.log" ||
		fail "$p: a finished run's --resume not refused as complete"
done
echo "checked crash points:" $points

# Item 3: two epochs of a few steps, stopped after 2 and after 4 steps
# (mid epoch), resumed to the end.
mkdir -p "$work/d2"
head -n 60 "$work/d/a.txt" >"$work/d2/a.txt"
set -- --set run.epochs=2 --set run.max_steps=0 --set dataset.dir="$work/d2" \
	--set dataset.val_fraction=0.1
run whole "$@" || fail "whole run: $(tail -3 "$work/whole.log")"
run parts "$@" --set run.stop_after=2 || fail "parts 1"
[ "$(field parts "r['status']")" = stopped ] ||
	fail "a run.stop_after stop reported as $(field parts "r['status']")"
run parts "$@" --set run.stop_after=2 --resume || fail "parts 2"
run parts "$@" --resume || fail "parts 3: $(tail -3 "$work/parts.log")"
want=$(field whole "[(e['epoch'], e['steps'], e['samples'], round(e['train_loss'], 12), round(e['test_loss'], 12)) for e in r['epochs']]")
got=$(field parts "[(e['epoch'], e['steps'], e['samples'], round(e['train_loss'], 12), round(e['test_loss'], 12)) for e in r['epochs']]")
[ -n "$want" ] && [ "$got" = "$want" ] ||
	fail "resumed report epochs $got, uninterrupted $want"
[ "$(field parts "r['status']")" = finished ] || fail "parts not finished"
[ $fails -eq 0 ] || exit 1
echo "ok: every crash point completable; the report covers the whole run"
