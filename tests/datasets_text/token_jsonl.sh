#!/bin/sh
# token_jsonl.sh MGRUN WORK - hostile token_jsonl files through mgrun (a
# one-layer llama, one step): each is refused with exit 1 and a message
# naming the file and line (or byte of the line) and what is wrong, in
# under 20 s (a FIFO must not block); good files, with blank and CRLF
# lines and an id just below vocab_size, still train. Among them the
# regressions of the reader's fixes: 2147483647 (an int overflow made the
# vocabulary 4), two objects on one line (the second silently dropped),
# a NUL byte (the rest of the line dropped), 1e30 (an out-of-range
# conversion), labels that leave no token with loss (a NaN loss called
# divergence), ids and labels past vocab_size (not located).
set -u
mgrun=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
cases=0
. "$(dirname "$0")/../common/fail.sh"
cat >"$work/base.ini" <<INI
[run]
precision = fp32
epochs = 1
max_steps = 1
batch_size = 1
eval_batch_size = 4
threads = 1
seed = 3
out_dir = $work/runs
[optimizer]
name = adamw
lr = 0.01
[model]
name = llama
preset = tiny
num_layers = 1
hidden_size = 16
num_heads = 4
num_kv_heads = 2
intermediate_size = 24
vocab_size = 64
[dataset]
name = token_jsonl
train = $work/good.jsonl
seq_len = 16
[strategy]
name = single
INI
# run NAME ARGS...: mgrun on base.ini; rc in $rc, output in NAME.log
run() {
	name=$1
	shift
	timeout 20 "$mgrun" -c "$work/base.ini" --set run.name="$name" "$@" \
		>"$work/$name.log" 2>&1
	rc=$?
}
# bad NAME PATTERN [ARGS...]: NAME.jsonl as the training file must give
# exit 1 and a message matching PATTERN (grep's basic regex) that names
# the file
bad() {
	name=$1 pattern=$2
	shift 2
	cases=$((cases + 1))
	run "$name" --set dataset.train="$work/$name.jsonl" "$@"
	[ $rc -eq 1 ] || fail "$name: exit $rc, not 1: $(tail -3 "$work/$name.log")"
	grep -q "$work/$name.jsonl[:]* *$pattern" "$work/$name.log" ||
		fail "$name: no '$name.jsonl $pattern': $(tail -3 "$work/$name.log")"
	grep -q "Sanitizer\|runtime error" "$work/$name.log" &&
		fail "$name: sanitizer report: $(cat "$work/$name.log")"
	echo "$name: $(grep -m1 "$name.jsonl" "$work/$name.log" | sed 's/.*so): //')"
}
good='{"input_ids": [1, 2, 3, 4]}'
# good files train: blank lines, CRLF, labels with -100, position_ids,
# an id and a label of 63 under vocab_size 64
{
	echo "$good"
	echo
	printf '{"input_ids": [5, 6, 63], "labels": [-100, 6, 63]}\r\n'
	echo '{"input_ids": [1, 2, 3, 4], "position_ids": [0, 1, 0, 1]}'
} >"$work/good.jsonl"
run good --set dataset.vocab_size=64
[ $rc -eq 0 ] || fail "good file: exit $rc: $(tail -3 "$work/good.log")"

# ids
printf '%s\n{"input_ids": [1, "2", 3]}\n' "$good" >"$work/ids_string.jsonl"
bad ids_string ':2: input_ids\[1\] is not a non-negative integer'
echo '{"input_ids": [1, 2.5, 3]}' >"$work/ids_float.jsonl"
bad ids_float ':1: input_ids\[1\] is not a non-negative integer'
echo '{"input_ids": [1, -3, 3]}' >"$work/ids_negative.jsonl"
bad ids_negative ':1: input_ids\[1\] is not a non-negative integer'
echo '{"input_ids": [1, -100, 3]}' >"$work/ids_ignore.jsonl"
bad ids_ignore ':1: input_ids\[1\] is not a non-negative integer'
printf '%s\n%s\n{"input_ids": [1, 64]}\n' "$good" "$good" >"$work/ids_vocab.jsonl"
bad ids_vocab ':3: input_ids\[1\] is 64, not below vocab_size 64' \
	--set dataset.vocab_size=64
echo '{"input_ids": [1, 2, 3, 2147483647]}' >"$work/ids_int32max.jsonl"
bad ids_int32max ':1: input_ids\[3\] is 2147483647, not below the largest vocab_size 16777216'
echo '{"input_ids": [1, 1e30]}' >"$work/ids_huge.jsonl"
bad ids_huge ':1: input_ids\[1\] is 1e+30, not below the largest vocab_size 16777216'
echo '{"input_ids": [1, 99999999999999999999999999999999999999]}' \
	>"$work/ids_digits.jsonl"
bad ids_digits ':1: input_ids\[1\] is 9.9999999999999998e+37, not below the largest vocab_size'
# labels
echo '{"input_ids": [1, 2, 3], "labels": [-100, 2]}' >"$work/labels_short.jsonl"
bad labels_short ':1: "labels" is not an array as long as "input_ids" (3)'
echo '{"input_ids": [1, 2], "labels": [-100, 2, 3]}' >"$work/labels_long.jsonl"
bad labels_long ':1: "labels" is not an array as long as "input_ids" (2)'
echo '{"input_ids": [1, 2, 3], "labels": 7}' >"$work/labels_scalar.jsonl"
bad labels_scalar ':1: "labels" is not an array as long as "input_ids" (3)'
echo '{"input_ids": [1, 2, 3], "labels": [-100, -1, 3]}' >"$work/labels_negative.jsonl"
bad labels_negative ':1: labels\[1\] is not a token id or -100'
echo '{"input_ids": [1, 2, 3], "labels": [-100, 2, 70]}' >"$work/labels_vocab.jsonl"
bad labels_vocab ':1: labels\[2\] is 70, not below vocab_size 64' \
	--set dataset.vocab_size=64
echo '{"input_ids": [1, 2, 3], "labels": [-100, null, 3]}' >"$work/labels_null.jsonl"
bad labels_null ':1: labels\[1\] is not a token id or -100'
# position_ids
echo '{"input_ids": [1, 2, 3], "position_ids": [0, 1]}' >"$work/pos_length.jsonl"
bad pos_length ':1: "position_ids" is not an array as long as "input_ids" (3)'
echo '{"input_ids": [1, 2, 3], "position_ids": [0, 1, 3]}' >"$work/pos_skip.jsonl"
bad pos_skip ':1: position_ids\[2\] is 3: a document starts at 0 and counts up by one'
echo '{"input_ids": [1, 2, 3], "position_ids": [1, 2, 3]}' >"$work/pos_start.jsonl"
bad pos_start ':1: position_ids\[0\] is 1: a document starts at 0'
echo '{"input_ids": [1, 2, 3], "position_ids": [0, 2, 1]}' >"$work/pos_down.jsonl"
bad pos_down ':1: position_ids\[1\] is 2: a document starts at 0'
echo '{"input_ids": [1, 2, 3], "position_ids": [0, -1, 0]}' >"$work/pos_negative.jsonl"
bad pos_negative ':1: position_ids\[1\] is not a non-negative integer'
# rows and lines
: >"$work/empty.jsonl"
bad empty 'has no rows'
printf '\n  \n\r\n' >"$work/blank.jsonl"
bad blank 'has no rows'
printf '%s\n{"input_ids": []}\n' "$good" >"$work/row_empty.jsonl"
bad row_empty ':2: not an object with a non-empty "input_ids" array'
printf '%s\n{}\n' "$good" >"$work/row_noids.jsonl"
bad row_noids ':2: not an object with a non-empty "input_ids" array'
printf '%s\n[1, 2, 3]\n' "$good" >"$work/row_array.jsonl"
bad row_array ':2: not an object with a non-empty "input_ids" array'
printf '%s\nhello\n' "$good" >"$work/not_json.jsonl"
bad not_json ':2: not JSON (at byte 1 of the line)'
printf '%s\n%s\n{"input_ids": [1, 2' "$good" "$good" >"$work/truncated.jsonl"
bad truncated ':3: not JSON (at byte 20 of the line, the last, which has no newline: cut short?)'
printf '{"input_ids": [1, 2]}{"input_ids": [3, 4]}\n' >"$work/two_objects.jsonl"
bad two_objects ':1: not JSON (at byte 22 of the line)'
printf '{"input_ids": [1, 2]}\000{"input_ids": [3, 4]}\n' >"$work/nul.jsonl"
bad nul ':1: a NUL byte at byte 22 of the line'
# a line far longer than any row the run keeps (seq_len 16): refused
# before it is parsed (a 24 MB line peaked at 1 GB), with or without its
# newline; a row 4 times seq_len is still read and cut (in the training
# and the held-out split: the same file)
python3 -c 'print("{\"input_ids\": [1, 2, 3]}"); print("{\"input_ids\": [" + ", ".join(["7"] * 100000) + "]}")' \
	>"$work/line_huge.jsonl"
bad line_huge ':2: a line of more than 75776 bytes: longer than 16 times seq_len 16'
python3 -c 'import sys; sys.stdout.write("{\"input_ids\": [" + "1, " * 3000000)' \
	>"$work/line_endless.jsonl"
bad line_endless ':1: a line of more than 75776 bytes'
python3 -c 'print("{\"input_ids\": [" + ", ".join(str(i % 60 + 1) for i in range(64)) + "]}")' \
	>"$work/row_long.jsonl"
cases=$((cases + 1))
run row_long --set dataset.train="$work/row_long.jsonl"
[ $rc -eq 0 ] && grep -q "2 rows cut to seq_len 16" "$work/row_long.log" ||
	fail "row_long: exit $rc: $(tail -3 "$work/row_long.log")"
# no token carries loss: refused, not trained to a NaN loss
printf '{"input_ids": [1, 2, 3], "labels": [-100, -100, -100]}\n{"input_ids": [4]}\n' \
	>"$work/no_loss.jsonl"
bad no_loss ': no label counts (2 rows, every label -100 or every row one token)'
# not regular files: a folder, a FIFO (must not block), a missing file
mkdir "$work/folder.jsonl"
bad folder ': not a regular file'
mkfifo "$work/fifo.jsonl"
bad fifo ': not a regular file'
bad missing ': No such file or directory'
# a bad held-out file is named too, the training file being good
cases=$((cases + 1))
run bad_test --set dataset.test="$work/ids_string.jsonl"
[ $rc -eq 1 ] && grep -q "ids_string.jsonl:2: input_ids\[1\]" "$work/bad_test.log" ||
	fail "bad test file: exit $rc: $(tail -3 "$work/bad_test.log")"

echo "$cases hostile files"
[ $fails -eq 0 ] || {
	echo "$fails failures"
	exit 1
}
echo "PASS: token_jsonl"
