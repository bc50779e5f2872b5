#!/bin/sh
# text.sh MGRUN REPO WORK - `mgrun generate` with text, for the Llama 2
# and the Llama 3 tokenizer.json (.deps/tokenizers; exit 77 without them):
# a tiny llama with the tokenizer's vocabulary trained a step, then the
# streamed continuation must be exactly what the tokenizer decodes from
# the same (greedy) ids that --ids mode prints, minus the prompt's text
# (streaming holds incomplete UTF-8 back and loses nothing); greedy and
# seeded text reproduce; without a tokenizer the refusal names --ids;
# --prompts answers a text prompt with the same text and ids; --chat
# prompts with the chat template's rendering, from the run and from its
# export through --model.
set -u
mgrun=$1 repo=$2 work=$3
deps=$repo/.deps/tokenizers
if [ ! -f "$deps/llama2/tokenizer.json" ] || [ ! -f "$deps/llama3/tokenizer.json" ]; then
	echo "SKIPPED: no $deps/{llama2,llama3}/tokenizer.json (scripts/fetch-tokenizers.sh)"
	exit 77
fi
ini=$repo/conf/llama_tiny.ini
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
prompt='Once upon a time, in a café near Zürich,'
for tk in llama2 llama3; do
	tok=$deps/$tk
	case $tk in
	llama2) V=32000 ;;
	llama3) V=128256 ;;
	esac
	S="--set run.out_dir=$work --set run.name=$tk --set run.threads=2"
	S="$S --set run.max_steps=1 --set run.batch_size=4"
	S="$S --set run.eval_batch_size=4 --set dataset.train_samples=16"
	S="$S --set dataset.test_samples=4 --set dataset.seq_len=16"
	S="$S --set dataset.min_len=8 --set dataset.vocab_size=$V"
	S="$S --set model.vocab_size=$V"
	# shellcheck disable=SC2086
	"$mgrun" -c "$ini" $S >"$work/$tk.train.log" 2>&1 || {
		cat "$work/$tk.train.log"
		fail "$tk: training did not finish"
		continue
	}
	gen() { # gen OUT ARGS...: rc in $rc, stderr in OUT.err
		out=$1
		shift
		# shellcheck disable=SC2086
		"$mgrun" generate -c "$ini" $S "$@" >"$work/$out" \
			2>"$work/$out.err"
		rc=$?
	}
	gen $tk.g1 --tokenizer "$tok" --prompt "$prompt" --greedy \
		--max-new-tokens 24
	[ $rc -eq 0 ] || fail "$tk greedy: exit $rc: $(cat "$work/$tk.g1.err")"
	cat "$work/$tk.g1.err"
	echo "$tk greedy: $(cat "$work/$tk.g1")"
	gen $tk.g2 --tokenizer "$tok" --prompt "$prompt" --greedy \
		--max-new-tokens 24
	cmp -s "$work/$tk.g1" "$work/$tk.g2" || fail "$tk: greedy text differs"
	gen $tk.s1 --tokenizer "$tok" --prompt "$prompt" --seed 3 \
		--max-new-tokens 24
	gen $tk.s2 --tokenizer "$tok" --prompt "$prompt" --seed 3 \
		--max-new-tokens 24
	gen $tk.s3 --tokenizer "$tok" --prompt "$prompt" --seed 4 \
		--max-new-tokens 24
	cmp -s "$work/$tk.s1" "$work/$tk.s2" || fail "$tk: seed 3 differs"
	cmp -s "$work/$tk.s1" "$work/$tk.s3" && fail "$tk: seeds 3 and 4 agree"
	# the same continuation as ids, decoded by the tokenizer
	pids=$(printf '%s\n' "$prompt" | "$mgrun" tokenize --tokenizer "$tok")
	gen $tk.ids --ids --tokenizer "$tok" --prompt "$pids" --greedy \
		--max-new-tokens 24
	[ $rc -eq 0 ] || fail "$tk --ids: exit $rc: $(cat "$work/$tk.ids.err")"
	echo "$tk ids: $pids | $(cat "$work/$tk.ids")"
	printf '%s\n%s %s\n' "$pids" "$pids" "$(cat "$work/$tk.ids")" |
		"$mgrun" tokenize --tokenizer "$tok" --decode --skip-special \
			>"$work/$tk.dec"
	if command -v python3 >/dev/null 2>&1; then
		python3 - "$work/$tk.dec" "$work/$tk.g1" <<'PY' || fail "$tk: streamed text is not the decoded ids"
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
p, full = json.loads(lines[0]), json.loads(lines[1])
got = open(sys.argv[2], encoding="utf-8").read()
assert full.startswith(p), (p, full)
want = full[len(p):] + "\n"
if got != want:
    print("streamed %r\ndecoded  %r" % (got, want))
    sys.exit(1)
PY
	else
		echo "(no python3: the streamed text is not compared)"
	fi
	# --prompts with a text prompt: the completion is the streamed text
	# (without its final newline), its ids the --ids run's, stop and
	# counts named; the same prompt as ids on the next line agrees
	python3 -c 'import json, sys
print(json.dumps({"prompt": sys.argv[1], "id": 7}))
print(json.dumps({"ids": [int(x) for x in sys.argv[2].split()]}))' \
		"$prompt" "$pids" >"$work/$tk.prompts.jsonl"
	gen $tk.pr --tokenizer "$tok" --prompts "$work/$tk.prompts.jsonl" \
		--greedy --max-new-tokens 24
	[ $rc -eq 0 ] || fail "$tk --prompts: exit $rc: $(cat "$work/$tk.pr.err")"
	python3 - "$work/$tk.pr" "$work/$tk.g1" "$work/$tk.ids" <<'PY' || fail "$tk: --prompts answers differ from generate's"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
streamed = open(sys.argv[2], encoding="utf-8").read()
ids = [int(x) for x in open(sys.argv[3]).read().split()]
assert len(r) == 2, r
for x in r:
    assert x["completion"] + "\n" == streamed, (x["completion"], streamed)
    assert x["completion_ids"] == ids, (x["completion_ids"], ids)
assert r[0]["id"] == 7 and r[0]["prompt_tokens"] == r[1]["prompt_tokens"]
PY
	# no tokenizer anywhere: refused, pointing at --ids
	gen $tk.none --prompt "$prompt"
	[ $rc -eq 2 ] && grep -q -- "--ids" "$work/$tk.none.err" ||
		fail "$tk: no tokenizer: exit $rc: $(cat "$work/$tk.none.err")"
	[ $tk = llama3 ] || continue
	# --chat: messages rendered by the tokenizer's chat template with the
	# generation prompt, encoded as transformers encodes the rendering:
	# the prompt `mgrun tokenize --chat` makes. Then --model on the run's
	# export with the tokenizer files beside it: the same continuation.
	msgs='[{"role": "user", "content": "Hi there"}]'
	cids=$(printf '{"messages": %s, "add_generation_prompt": true}\n' \
		"$msgs" | "$mgrun" tokenize --tokenizer "$tok" --chat)
	gen $tk.c1 --tokenizer "$tok" --chat --prompt "$msgs" --greedy \
		--max-new-tokens 12
	[ $rc -eq 0 ] || fail "$tk --chat: exit $rc: $(cat "$work/$tk.c1.err")"
	n=$(echo "$cids" | wc -w)
	grep -q "generate: $n prompt tokens" "$work/$tk.c1.err" ||
		fail "$tk --chat: not the $n ids of tokenize --chat ($cids): $(cat "$work/$tk.c1.err")"
	# shellcheck disable=SC2086
	"$mgrun" export -c "$ini" $S --out "$work/$tk.hf" --dtype fp32 \
		>/dev/null 2>"$work/$tk.exp.err" ||
		fail "$tk export: $(cat "$work/$tk.exp.err")"
	cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$work/$tk.hf/"
	"$mgrun" generate --model "$work/$tk.hf" --chat --prompt "$msgs" \
		--greedy --max-new-tokens 12 >"$work/$tk.c2" 2>"$work/$tk.c2.err" ||
		fail "$tk --model --chat: $(cat "$work/$tk.c2.err")"
	cmp -s "$work/$tk.c1" "$work/$tk.c2" ||
		fail "$tk --model --chat: '$(cat "$work/$tk.c2")' vs the run's '$(cat "$work/$tk.c1")'"
	"$mgrun" generate --model "$work/$tk.hf" --chat --prompt "not json" \
		>/dev/null 2>"$work/$tk.c3.err"
	[ $? -eq 2 ] && grep -q "not a JSON list of messages" "$work/$tk.c3.err" ||
		fail "--chat with a plain prompt: $(cat "$work/$tk.c3.err")"
done
# Stopping at the end-of-text token: a model of 3 tokens sampled hot,
# with the Llama 2 tokenizer's EOS (id 2) as its stop token (--ids with
# --tokenizer), stops before 60 tokens (seed 6: after 3; a 2 in 60
# draws of about 1 in 3 each) and never prints the 2.
S="--set run.out_dir=$work --set run.name=eos --set run.threads=2"
S="$S --set run.max_steps=1 --set run.batch_size=4"
S="$S --set run.eval_batch_size=4 --set dataset.train_samples=16"
S="$S --set dataset.test_samples=4 --set dataset.seq_len=16"
S="$S --set dataset.min_len=8 --set dataset.vocab_size=3"
S="$S --set model.vocab_size=3"
# shellcheck disable=SC2086
"$mgrun" -c "$ini" $S >"$work/eos.train.log" 2>&1 || fail "eos: training"
# shellcheck disable=SC2086
"$mgrun" generate -c "$ini" $S --ids --tokenizer "$deps/llama2" \
	--prompt "0 1" --temperature 3 --top-k 0 --top-p 1 --seed 6 \
	--max-new-tokens 60 >"$work/eos.out" 2>"$work/eos.err"
rc=$?
echo "eos: $(cat "$work/eos.out")"
tail -1 "$work/eos.err"
[ $rc -eq 0 ] && grep -q "stopped at end of text token" "$work/eos.err" ||
	fail "eos: exit $rc, did not stop at EOS: $(cat "$work/eos.err")"
n=$(wc -w <"$work/eos.out")
[ "$n" -ge 1 ] && [ "$n" -lt 60 ] || fail "eos: $n tokens (seed 6 stops after 3)"
grep -qw 2 "$work/eos.out" && fail "eos: the EOS id was printed"
# without the tokenizer the same draw runs on past where it stopped
# shellcheck disable=SC2086
"$mgrun" generate -c "$ini" $S --ids --prompt "0 1" --temperature 3 \
	--top-k 0 --top-p 1 --seed 6 --max-new-tokens 60 \
	>"$work/eos2.out" 2>/dev/null
[ "$(wc -w <"$work/eos2.out")" -eq 60 ] || fail "no tokenizer: not 60 ids"
[ "$(cut -d' ' -f1-$((n + 1)) "$work/eos2.out")" = \
	"$(cat "$work/eos.out") 2" ] ||
	fail "eos: the draws before the stop differ"

[ $fails -eq 0 ] || exit 1
echo "ok"
