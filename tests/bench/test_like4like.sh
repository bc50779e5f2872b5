#!/bin/sh
# test_like4like.sh BENCH_DIR TMP - bench/like4like.py's tables without a
# GPU: stand-ins for mgrun and the PyTorch scripts; headline cells pooled
# over several processes a side, the ratios against the median and the
# fastest window, "not measured" for a missing driver figure, and a
# failed cell (or a baseline that could not run its best configuration)
# failing the whole call.
set -eu
bench=$1 tmp=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$tmp" && mkdir -p "$tmp"
export MG_L4L_PYTHON="$here/fake_python.sh" MG_L4L_SIZES=28,224 \
	MG_L4L_PRECS=tf32,bf16 MG_L4L_COMPILE=224:tf32 MG_L4L_HEAD=224:bf16 \
	MG_L4L_LORA="llama3.2-1b,2,512,qv" MG_L4L_CEILING=800
python3 "$bench/like4like.py" "$here/fake_mgrun.sh" "$tmp/ok" mbv2 lora >"$tmp/ok.txt"
cat "$tmp/ok.txt"
# mgrun 0.01 s/step, PyTorch 0.02 median, 0.015 fastest window
line() { grep -qxF "$1" "$2" || { echo "missing in $2: $1"; exit 1; }; }
line '| 28 | tf32 | 6,400 (6,400-6,400) | 6,400 (6,400-6,400) | 3,200 (2,133-4,267) (nchw) | **2.00x** | 1.50x | 3,200 (2,133-4,267) | - | not measured (1) | 6 (4 / 2) |' "$tmp/ok.txt"
line '| 224 | tf32 | 6,400 (6,400-6,400) | 6,400 (6,400-6,400) | 3,200 (2,133-4,267) (nchw) | **2.00x** | 1.50x | 3,200 (2,133-4,267) | 3,200 (2,133-4,267) | not measured (1) | 6 (4 / 2) |' "$tmp/ok.txt"
# a headline cell: three processes a side, each one's median listed
line '| 224 | bf16 | 6,400 (6,400-6,400) [6,400 / 6,400 / 6,400] | 6,400 (6,400-6,400) | 3,200 (2,133-4,267) [3,200 / 3,200 / 3,200] (nhwc) | **2.00x** | 1.50x | 3,200 (2,133-4,267) | - | not measured (1) | 6 (4 / 2) |' "$tmp/ok.txt"
[ "$(ls "$tmp/ok" | grep -c '^l4l_mbv2_224_bf16_static_[0-9]$')" = 3 ]
[ "$(ls "$tmp/ok" | grep -c '^torch_graph_224_bf16_nhwc_[0-9].log$')" = 3 ]
# fp32 tries both layouts on PyTorch's side
line 'PyTorch graphed, the slower layout (img/s, one process): 28 px tf32: nhwc 3200; 224 px tf32: nhwc 3200' "$tmp/ok.txt"
grep -q -- '--set run.tf32=true' "$tmp/ok/l4l_mbv2_28_tf32_static_0.args"
grep -q -- '--set run.static_batch=false' "$tmp/ok/l4l_mbv2_28_tf32_pipeline.args"
# LoRA: MFU of 989 and of the call's ceiling (4 x 1.03e9 frozen weights
# + attention, at 51,200 and 102,400 tok/s)
line '| llama3.2-1b 2x512 qv | 102,400 (102,400-102,400) | 51,200 (34,133-68,267) (flash) | **2.00x** | 1.50x | 51,200 (34,133-68,267) | 52.2% / 65% | 26.1% / 32% | not measured (0.00) | 0.01 (0.00 / 0.00) |' "$tmp/ok.txt"
line 'driver memory: mgrun none; PyTorch nvml-process' "$tmp/ok.txt"
if grep -q "FAILED" "$tmp/ok.txt"; then exit 1; fi
# a QLoRA cell: mgrun only, PyTorch n/a (not a failure)
MG_L4L_LORA="llama3-8b,2,512,qv,nf4" python3 "$bench/like4like.py" \
	"$here/fake_mgrun.sh" "$tmp/nf4" lora >"$tmp/nf4.txt"
grep -q '^| llama3-8b 2x512 qv nf4 | 102,400 (102,400-102,400) | n/a | n/a | n/a | n/a | ' "$tmp/nf4.txt"
# full fine-tuning: compiled (pooled in a headline cell) and eager rows
MG_L4L_FULL="llama3.2-1b,8,512" MG_L4L_FULL_KERNELS=none,fused \
	python3 "$bench/like4like.py" "$here/fake_mgrun.sh" "$tmp/full" full >"$tmp/full.txt"
cat "$tmp/full.txt"
for k in none fused; do
	grep -qF "| llama3.2-1b,8,512 | $k | 409,600 (409,600-409,600) [409,600 / 409,600 / 409,600] | 204,800 (136,533-273,067) [204,800 / 204,800 / 204,800] (flash) | **2.00x** | 1.50x | 204,800 (136,533-273,067) |" "$tmp/full.txt"
done
[ "$(ls "$tmp/full" | grep -c '_compile_[0-9].log$')" = 3 ]
# MG_L4L_EAGER=0: no eager LLM row ("-"), the compiled one still there
MG_L4L_EAGER=0 MG_L4L_REPEATS=1 MG_L4L_LORA="llama3.2-1b,2,512,qv" python3 "$bench/like4like.py" \
	"$here/fake_mgrun.sh" "$tmp/noeager" lora >"$tmp/noeager.txt"
grep -q '^| llama3.2-1b 2x512 qv | 102,400 (102,400-102,400) | 51,200 (34,133-68,267) (flash) | \*\*2.00x\*\* | 1.50x | - | ' "$tmp/noeager.txt"
[ "$(ls "$tmp/noeager" | grep -c '_eager.log$')" = 0 ]
grep -q ' compile$' "$tmp/full/torch_l4l_full_llama3.2-1b_8x512_compile_0.args"
if MG_L4L_FULL="fail,8,512" MG_L4L_FULL_KERNELS=none python3 "$bench/like4like.py" \
	"$here/fake_mgrun.sh" "$tmp/fullbad" full >"$tmp/fullbad.txt" 2>&1; then
	echo "a failed full cell exited 0"; exit 1
fi
grep -q '^FAILED: full fail,8,512 mgrun none: mgrun exit 3' "$tmp/fullbad.txt"
# a failed mgrun cell: FAILED in the table, exit status 1
if MG_L4L_LORA="fail,2,512,qv" python3 "$bench/like4like.py" \
	"$here/fake_mgrun.sh" "$tmp/bad" lora >"$tmp/bad.txt" 2>&1; then
	echo "a failed cell exited 0"; exit 1
fi
grep -q '^| fail 2x512 qv | FAILED |' "$tmp/bad.txt"
grep -q '^FAILED: lora fail,2,512,qv mgrun: mgrun exit 3' "$tmp/bad.txt"
# a baseline that cannot run its best configuration (the graph capture
# failed): the cell fails with its reason, no eager stand-in
if MG_FAKE_TORCH_ERROR="graph capture failed" MG_L4L_SIZES=28 MG_L4L_PRECS=bf16 \
	python3 "$bench/like4like.py" "$here/fake_mgrun.sh" "$tmp/cap" mbv2 >"$tmp/cap.txt" 2>&1; then
	echo "a failed graph capture exited 0"; exit 1
fi
grep -q '^| 28 | bf16 | .* | FAILED | - | - |' "$tmp/cap.txt"
grep -q '^FAILED: mbv2 28 bf16 torch: torch_mbv2_l4l.py exit 1: graph capture failed' "$tmp/cap.txt"
echo "like4like: ok"
