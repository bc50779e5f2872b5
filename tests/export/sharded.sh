#!/bin/sh
# sharded.sh MGRUN REPO WORK - `mgrun export --max-shard-size` on tiny
# llamas (CPU): sharded folders (model-0000k-of-0000N.safetensors and
# model.safetensors.index.json) checked by shard_check.py against the
# one-file export of the same run (every tensor mapped to the one file
# holding it, none split, total_size, bit-identical tensors in the same
# order, files filled as save_pretrained fills them, a tensor larger than
# the size alone in its file, bitsandbytes companions beside their
# weight); loaded back through model.hf_dir they evaluate to the run's
# own loss (fp32 exactly; an NF4 export with quant = nf4 exactly, as its
# one-file export does); a re-export over a folder leaves no stale file
# of the other layout; bad sizes are refused with exit 2 and a message.
set -u
mgrun=$1 repo=$2 work=$3
ini=$repo/conf/llama_tiny.ini
check="python3 $repo/tests/export/shard_check.py"
rm -rf "$work"
mkdir -p "$work"
. "$(dirname "$0")/../common/fail.sh"
B="--set run.out_dir=$work --set run.threads=2 --set run.max_steps=4"
B="$B --set dataset.train_samples=128 --set dataset.test_samples=16"
loss() { sed -n 's/.*"loss": *\([-0-9.e+]*\).*/\1/p' "$work/$1/eval.json"; }
run() { # run LOG ARGS...: mgrun ARGS; output in LOG.log, rc
	log=$1
	shift
	"$mgrun" "$@" >"$work/$log.log" 2>&1
	rc=$?
}
# export NAME ARGS...: export run t into NAME (rc, NAME.log)
export_t() {
	name=$1
	shift
	# shellcheck disable=SC2086
	run "x_$name" export -c "$ini" $B --set run.name=t "$@" \
		--out "$work/$name"
	[ $rc -eq 0 ] || fail "export $name: $(tail -3 "$work/x_$name.log")"
}
# evaluate NAME: run t's data through model.hf_dir=NAME; its loss
evaluate() {
	# shellcheck disable=SC2086
	run "e_$1" -c "$ini" $B --set run.name="e_$1" \
		--set model.hf_dir="$work/$1" --eval-only
	[ $rc -eq 0 ] || fail "eval $1: $(tail -3 "$work/e_$1.log")"
	loss "e_$1"
}

# shellcheck disable=SC2086
run t -c "$ini" $B --set run.name=t
[ $rc -eq 0 ] || fail "training: $(tail -3 "$work/t.log")"
# shellcheck disable=SC2086
run te -c "$ini" $B --set run.name=t --eval-only
lt=$(loss t)
export_t one
[ -f "$work/one/model.safetensors" ] &&
	[ ! -e "$work/one/model.safetensors.index.json" ] ||
	fail "default size: not one model.safetensors: $(ls "$work/one")"
# 40 kB: 3+ files, the 64 kB embedding and head alone in theirs; 1 byte:
# every tensor alone; 100 KiB: files of several tensors
for s in 40KB:40000 1:1 100KiB:102400; do
	arg=${s%%:*} bytes=${s#*:}
	export_t "s$bytes" --max-shard-size "$arg"
	grep -q "model.safetensors.index.json" "$work/x_s$bytes.log" &&
		grep -q "model-00001-of-" "$work/x_s$bytes.log" ||
		fail "$arg: the files written are not said: $(cat "$work/x_s$bytes.log")"
	$check "$work/one" "$work/s$bytes" "$bytes" 3 || fail "$arg: layout"
	l=$(evaluate "s$bytes")
	echo "$arg: run loss $lt, sharded export $l"
	[ -n "$lt" ] && [ "$lt" = "$l" ] || fail "$arg: loss $l, the run's $lt"
done
grep -q '"model.embed_tokens.weight": "model-00001-of-' \
	"$work/s40000/model.safetensors.index.json" &&
	[ "$(grep -c 'model-00001-of-' "$work/s40000/model.safetensors.index.json")" = 1 ] ||
	fail "40KB: the embedding (64 kB) is not alone in the first file"

# re-exports: over the same layout, over another shard count and over
# the other layout leave nothing stale
export_t s40000 --max-shard-size 40KB
$check "$work/one" "$work/s40000" 40000 3 || fail "re-export: layout"
export_t s1 --max-shard-size 40KB
$check "$work/one" "$work/s1" 40000 3 || fail "1 -> 40KB: stale shards"
export_t s40000 --max-shard-size 5GB
[ "$(ls "$work/s40000")" = "config.json
model.safetensors" ] || fail "sharded -> one file: left $(ls "$work/s40000")"
cmp -s "$work/one/model.safetensors" "$work/s40000/model.safetensors" ||
	fail "one file written twice differs"
# what a killed export leaves (shards before their rename, temporary
# files of a write) is removed by the next export into the folder; a
# user's file of another name is not
for f in model-00007.safetensors.part model-00002.safetensors.part.tmp \
	model.safetensors.tmp model.safetensors.index.json.tmp notes.part; do
	echo x >"$work/s40000/$f"
done
export_t s40000 --max-shard-size 40KB
$check "$work/one" "$work/s40000" 40000 3 || fail "after a kill: layout"
[ "$(cd "$work/s40000" && ls | grep -c '\.part\|\.tmp')" = 1 ] &&
	[ -e "$work/s40000/notes.part" ] ||
	fail "after a kill: left $(ls "$work/s40000")"
export_t one2 --max-shard-size 2GB
mv "$work/one2/model.safetensors" "$work/one2/stale"
export_t one2 --max-shard-size 30000
[ -e "$work/one2/model.safetensors" ] && fail "one file -> sharded: left model.safetensors"

# NF4 (bitsandbytes): a float base exported in bf16, a QLoRA run on it
# (quant = nf4, a head adapter that does not move), exported --dtype nf4
# in one file and in 3000-byte shards (each projection's group, ~3.4 kB
# with its companions, alone and whole)
Q="--set model.hf_dir=$work/b0 --set model.quant=nf4"
Q="$Q --set model.lora_rank=4 --set model.lora_targets=head --set optimizer.lr=0"
export_t b0 --dtype bf16
# shellcheck disable=SC2086
run q -c "$ini" $B $Q --set run.name=q
[ $rc -eq 0 ] || fail "QLoRA run: $(tail -3 "$work/q.log")"
# shellcheck disable=SC2086
run qe -c "$ini" $B $Q --set run.name=q --eval-only
lq=$(loss q)
for s in 5GB:nf4one 3000:nf4s; do
	# shellcheck disable=SC2086
	run "x_${s#*:}" export -c "$ini" $B $Q --set run.name=q --dtype nf4 \
		--max-shard-size "${s%%:*}" --out "$work/${s#*:}"
	[ $rc -eq 0 ] || fail "export nf4 ${s%%:*}: $(tail -3 "$work/x_${s#*:}.log")"
	# shellcheck disable=SC2086
	run "e_${s#*:}" -c "$ini" $B $Q --set model.hf_dir="$work/${s#*:}" \
		--set run.name="e_${s#*:}" --eval-only
	l=$(loss "e_${s#*:}")
	echo "nf4 ${s%%:*}: QLoRA run loss $lq, export $l"
	[ -n "$lq" ] && [ "$lq" = "$l" ] || fail "nf4 ${s%%:*}: loss $l, the run's $lq"
done
$check "$work/nf4one" "$work/nf4s" 3000 3 || fail "nf4: layout"
grep -q '"model.layers.0.self_attn.q_proj.weight.absmax"' \
	"$work/nf4s/model.safetensors.index.json" || fail "nf4: no absmax mapped"

# bad sizes: exit 2, a message naming the value, nothing written
for v in 0 -1 5XB GB 1.5GB "5 GB" "" 0x100 18446744073709551616 20000000TB; do
	# shellcheck disable=SC2086
	"$mgrun" export -c "$ini" $B --set run.name=t --out "$work/bad" \
		--max-shard-size "$v" >/dev/null 2>"$work/bad.err"
	rc=$?
	[ $rc -eq 2 ] && grep -q -- "--max-shard-size '$v'" "$work/bad.err" ||
		fail "--max-shard-size '$v': exit $rc: $(cat "$work/bad.err")"
	[ -e "$work/bad" ] && fail "--max-shard-size '$v': wrote $work/bad"
done

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "export sharded: all passed"
