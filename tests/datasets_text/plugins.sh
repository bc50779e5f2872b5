#!/bin/sh
# plugins.sh MGRUN REPO TMPDIR - the instruct and text plugins through
# mgrun with the real Llama 2 tokenizer: the token cache (a second run
# copies ids, a changed data byte or option re-tokenizes, a damaged file
# is rebuilt with a warning), bad data reported with file and line and
# nothing run, a text corpus split at "%" lines, and the options shown
# by --help-plugin. Exit 77 (skipped) without .deps/tokenizers.
mgrun=$1; repo=$2; tmp=$3
tok=$repo/.deps/tokenizers/llama2
[ -d "$tok" ] || { echo "skipped: no $tok (scripts/fetch-tokenizers.sh)"; exit 77; }
rm -rf "$tmp"; mkdir -p "$tmp"
fail=0
no() { echo "FAIL: $*"; fail=1; }

cat > "$tmp/a.ini" <<INI
[run]
device = cpu
batch_size = 2
eval_batch_size = 4
max_steps = 1
out_dir = $tmp/runs
[optimizer]
name = adamw
lr = 0.001
[model]
name = llama
preset = tiny
vocab_size = 32000
hidden_size = 16
intermediate_size = 32
num_heads = 2
num_kv_heads = 1
[dataset]
name = instruct
train = data.jsonl
tokenizer = $tok
max_seq_len = 64
[strategy]
name = single
INI
i=0; : > "$tmp/data.jsonl"
while [ $i -lt 12 ]; do
  echo "{\"instruction\": \"Repeat the number $i.\", \"output\": \"$i $i $i\"}" >> "$tmp/data.jsonl"
  i=$((i + 1))
done
run() { "$mgrun" -c "$tmp/a.ini" "$@" > "$tmp/out" 2>&1; }

# A row more than max_seq_len tokens could hold at 256 bytes a token is
# refused before it is tokenized (a 1 GB row was tokenized whole), naming
# its line; the file is left as it was for the runs below.
cp "$tmp/data.jsonl" "$tmp/data.keep"
python3 -c 'import json; print(json.dumps({"instruction": "Repeat.", "output": "x " * 9000}))' >> "$tmp/data.jsonl"
run && no "a 18 kB row accepted at max_seq_len 64"
grep -q "data.jsonl:13: a sample of 18[0-9]* bytes, more than max_seq_len 64 tokens can hold even at 256 bytes a token" "$tmp/out" ||
  { cat "$tmp/out"; no "huge row message"; }
mv "$tmp/data.keep" "$tmp/data.jsonl"

run || { cat "$tmp/out"; no "first run"; }
grep -q "12 samples, format alpaca" "$tmp/out" || no "first run did not tokenize"
grep -q "tokens from cache" "$tmp/out" && no "first run read a cache"
run || no "second run"
grep -q "tokens from cache" "$tmp/out" || no "second run did not use the cache"
grep -q "format alpaca" "$tmp/out" && no "second run tokenized again"
# An option that changes the ids, then a changed data byte.
run --set dataset.train_on_input=true || no "train_on_input run"
grep -q "tokens from cache" "$tmp/out" && no "train_on_input read the old cache"
run --set dataset.max_seq_len=60 || no "max_seq_len run"
grep -q "tokens from cache" "$tmp/out" && no "max_seq_len read the old cache"
sed -i 's/Repeat the number 3/Repeat the number three/' "$tmp/data.jsonl"
run || no "changed data run"
grep -q "tokens from cache" "$tmp/out" && no "changed data read the old cache"
# Another tokenizer (its digest is in the key).
if [ -d "$repo/.deps/tokenizers/llama3" ]; then
  run --set dataset.tokenizer="$repo/.deps/tokenizers/llama3" --set model.vocab_size=128256 ||
    { cat "$tmp/out"; no "llama3 run"; }
  grep -q "tokens from cache" "$tmp/out" && no "another tokenizer read the old cache"
fi
# Options that do not change the ids (packing, split) reuse it.
run --set dataset.packed=true --set dataset.val_fraction=0.3 || no "packed run"
grep -q "tokens from cache" "$tmp/out" || no "packing re-tokenized"
grep -q "packed" "$tmp/out" || no "packed not reported"
# A damaged cache file: warned, rebuilt, the run goes on.
for f in "$tmp"/runs/cache/tokens/*.bin; do head -c 50 "$f" > "$f.x"; mv "$f.x" "$f"; done
run || no "damaged cache run"
grep -q "rebuilding it" "$tmp/out" || no "damaged cache not reported"
run || no "rebuilt cache run"
grep -q "tokens from cache" "$tmp/out" || no "rebuilt cache not used"
# Truncation counted and reported.
run --set dataset.max_seq_len=8 --set dataset.train_on_input=true || no "short rows run"
grep -q "12 samples cut to max_seq_len 8" "$tmp/out" || { cat "$tmp/out"; no "truncation not reported"; }
# Cut before any response token: every sample left out, said with counts.
run --set dataset.max_seq_len=16 && no "no sample left accepted"
grep -q "no sample left: 12 without any response token within max_seq_len 16" "$tmp/out" || { cat "$tmp/out"; no "no-sample message"; }
run --set dataset.max_seq_len=16 --set dataset.truncation=drop && no "all dropped accepted"
grep -q "no sample left: .* 12 longer ones left out" "$tmp/out" || { cat "$tmp/out"; no "dropped message"; }

# Bad data: a clear error with file and line, nothing trained.
printf '{"input": "a", "output": "b"}\n{"input": "a", "output": }\n' > "$tmp/data.jsonl"
run && no "invalid JSON accepted"
grep -q "data.jsonl:2: invalid JSON" "$tmp/out" || { cat "$tmp/out"; no "invalid JSON message"; }
printf '{"input": "a", "output": 3}\n' > "$tmp/data.jsonl"
run && no "non-string field accepted"
grep -q 'sample 0: field "output" is a number, not a string' "$tmp/out" || no "non-string message"
: > "$tmp/data.jsonl"
run && no "empty file accepted"
grep -q "data.jsonl: empty file" "$tmp/out" || no "empty file message"
printf '{"input": "caf\351", "output": "b"}\n' > "$tmp/data.jsonl"
run && no "invalid UTF-8 accepted"
grep -q "invalid UTF-8 at byte offset 14 (line 1)" "$tmp/out" || no "UTF-8 message"
gzip -c "$repo/conf/data/grammar_sample.jsonl" > "$tmp/g.jsonl.gz"
run --set dataset.train="$tmp/g.jsonl.gz" || { cat "$tmp/out"; no "gzip run"; }
grep -q "26 samples, format grammar" "$tmp/out" || no "gzip not read"

# A text corpus split at % lines.
printf 'A fortune.\n%%\nAnother one,\non two lines.\n%%\nThe third.\n' > "$tmp/f.txt"
cp "$tmp/f.txt" "$tmp/g.txt"
sed -e 's/^name = instruct/name = text/' -e 's/^train = .*/files = *.txt/' \
    -e 's/^max_seq_len = 64/seq_len = 8\nseparator = %\nval_fraction = 0.3/' \
    "$tmp/a.ini" > "$tmp/t.ini"
"$mgrun" -c "$tmp/t.ini" > "$tmp/out" 2>&1 || { cat "$tmp/out"; no "text run"; }
grep -q "text: 2 files, .* 6 documents" "$tmp/out" || { cat "$tmp/out"; no "text documents"; }
"$mgrun" -c "$tmp/t.ini" > "$tmp/out" 2>&1 || no "text rerun"
grep -q "text: tokens from cache" "$tmp/out" || no "text cache"

"$mgrun" --help-plugin instruct > "$tmp/out" 2>&1 || no "help instruct"
for k in train test tokenizer format template columns train_on_input \
    max_seq_len truncation packed val_fraction cache; do
  grep -q "^ *$k " "$tmp/out" || no "--help-plugin instruct lacks $k"
done
"$mgrun" --help-plugin text > "$tmp/out" 2>&1 || no "help text"
grep -q "separator" "$tmp/out" || no "--help-plugin text lacks separator"
[ $fail = 0 ] && echo "all passed"
exit $fail
