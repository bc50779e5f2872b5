#!/bin/sh
# text_files.sh MGRUN REPO WORK - what the text dataset's `files` may
# name, through mgrun with the hand-written tokenizer of tests/text/data
# (no download): a folder a glob matches is left out, but a dangling
# symbolic link, a FIFO (must not block) and a gzip file cut short or
# with a changed byte are each refused with exit 1 naming the file,
# never trained on as a shorter corpus. And the instruct dataset's errors
# read as written (their context added once, not garbled).
set -u
mgrun=$1 repo=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
cat >"$work/t.ini" <<INI
[run]
device = cpu
batch_size = 2
eval_batch_size = 2
max_steps = 1
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
[dataset]
name = text
separator = %
tokenizer = $repo/tests/text/data/sp
seq_len = 16
cache = false
[strategy]
name = single
INI
mkdir "$work/d" "$work/d/sub.txt"
i=0
while [ $i -lt 300 ]; do
	printf 'abc ab %d\n%%\nba ab\n%%\n' $i
	i=$((i + 1))
done >"$work/d/a.txt"
gzip -c "$work/d/a.txt" >"$work/a.txt.gz"
# run NAME FILES: rc in $rc, output in NAME.log
run() {
	timeout 60 "$mgrun" -c "$work/t.ini" --set run.name="$1" \
		--set dataset.dir="$work/d" --set dataset.files="$2" \
		>"$work/$1.log" 2>&1
	rc=$?
}
# bad NAME FILES PATTERN: exit 1 and PATTERN in the output
bad() {
	run "$1" "$2"
	[ $rc -eq 1 ] && grep -q "$3" "$work/$1.log" ||
		fail "$1: exit $rc: $(tail -3 "$work/$1.log")"
}
run good '*.txt'
[ $rc -eq 0 ] || fail "good (a folder among the matches): exit $rc: $(tail -3 "$work/good.log")"
ln -s nowhere.txt "$work/d/gone.txt"
bad dangling '*.txt' "gone.txt: a symbolic link to nothing"
bad dangling_named 'a.txt,gone.txt' "gone.txt: a symbolic link to nothing"
rm "$work/d/gone.txt"
mkfifo "$work/d/fifo.txt"
bad fifo 'a.txt,fifo.txt' "fifo.txt: not a regular file"
rm "$work/d/fifo.txt"
n=$(wc -c <"$work/a.txt.gz")
head -c $((n / 2)) "$work/a.txt.gz" >"$work/d/cut.txt.gz"
bad gzip_cut 'cut.txt.gz' "cut.txt.gz: gzip data ends early"
head -c $((n - 4)) "$work/a.txt.gz" >"$work/d/cut4.txt.gz"
bad gzip_cut_trailer 'cut4.txt.gz' "cut4.txt.gz: gzip data ends early"
cp "$work/a.txt.gz" "$work/d/bad.txt.gz"
printf 'XXXX' | dd of="$work/d/bad.txt.gz" bs=1 seek=$((n - 8)) conv=notrunc 2>/dev/null
bad gzip_crc 'bad.txt.gz' "bad.txt.gz: corrupt gzip data"
cp "$work/a.txt.gz" "$work/d/ok.txt.gz"
run gzip_good 'ok.txt.gz'
[ $rc -eq 0 ] || fail "a whole gzip file: exit $rc: $(tail -3 "$work/gzip_good.log")"
# the instruct dataset's errors with their context added once, not
# formatted into their own buffer (garbled)
printf '{"instruction": "ab", "output": "ba"}\n' >"$work/d/i.jsonl"
sed -e 's/^name = text/name = instruct/' -e '/^separator/d' \
	-e 's/^seq_len = 16/max_seq_len = 8/' "$work/t.ini" >"$work/i.ini"
timeout 60 "$mgrun" -c "$work/i.ini" --set dataset.train="$work/d/i.jsonl" \
	--set dataset.columns=instruction >"$work/cols.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "): instruct: columns: 'instruction' is not field=column" \
	"$work/cols.log" || fail "instruct columns: exit $rc: $(tail -2 "$work/cols.log")"
timeout 60 "$mgrun" -c "$work/i.ini" --set dataset.train="$work/d/i.jsonl" \
	--set dataset.truncation=drop >"$work/drop.log" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "): $work/d/i.jsonl: no sample left: 0 without" \
	"$work/drop.log" || fail "instruct no sample: exit $rc: $(tail -2 "$work/drop.log")"
[ $fails -eq 0 ] || exit 1
echo "text files: all checks passed"
