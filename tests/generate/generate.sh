#!/bin/sh
# generate.sh MGRUN REPO WORK - `mgrun generate --ids` on the tiny llama
# of conf/llama_tiny.ini trained for a few steps: refused before there is
# a checkpoint; greedy output the same twice; a seed gives the same
# output twice and another seed another output; --max-new-tokens is the
# number of ids printed; ddp_ds, fsdp and offload decode alike; without
# a checkpoint the model's own (HF) weights; refusals of run.gpus > 1, a
# launcher's rank, a bad --set, a model without decode, a prompt longer
# than the model's positions.
set -u
mgrun=$1 repo=$2 work=$3
ini=$repo/conf/llama_tiny.ini
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
S="--set run.out_dir=$work --set run.name=tiny --set run.threads=2"
S="$S --set run.max_steps=8 --set dataset.train_samples=512"
S="$S --set dataset.test_samples=16"
gen() { # gen OUT ERR ARGS...: rc in $rc
	out=$1 err=$2
	shift 2
	# shellcheck disable=SC2086
	"$mgrun" generate -c "$ini" $S "$@" >"$work/$out" 2>"$work/$err"
	rc=$?
}

# no checkpoint yet, and the model has no weights of its own
gen none.out none.err --ids --prompt "1 2 3"
[ $rc -eq 1 ] || fail "no checkpoint: exit $rc, expected 1"
grep -q "no checkpoint" "$work/none.err" || fail "no checkpoint: $(cat "$work/none.err")"

# shellcheck disable=SC2086
"$mgrun" -c "$ini" $S >"$work/train.log" 2>&1 || {
	cat "$work/train.log"
	echo "FAIL: training did not finish"
	exit 1
}

P="5 17 42 99 3"
gen g1.out g1.err --ids --prompt "$P" --greedy --max-new-tokens 12
[ $rc -eq 0 ] || fail "greedy: exit $rc: $(cat "$work/g1.err")"
cat "$work/g1.err"
echo "greedy: $(cat "$work/g1.out")"
grep -q "weights from the run's checkpoint" "$work/g1.err" ||
	fail "the weights used are not named"
grep -q "tokens/s" "$work/g1.err" || fail "no tokens/s on stderr"
n=$(wc -w <"$work/g1.out")
[ "$n" -eq 12 ] || fail "--max-new-tokens 12 printed $n ids"
awk '{ for (i = 1; i <= NF; i++) if ($i !~ /^[0-9]+$/ || $i >= 256) exit 1 }' \
	"$work/g1.out" || fail "not ids of the vocabulary: $(cat "$work/g1.out")"
gen g2.out g2.err --ids --prompt "$P" --greedy --max-new-tokens 12
cmp -s "$work/g1.out" "$work/g2.out" || fail "greedy differs between runs"
# the ids right after the flag (`--ids "5 17 ..."`) are the same prompt;
# given twice, refused
gen g2b.out g2b.err --ids "$P" --greedy --max-new-tokens 12
cmp -s "$work/g1.out" "$work/g2b.out" || fail "--ids IDS differs from --ids --prompt IDS"
gen twice.out twice.err --ids "$P" --prompt "$P" --max-new-tokens 2
[ "$rc" = 2 ] && grep -q "give one" "$work/twice.err" ||
	fail "--ids IDS with --prompt not refused (rc $rc): $(cat "$work/twice.err")"
# temperature 0 is greedy; the prompt from a file, comma-separated
echo "5, 17, 42, 99, 3" >"$work/prompt.txt"
gen g3.out g3.err --ids --prompt-file "$work/prompt.txt" --temperature 0 \
	--max-new-tokens 12
cmp -s "$work/g1.out" "$work/g3.out" ||
	fail "--temperature 0 from --prompt-file differs from --greedy"
# greedy continuation of a shorter run is a prefix
gen g4.out g4.err --ids --prompt "$P" --greedy --max-new-tokens 5
[ "$(cut -d' ' -f1-5 "$work/g1.out")" = "$(cat "$work/g4.out")" ] ||
	fail "5 greedy tokens are not the first 5 of 12"

gen s1.out s1.err --ids --prompt "$P" --seed 11 --temperature 1.5 \
	--top-k 0 --top-p 1 --max-new-tokens 16
gen s2.out s2.err --ids --prompt "$P" --seed 11 --temperature 1.5 \
	--top-k 0 --top-p 1 --max-new-tokens 16
gen s3.out s3.err --ids --prompt "$P" --seed 12 --temperature 1.5 \
	--top-k 0 --top-p 1 --max-new-tokens 16
echo "seed 11: $(cat "$work/s1.out")"
echo "seed 12: $(cat "$work/s3.out")"
cmp -s "$work/s1.out" "$work/s2.out" || fail "seed 11 differs between runs"
cmp -s "$work/s1.out" "$work/s3.out" && fail "seeds 11 and 12 agree"
[ "$(wc -w <"$work/s1.out")" -eq 16 ] || fail "sampled: not 16 ids"
# top-k 1 is greedy whatever the seed
gen k1.out k1.err --ids --prompt "$P" --seed 5 --top-k 1 --max-new-tokens 12
cmp -s "$work/g1.out" "$work/k1.out" || fail "--top-k 1 is not greedy"
# --max-new-tokens 0: nothing
gen z.out z.err --ids --prompt "$P" --max-new-tokens 0
[ $rc -eq 0 ] && [ "$(wc -w <"$work/z.out")" -eq 0 ] ||
	fail "--max-new-tokens 0: exit $rc, '$(cat "$work/z.out")'"

# every strategy lends the weights for decode: the same greedy ids
for st in ddp_ds fsdp offload; do
	gen st.out st.err --ids --prompt "$P" --greedy --max-new-tokens 12 \
		--set strategy.name=$st
	cmp -s "$work/g1.out" "$work/st.out" ||
		fail "strategy $st: exit $rc, '$(cat "$work/st.out")': $(tail -1 "$work/st.err")"
done

# No run checkpoint but a model with weights of its own: the checkpoint
# rewritten as a Hugging Face folder (model.hf_dir) gives the same greedy
# ids, and stderr says which weights were used (needs python3).
if command -v python3 >/dev/null 2>&1; then
	mkdir -p "$work/hf"
	python3 - "$work/tiny/checkpoint.safetensors" "$work/hf" <<'PY'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
f = open(src, "rb")
n = struct.unpack("<Q", f.read(8))[0]
head = json.loads(f.read(n))
base = 8 + n
out, blobs, off = {}, [], 0
for k, v in head.items():
    if not k.startswith("param/"):
        continue
    name = k[len("param/"):]
    if name.startswith("head."):
        name = name[len("head."):]
    a, b = v["data_offsets"]
    f.seek(base + a)
    blobs.append(f.read(b - a))
    out[name] = {"dtype": v["dtype"], "shape": v["shape"],
                 "data_offsets": [off, off + b - a]}
    off += b - a
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
with open(dst + "/model.safetensors", "wb") as g:
    g.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
json.dump({"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
           "intermediate_size": 176, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2,
           "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False},
          open(dst + "/config.json", "w"))
PY
	gen hf.out hf.err --ids --prompt "$P" --greedy --max-new-tokens 12 \
		--set model.hf_dir="$work/hf" --set run.name=fromhf
	[ $rc -eq 0 ] && grep -q "the model's own weights (hf_dir" "$work/hf.err" ||
		fail "hf_dir without a checkpoint: exit $rc: $(cat "$work/hf.err")"
	cmp -s "$work/g1.out" "$work/hf.out" ||
		fail "hf_dir weights: '$(cat "$work/hf.out")', checkpoint: '$(cat "$work/g1.out")'"
	grep "own weights" "$work/hf.err"
	# --model DIR: the same folder without an INI gives the same ids
	"$mgrun" generate --model "$work/hf" --ids --prompt "$P" --greedy \
		--max-new-tokens 12 >"$work/m1.out" 2>"$work/m1.err" ||
		fail "--model: $(cat "$work/m1.err")"
	cmp -s "$work/g1.out" "$work/m1.out" ||
		fail "--model: '$(cat "$work/m1.out")', checkpoint: '$(cat "$work/g1.out")'"
	# generation_config.json's eos_token_id (a list, as Llama 3's):
	# generation stops before the third greedy id, which is one of them
	third=$(cut -d' ' -f3 "$work/g1.out")
	printf '{"eos_token_id": [9999, %s]}\n' "$third" \
		>"$work/hf/generation_config.json"
	"$mgrun" generate --model "$work/hf" --ids --prompt "$P" --greedy \
		--max-new-tokens 12 >"$work/m2.out" 2>"$work/m2.err"
	[ "$(cat "$work/m2.out")" = "$(cut -d' ' -f1-2 "$work/g1.out")" ] ||
		fail "eos_token_id $third: '$(cat "$work/m2.out")' from '$(cat "$work/g1.out")'"
	grep -q "end of text token" "$work/m2.err" ||
		fail "eos_token_id: $(cat "$work/m2.err")"
	rm "$work/hf/generation_config.json"
	# refusals: both -c and --model; --device without --model
	"$mgrun" generate -c "$ini" --model "$work/hf" --ids --prompt "$P" \
		>/dev/null 2>"$work/m3.err"
	[ $? -eq 2 ] && grep -q "not both" "$work/m3.err" ||
		fail "-c and --model: $(cat "$work/m3.err")"
	"$mgrun" generate -c "$ini" --device cpu --ids --prompt "$P" \
		>/dev/null 2>"$work/m4.err"
	[ $? -eq 2 ] && grep -q "go with --model" "$work/m4.err" ||
		fail "--device without --model: $(cat "$work/m4.err")"
else
	echo "(no python3: the hf_dir path is not tested)"
fi

# refusals
gen w.out w.err --ids --prompt "$P" --set run.gpus=2
[ $rc -eq 2 ] && grep -q "one process" "$work/w.err" ||
	fail "run.gpus=2: exit $rc: $(cat "$work/w.err")"
# shellcheck disable=SC2086
MG_RANK=1 MG_WORLD_SIZE=2 "$mgrun" generate -c "$ini" $S --ids --prompt "$P" \
	>"$work/r.out" 2>"$work/r.err"
rc=$?
[ $rc -eq 2 ] && grep -q "rank of a multi-process job (world 2)" "$work/r.err" ||
	fail "a launcher's rank: exit $rc: $(cat "$work/r.err")"
gen b.out b.err --ids --prompt "$P" --set model.no_such_key=1
[ $rc -eq 2 ] && grep -q "no_such_key" "$work/b.err" ||
	fail "bad --set: exit $rc: $(cat "$work/b.err")"
gen u.out u.err --ids --prompt "$P" --temperature -1
[ $rc -eq 2 ] || fail "--temperature -1: exit $rc"
gen x.out x.err --ids --prompt "1 x 2"
[ $rc -eq 2 ] && grep -q "not a token id" "$work/x.err" ||
	fail "bad ids: exit $rc: $(cat "$work/x.err")"
gen v.out v.err --ids --prompt "1 2 300"
[ $rc -eq 1 ] && grep -q "outside the vocabulary" "$work/v.err" ||
	fail "id 300 of 256: exit $rc: $(cat "$work/v.err")"
# the tiny preset has 2048 positions: a longer prompt is refused before
# anything runs, and so is one that would outgrow them while generating
long=$(awk 'BEGIN { for (i = 0; i < 2100; i++) printf "%d ", i % 250 }')
gen l.out l.err --ids --prompt "$long" --max-new-tokens 4
[ $rc -eq 1 ] && grep -q "max_position_embeddings = 2048" "$work/l.err" ||
	fail "2100-token prompt: exit $rc: $(cat "$work/l.err")"
cat "$work/l.err"
gen l2.out l2.err --ids --prompt "$P" --max-new-tokens 2044
[ $rc -eq 1 ] && grep -q "max_position_embeddings" "$work/l2.err" ||
	fail "5 + 2044 tokens: exit $rc"
gen l3.out l3.err --ids --prompt "$P" --max-new-tokens 2043 --greedy
[ $rc -eq 0 ] && [ "$(wc -w <"$work/l3.out")" -eq 2043 ] ||
	fail "5 + 2043 tokens (the whole window): exit $rc: $(tail -2 "$work/l3.err")"
# a model without decode (the MLP classifier)
"$mgrun" generate -c "$repo/conf/fashion_mnist.ini" --ids --prompt "1" \
	>"$work/m.out" 2>"$work/m.err"
rc=$?
[ $rc -eq 2 ] && grep -q "has no decode op" "$work/m.err" ||
	fail "model without decode: exit $rc: $(cat "$work/m.err")"
cat "$work/m.err"
# --prompts: JSON Lines answered one line each, the model loaded once;
# each prompt's ids are what generate gives it alone (greedy and seeded)
gen q1.out q1.err --ids --prompt "1 2 3" --greedy --max-new-tokens 12
printf '%s\n\n%s\n%s\n' '{"ids": [5, 17, 42, 99, 3], "id": "row-a"}' \
	'  {"ids": [1, 2, 3]}' '{"ids": [5, 17, 42, 99, 3], "id": {"n": 2}}' \
	>"$work/prompts.jsonl"
gen pr.out pr.err --prompts "$work/prompts.jsonl" --greedy --max-new-tokens 12
[ $rc -eq 0 ] || fail "--prompts: exit $rc: $(cat "$work/pr.err")"
ids_of() { # ids_of FILE K: line K's completion_ids, space-separated
	python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(" ".join(map(str, rows[int(sys.argv[2])]["completion_ids"])))' "$1" "$2"
}
[ "$(wc -l <"$work/pr.out")" -eq 3 ] || fail "--prompts: not 3 answers: $(cat "$work/pr.out")"
[ "$(ids_of "$work/pr.out" 0)" = "$(cat "$work/g1.out")" ] ||
	fail "--prompts line 1 differs from generate --prompt: $(ids_of "$work/pr.out" 0)"
[ "$(ids_of "$work/pr.out" 1)" = "$(cat "$work/q1.out")" ] ||
	fail "--prompts line 3 (after a prompt and a blank line) differs from generate alone"
[ "$(ids_of "$work/pr.out" 2)" = "$(cat "$work/g1.out")" ] ||
	fail "--prompts: the first prompt again gives other ids (a cache not restarted)"
python3 -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
assert [x["line"] for x in r] == [1, 3, 4], r
assert r[0]["id"] == "row-a" and "id" not in r[1] and r[2]["id"] == {"n": 2}, r
assert all(x["prompt_tokens"] in (5, 3) and x["new_tokens"] == 12 and
           x["stop"] == "max-new-tokens" and "completion" not in x for x in r), r' \
	"$work/pr.out" || fail "--prompts: fields: $(cat "$work/pr.out")"
grep -q "3 prompts" "$work/pr.err" || fail "--prompts: no summary"
gen ps.out ps.err --prompts "$work/prompts.jsonl" --seed 11 --temperature 1.5 \
	--top-k 0 --top-p 1 --max-new-tokens 16
[ "$(ids_of "$work/ps.out" 0)" = "$(cat "$work/s1.out")" ] ||
	fail "--prompts seed 11 differs from generate --seed 11"
# bad files: refused at FILE:LINE (exit 2) before any answer
printf '{"ids": [1]}\n[1, 2]\n' >"$work/b1.jsonl"
printf '{"ids": [1]}\n{"ids": [1, 300]}\n' >"$work/b2.jsonl"
printf '{"ids": [1]}\n{"prompt": "hello"}\n' >"$work/b3.jsonl"
printf '{"ids": [1, -2]}\n' >"$work/b4.jsonl"
printf '{"ids": [1], "prompt": "x"}\n' >"$work/b5.jsonl"
printf '{"ids": []}\n' >"$work/b6.jsonl"
printf '\n  \n' >"$work/b7.jsonl"
printf '{"ids": [1]}\n{"prompt": "a\\u0000b"}\n' >"$work/b8.jsonl"
printf '{"ids": [1], "id": "x\000y"}\n' >"$work/b9.jsonl"
# a second object on a line would be dropped unseen (fuzz_prompts)
printf '{"ids": [1]}\n{"ids": [2]} {"ids": [3]}\n' >"$work/b10.jsonl"
for c in "b1:2: not a JSON object" \
	"b8:2: field \"prompt\" holds a NUL character" "b9:1: field \"id\" holds a NUL" \
	"b2:2: token 1 of the prompt, id 300, is outside the model's vocabulary of 256" \
	"b3:2: a text prompt needs a tokenizer" "b4:1: ids.1. is not a token id" \
	"b5:1: give one of" "b6:1: the prompt has no tokens" "b7.jsonl: no prompts" \
	"b10:2: text after the JSON object (at byte 14 of the line)"; do
	f=${c%%:*} f=${f%%.jsonl*} want=${c#*:}
	gen $f.out $f.err --prompts "$work/$f.jsonl" --greedy --max-new-tokens 2
	[ $rc -eq 2 ] && [ ! -s "$work/$f.out" ] && grep -q "$want" "$work/$f.err" ||
		fail "--prompts $f: exit $rc, stdout '$(cat "$work/$f.out")': $(cat "$work/$f.err")"
done
gen pp.out pp.err --prompts "$work/prompts.jsonl" --prompt "1 2"
[ $rc -eq 2 ] || fail "--prompts with --prompt: exit $rc"
# an answer the tokenizer cannot decode (ids past its 11 tokens) says
# so, not "out of memory"
printf '{"ids": [5, 17, 42]}\n' >"$work/dec.jsonl"
gen dec.out dec.err --tokenizer "$repo/tests/text/data/sp" --prompts \
	"$work/dec.jsonl" --greedy --max-new-tokens 2
[ $rc -eq 1 ] && grep -q "decoding the text: .*not in the vocabulary" "$work/dec.err" &&
	! grep -q "out of memory" "$work/dec.err" ||
	fail "a decode failure: exit $rc: $(cat "$work/dec.err")"
# a FIFO or a folder as the prompts file is refused, not waited on; a
# NUL byte in an --ids prompt file would cut the ids
mkfifo "$work/fifo.jsonl"
for a in "--prompts $work/fifo.jsonl" "--prompt-file $work/fifo.jsonl" \
	"--prompts $work"; do
	# shellcheck disable=SC2086
	timeout 60 "$mgrun" generate -c "$ini" $S --ids $a --greedy \
		>"$work/ff.out" 2>"$work/ff.err"
	rc=$?
	[ $rc -eq 2 ] && grep -Eq "not a regular file|a directory" "$work/ff.err" ||
		fail "$a: exit $rc: $(cat "$work/ff.err")"
done
printf '5 17\000 42\n' >"$work/nul.txt"
gen nul.out nul.err --ids --prompt-file "$work/nul.txt" --greedy
[ $rc -eq 2 ] && grep -q "nul.txt: a NUL byte at byte offset 4" "$work/nul.err" ||
	fail "a NUL in --prompt-file: exit $rc: $(cat "$work/nul.err")"
# no prompt, two prompts
gen p.out p.err --ids
[ $rc -eq 2 ] || fail "no prompt: exit $rc"

[ $fails -eq 0 ] || exit 1
echo "ok"
