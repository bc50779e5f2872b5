#!/bin/sh
# dpo_jsonl.sh MGRUN WORK - DPO on pre-tokenized pairs (token_jsonl with
# HF position_ids: [chosen | rejected] in one row, positions restarting),
# the format tests/llama/dpo_check.py feeds mgrun and PyTorch alike: a
# few steps train and report TRL's metrics; position_ids that do not
# describe documents, and rows of one document under objective = dpo,
# are refused naming the file and line, or the row.
set -eu
mgrun=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
python3 - "$work" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1] + "/pairs.jsonl", "w") as f:
    for _ in range(24):
        p = [rng.randrange(64) for _ in range(rng.randrange(2, 6))]
        ids, labels, pos = [], [], []
        for d in range(2):
            r = [rng.randrange(64) for _ in range(rng.randrange(2, 9))]
            doc = p + r
            ids += doc
            pos += list(range(len(doc)))
            labels += [-100] * len(p) + r
        f.write(json.dumps({"input_ids": ids, "labels": labels,
                            "position_ids": pos}) + "\n")
with open(sys.argv[1] + "/bad.jsonl", "w") as f:
    f.write(json.dumps({"input_ids": [1, 2, 3, 4], "labels": [-100, 2, 3, 4],
                        "position_ids": [0, 1, 0, 1]}) + "\n")
    f.write(json.dumps({"input_ids": [1, 2, 3], "labels": [-100, 2, 3],
                        "position_ids": [0, 2, 3]}) + "\n")
with open(sys.argv[1] + "/sft.jsonl", "w") as f:
    f.write(json.dumps({"input_ids": [1, 2, 3, 4], "labels": [-100, 2, 3, 4]})
            + "\n")
PY
cat >"$work/dpo.ini" <<INI
[run]
precision = fp64
epochs = 1
max_steps = 4
batch_size = 4
eval_batch_size = 8
threads = 1
seed = 3
out_dir = $work
[optimizer]
name = adamw
lr = 0.01
[model]
name = llama
preset = tiny
num_layers = 2
hidden_size = 32
num_heads = 4
num_kv_heads = 2
intermediate_size = 48
vocab_size = 64
tie_embeddings = no
lora_rank = 4
lora_targets = all,head
objective = dpo
[dataset]
name = token_jsonl
train = $work/pairs.jsonl
seq_len = 32
[strategy]
name = single
INI
"$mgrun" -c "$work/dpo.ini" >"$work/ok.log" 2>&1 || {
	cat "$work/ok.log"
	echo "FAIL: DPO on token_jsonl pairs"
	exit 1
}
grep -q "^epoch 1: .*test loss .* rewards/accuracies" "$work/ok.log" || {
	cat "$work/ok.log"
	echo "FAIL: no DPO metrics"
	exit 1
}
if "$mgrun" -c "$work/dpo.ini" --set dataset.train="$work/bad.jsonl" \
	>"$work/bad.log" 2>&1; then
	echo "FAIL: bad position_ids accepted"
	exit 1
fi
grep -q "bad.jsonl:2: position_ids\[1\] is 2: a document starts at 0" \
	"$work/bad.log" || {
	cat "$work/bad.log"
	echo "FAIL: bad position_ids not named"
	exit 1
}
if "$mgrun" -c "$work/dpo.ini" --set dataset.train="$work/sft.jsonl" \
	--set run.batch_size=1 \
	>"$work/sft.log" 2>&1; then
	echo "FAIL: a row of one document accepted under objective = dpo"
	exit 1
fi
grep -q "is not a preference pair" "$work/sft.log" || {
	cat "$work/sft.log"
	echo "FAIL: the refusal does not say the row is not a pair"
	exit 1
}
echo "PASS: dpo_jsonl"
