#!/bin/sh
# chat_llama3_test.sh - `mgrun tokenize --chat` end to end with the real
# Llama 3 tokenizer (its own chat_template): the rendered text of every
# Llama 3 case of the chat corpus equals jinja2's rendering stored there;
# a conversation's ids are the ones apply_chat_template(tokenize=True)
# gives (checked by hand: the template's <|begin_of_text|> and header
# tokens recognised, no BOS added); the ids of every case equal the
# encoding of its text with add_special_tokens=False (--json
# --no-special). Exit 77 (skipped) without .deps/tokenizers/llama3
# (scripts/fetch-tokenizers.sh) or python3.
#
# usage: chat_llama3_test.sh MGRUN SOURCE_DIR WORK_DIR
set -u
mgrun=$1 src=$2 work=$3
tok=$src/.deps/tokenizers/llama3
corpus=$src/tests/text/data/chat/corpus.jsonl
[ -f "$tok/tokenizer_config.json" ] || { echo "SKIP: no $tok (scripts/fetch-tokenizers.sh)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not installed"; exit 77; }
mkdir -p "$work"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

out=$(printf '%s\n' '{"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": true}' |
	"$mgrun" tokenize --tokenizer "$tok" --chat)
[ "$out" = "128000 128006 882 128007 271 9906 0 128009 128006 78191 128007 271" ] ||
	fail "ids of Hello!: $out"

# the corpus's llama3-real cases: input lines and the expected texts
python3 - "$corpus" "$work" <<'PY' || { echo "FAIL: reading the corpus"; exit 1; }
import json, sys
corpus, work = sys.argv[1], sys.argv[2]
n = 0
with open(work + "/in.jsonl", "w", encoding="utf-8") as fi, \
     open(work + "/want.txt", "w", encoding="utf-8") as fw:
    for line in open(corpus, encoding="utf-8"):
        r = json.loads(line)
        if r.get("template") != "llama3-real" or "output" not in r:
            continue
        v = r["vars"]
        req = {k: v[k] for k in v if k not in ("bos_token", "eos_token")}
        fi.write(json.dumps(req, ensure_ascii=False) + "\n")
        fw.write(json.dumps(r["output"], ensure_ascii=False) + "\n")
        n += 1
if n < 20:
    sys.exit("only %d llama3-real cases" % n)
PY
"$mgrun" tokenize --tokenizer "$tok" --chat --text <"$work/in.jsonl" >"$work/got.txt" ||
	fail "--chat --text exited $?"
python3 - "$work/got.txt" "$work/want.txt" <<'PY' || fails=$((fails + 1))
import json, sys
got = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
want = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
if got != want:
    bad = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), None)
    print("FAIL: %d texts, %d wanted; first difference at line %s" % (len(got), len(want), bad))
    sys.exit(1)
print("ok: %d renderings equal jinja2's" % len(got))
PY
"$mgrun" tokenize --tokenizer "$tok" --chat <"$work/in.jsonl" >"$work/ids.txt" ||
	fail "--chat exited $?"
"$mgrun" tokenize --tokenizer "$tok" --json --no-special <"$work/got.txt" >"$work/ids2.txt" ||
	fail "--json --no-special exited $?"
cmp -s "$work/ids.txt" "$work/ids2.txt" || fail "--chat ids differ from encoding the text"
[ $fails = 0 ] || { echo "$fails failures"; exit 1; }
echo ok
