#!/bin/sh
# chat_cli_test.sh - `mgrun tokenize --chat` as a user meets it, on the
# hand-written SentencePiece-style file with chat templates
# (tests/text/data/chat/tok_*): the rendered text (--text), the ids (the
# template's <s> recognised, no BOS added), tools and add_generation_prompt
# reaching the template, the list-of-templates form ("default" taken), and
# the errors: a template that raises (exit 1, the input line named), one
# that does not parse (exit 2, its line named), no template (exit 2), bad
# input lines (exit 1) and bad usage (exit 2).
#
# usage: chat_cli_test.sh MGRUN DATA_DIR
set -u
mgrun=$1 data=$2/chat
fails=0
# check NAME WANT_RC WANT_STDOUT STDERR_PATTERN INPUT -- ARGS...
check() {
	name=$1 want_rc=$2 want_out=$3 want_err=$4 input=$5
	shift 6
	out=$(printf '%s' "$input" | "$mgrun" tokenize "$@" 2>/tmp/chat_cli.$$)
	rc=$?
	err=$(cat /tmp/chat_cli.$$)
	rm -f /tmp/chat_cli.$$
	if [ "$rc" != "$want_rc" ] || [ "$out" != "$want_out" ] ||
		! printf '%s\n' "$err" | grep -Eq -- "$want_err"; then
		echo "FAIL $name: exit $rc (want $want_rc)"
		echo "  stdout: [$out] want [$want_out]"
		echo "  stderr: [$err] want /$want_err/"
		fails=$((fails + 1))
	else
		echo "ok $name"
	fi
}
nl='
'
u1='{"messages": [{"role": "user", "content": "ab ab"}]}'
u2='{"messages": [{"role": "user", "content": "a"}], "tools": [{"x": 1}, {"y": 2}], "add_generation_prompt": true}'
bad='{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}'
nlc='{"messages": [{"role": "user", "content": "a\nb\"é"}]}'
check text 0 '"<s>ab ab"
"<s>a[2 tools]<gen>"
"<s>a\nb\"é"' "" "$u1$nl$u2$nl$nlc$nl" -- --tokenizer "$data/tok_raise" --chat --text
# the template's <s> is the BOS (1); none is added in front of it
check ids 0 "1 10 10" "" "$u1$nl" -- --tokenizer "$data/tok_raise" --chat
check raises 1 '"<s>ab ab"' "line 2: chat template line 1: Roles must alternate user/assistant" \
	"$u1$nl$bad$nl$u1$nl" -- --tokenizer "$data/tok_raise" --chat --text
check syntax 2 "" "line 1: chat template line 4: expected a filter name" \
	"$u1$nl" -- --tokenizer "$data/tok_syntax" --chat
check no_template 2 "" "line 1: the tokenizer has no chat_template" \
	"$u1$nl" -- --tokenizer "$data/tok_none" --chat --text
check not_object 1 "" "line 1: not a JSON object" '["x"]
' -- --tokenizer "$data/tok_raise" --chat
check no_messages 1 '"<s>ab ab"' 'line 2: no "messages" array' "$u1$nl"'{"msgs": []}
' -- --tokenizer "$data/tok_raise" --chat --text
check bad_agp 1 "" 'line 1: "add_generation_prompt" is not true or false' \
	'{"messages": [], "add_generation_prompt": 1}
' -- --tokenizer "$data/tok_raise" --chat
check nul 1 "" "line 1: a string holds a NUL" '{"messages": [{"role": "user", "content": "a\u0000b"}]}
' -- --tokenizer "$data/tok_raise" --chat
check text_alone 2 "" "--text goes with --chat" "" -- --tokenizer "$data/tok_raise" --text
check chat_decode 2 "" "not with --decode" "" -- --tokenizer "$data/tok_raise" --chat --decode
[ $fails = 0 ] || { echo "$fails failures"; exit 1; }
