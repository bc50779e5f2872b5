#!/bin/sh
# resume_changed_llm.sh MGRUN REPO WORK - issue 35 item 1 on a LoRA run
# of the tiny Llama on text data with the hand-written tokenizer of
# tests/text/data (no download): --resume after a change of what is
# trained (lora_alpha, rslora, lora_targets, quant, rope_theta, the
# dataset's seq_len and seed, an edited tokenizer or training file) is
# refused with exit 1 naming the option (old and new value) or the file,
# report.json untouched; --resume-changed lets a named change through,
# but never one that would drop a tensor the checkpoint holds.
set -eu
mgrun=$1 repo=$2 work=$3
rm -rf "$work"
mkdir -p "$work/d"
. "$(dirname "$0")/../common/fail.sh"
cp -r "$repo/tests/text/data/sp" "$work/tok"
i=0
while [ $i -lt 200 ]; do
	printf 'abc ab %d\n%%\nba ab\n%%\n' $i
	i=$((i + 1))
done >"$work/d/a.txt"
cat >"$work/t.ini" <<INI
[run]
device = cpu
batch_size = 2
eval = false
max_steps = 6
threads = 1
out_dir = $work/runs
name = r
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
tokenizer = $work/tok
seq_len = 16
cache = false
[strategy]
name = single
INI
run() {
	timeout 120 "$mgrun" -c "$work/t.ini" "$@" 2>&1
}
run --set run.stop_after=2 >"$work/first.log" ||
	fail "first run: $(tail -3 "$work/first.log")"
cp "$work/runs/r/report.json" "$work/report.before"
# bad PATTERN ARGS...: --resume ARGS exits 1 saying PATTERN
bad() {
	pat=$1
	shift
	set +e
	out=$(run --resume "$@")
	rc=$?
	set -e
	[ $rc -eq 1 ] || fail "$*: exit $rc, expected 1: $out"
	echo "$out" | grep -Eq -- "$pat" || fail "$*: missing: $pat: $out"
	cmp -s "$work/runs/r/report.json" "$work/report.before" ||
		fail "$*: report.json overwritten"
}
bad "model.lora_alpha = 16 then, 32 now" --set model.lora_alpha=32
bad "model.rslora = false then, true now" --set model.rslora=true
bad "model.lora_targets = all then, q,v now" --set model.lora_targets=q,v
bad "model.quant = none then, nf4 now" --set model.quant=nf4
bad "model.rope_theta = 0 then, 5000 now" --set model.rope_theta=5000
bad "dataset.seed = 1234 then, 99 now" --set dataset.seed=99
bad "optimizer.lr = 0.001 then, 0.002 now" --set optimizer.lr=0.002
# every difference named, not only the first
bad "optimizer.lr = 0.001 then, 0.002 now; .*model.lora_alpha = 16 then, 8 now" \
	--set model.lora_alpha=8 --set optimizer.lr=0.002
bad "dataset.seq_len = 16 then, 12 now" --set dataset.seq_len=12
# narrowed targets let through: the trained adapters of k, o, gate, up
# and down are in the checkpoint and this model would not load them
bad "holds tensor 'param/.*(k_proj|o_proj|gate_proj|up_proj|down_proj).*does not load" \
	--set model.lora_targets=q,v --resume-changed model.lora_targets
# the files the run read: same size, other bytes
cp "$work/tok/tokenizer.json" "$work/tok.saved"
sed -i 's/"ab"/"ab" /' "$work/tok/tokenizer.json"
bad "file $work/tok/tokenizer.json changed since the checkpoint" \
	--set optimizer.lr=0.001
cp "$work/tok.saved" "$work/tok/tokenizer.json"
cp "$work/d/a.txt" "$work/a.saved"
sed -i 's/^abc ab 7$/abc ba 7/' "$work/d/a.txt"
cmp -s "$work/d/a.txt" "$work/a.saved" && fail "data file not edited"
bad "file $work/d/a.txt changed since the checkpoint" --set run.threads=1
# a deliberate change, named: resumes (the file by the option that led
# to it, the lr by its key)
run --resume --resume-changed dataset.dir,optimizer.lr \
	--set optimizer.lr=0.002 --set run.stop_after=1 >"$work/ok.log" ||
	fail "--resume-changed: $(tail -3 "$work/ok.log")"
grep -q "resumed from .* at step 2" "$work/ok.log" ||
	fail "not resumed at step 2: $(tail -3 "$work/ok.log")"
# and options that may change (the schedule's length, logging) do not
# need naming; the checkpoint now records the edited file and lr
run --resume --set optimizer.lr=0.002 --set run.max_steps=8 \
	--set run.log_every=3 >"$work/ok2.log" ||
	fail "allowed change refused: $(tail -3 "$work/ok2.log")"
grep -q "resumed from .* at step 3" "$work/ok2.log" ||
	fail "not resumed at step 3: $(tail -3 "$work/ok2.log")"
[ $fails -eq 0 ] || exit 1
echo "ok: a changed experiment refused naming the option or file"
