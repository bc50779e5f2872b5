#!/bin/sh
# qat.sh MGRUN INI WORK - quantization-aware training end to end
# (conf/llama_tiny_qat.ini): the tiny llama trains with qat = 8da4w and
# learns; fake quantization changes its loss (the same checkpoint
# evaluated with qat = none differs); `mgrun export --dtype int4` writes
# the projections as packed int4 with f32 group scales (names, dtypes,
# shapes, metadata checked); `--eval-only` with quant = int4 on that
# folder gives the QAT run's held-out loss within 0.01 (embedding, norms
# and head are exported in bf16); `mgrun generate` decodes both; the
# option errors.
set -eu
mgrun=$1 ini=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
set -- --set run.out_dir="$work" --set run.threads=2 --set run.log_every=10
fail() {
	echo "FAIL: $*"
	exit 1
}
loss_of() { sed -n 's/.*test loss \([0-9.]*\) .*/\1/p' "$1" | tail -1; }
"$mgrun" -c "$ini" "$@" --set run.name=q --set run.max_steps=30 \
	>"$work/train.log" 2>&1 || {
	cat "$work/train.log"
	fail "qat training"
}
grep -q "qat = 8da4w" "$work/train.log" || fail "no qat line"
"$mgrun" -c "$ini" "$@" --set run.name=q --eval-only >"$work/eval.log" 2>&1 ||
	fail "eval-only"
"$mgrun" -c "$ini" "$@" --set run.name=q --eval-only --set model.qat=none \
	>"$work/eval_fp.log" 2>&1 || fail "eval-only without qat"
lq=$(loss_of "$work/eval.log")
lf=$(loss_of "$work/eval_fp.log")
echo "QAT run: held-out loss $lq with fake quantization, $lf without"
awk -v a="$lq" 'BEGIN { exit !(a < 4.5) }' || fail "did not learn ($lq)"
[ "$lq" != "$lf" ] || fail "fake quantization changed nothing"
"$mgrun" export -c "$ini" "$@" --set run.name=q --out "$work/q4" \
	--dtype int4 >"$work/export.log" 2>&1 || {
	cat "$work/export.log"
	fail "export --dtype int4"
}
python3 - "$work/q4/model.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h.pop("__metadata__")
assert meta["quantization"] == "8da4w" and meta["int4_group_size"] == "32", meta
D, qd, kvd, I = 64, 64, 32, 192
for l in range(2):
    for name, (o, i) in {"self_attn.q_proj": (qd, D), "self_attn.k_proj": (kvd, D),
                         "self_attn.v_proj": (kvd, D), "self_attn.o_proj": (D, qd),
                         "mlp.gate_proj": (I, D), "mlp.up_proj": (I, D),
                         "mlp.down_proj": (D, I)}.items():
        p = f"model.layers.{l}.{name}.weight"
        assert p not in h, p
        q, s = h[p + "_int4"], h[p + "_scales"]
        assert q["dtype"] == "U8" and q["shape"] == [o, i // 2], (p, q)
        assert s["dtype"] == "F32" and s["shape"] == [o, i // 32], (p, s)
        # every scale is positive and finite
        s0, s1 = s["data_offsets"]
        sc = struct.unpack(f"<{(s1 - s0) // 4}f", b[8 + n + s0:8 + n + s1])
        assert all(0 < x < 1e30 for x in sc), p
    assert h[f"model.layers.{l}.input_layernorm.weight"]["dtype"] == "BF16"
assert h["model.embed_tokens.weight"]["dtype"] == "BF16"
print("int4 folder: names, dtypes, shapes and metadata as documented")
PY
"$mgrun" -c "$ini" "$@" --set run.name=i4 --eval-only --set model.qat=none \
	--set model.quant=int4 --set model.hf_dir="$work/q4" \
	>"$work/eval_i4.log" 2>&1 || {
	cat "$work/eval_i4.log"
	fail "eval of the int4 folder"
}
grep -q "quant = int4" "$work/eval_i4.log" || fail "no int4 line"
l4=$(loss_of "$work/eval_i4.log")
echo "int4 folder with quant = int4: held-out loss $l4 (QAT run: $lq)"
awk -v a="$l4" -v b="$lq" 'BEGIN { d = a - b; exit !(d < 0.01 && d > -0.01) }' ||
	fail "int4 eval loss $l4 is not the QAT loss $lq"
# mgrun generate decodes with the training forward's fake quantization
# (tests/llama decode checks the numbers): greedy ids of the QAT run, and
# of the int4 folder with quant = int4
P="5 17 42 99 3"
"$mgrun" generate -c "$ini" "$@" --set run.name=q --ids --prompt "$P" \
	--greedy --max-new-tokens 16 >"$work/gen_q.out" 2>"$work/gen_q.err" || {
	cat "$work/gen_q.err"
	fail "generate on the QAT run"
}
"$mgrun" generate -c "$ini" "$@" --set run.name=i4 --set model.qat=none \
	--set model.quant=int4 --set model.hf_dir="$work/q4" --ids \
	--prompt "$P" --greedy --max-new-tokens 16 >"$work/gen_i4.out" \
	2>"$work/gen_i4.err" || {
	cat "$work/gen_i4.err"
	fail "generate on the int4 folder"
}
for g in gen_q gen_i4; do
	[ "$(wc -w <"$work/$g.out")" -eq 16 ] || fail "$g: $(cat "$work/$g.out")"
done
echo "greedy ids: QAT run $(cat "$work/gen_q.out"); int4 folder $(cat "$work/gen_i4.out")"
# refusals, each naming the conflict
expect_err() {
	msg=$1
	shift
	if "$mgrun" -c "$ini" "$@" --print-config >"$work/err.log" 2>&1 &&
		"$mgrun" -c "$ini" "$@" --set run.name=err --set run.max_steps=1 \
			>>"$work/err.log" 2>&1; then
		fail "accepted: $*"
	fi
	grep -q "$msg" "$work/err.log" || {
		cat "$work/err.log"
		fail "no '$msg' for: $*"
	}
}
expect_err "qat_group 48 does not divide" "$@" --set model.qat_group=48
expect_err "quant = nf4 stores them" "$@" --set model.quant=nf4 \
	--set model.lora_rank=4
expect_err "set hf_dir" "$@" --set model.qat=none --set model.quant=int4
expect_err "none|8da4w\|none, 8da4w\|8da4w" "$@" --set model.qat=int4
echo "OK"
