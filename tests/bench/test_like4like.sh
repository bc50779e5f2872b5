#!/bin/sh
# test_like4like.sh BENCH_DIR TMP - bench/like4like.py's tables without a
# GPU: stand-ins for mgrun and the PyTorch scripts; the ratios against the
# median and the fastest window, "not measured" for a missing driver
# figure, and a failed cell failing the whole call.
set -eu
bench=$1 tmp=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$tmp" && mkdir -p "$tmp"
export MG_L4L_PYTHON="$here/fake_python.sh" MG_L4L_SIZES=28,224 \
	MG_L4L_PRECS=fp32 MG_L4L_COMPILE=224:fp32 \
	MG_L4L_LORA="llama3.2-1b,2,512,qv"
python3 "$bench/like4like.py" "$here/fake_mgrun.sh" "$tmp/ok" >"$tmp/ok.txt"
cat "$tmp/ok.txt"
# mgrun 0.01 s/step, PyTorch 0.02 median, 0.015 fastest window
line() { grep -qxF "$1" "$tmp/ok.txt" || { echo "missing: $1"; exit 1; }; }
line '| 28 | fp32 | 6,400 (6,400-6,400) | 3,200 (2,133-4,267) | **2.00x** | 1.50x | - | not measured (1) | 6 (4 / 2) |'
line '| 224 | fp32 | 6,400 (6,400-6,400) | 3,200 (2,133-4,267) | **2.00x** | 1.50x | 3,200 (2,133-4,267) | not measured (1) | 6 (4 / 2) |'
line '| llama3.2-1b 2x512 qv | 102,400 (102,400-102,400) | 51,200 (34,133-68,267) | **2.00x** | 1.50x | not measured (0.00) | 0.01 (0.00 / 0.00) |'
line 'driver memory: mgrun none; PyTorch nvml-process'
if grep -q "FAILED" "$tmp/ok.txt"; then exit 1; fi
# a QLoRA cell: mgrun only, PyTorch n/a (not a failure)
MG_L4L_LORA="llama3-8b,2,512,qv,nf4" python3 "$bench/like4like.py" \
	"$here/fake_mgrun.sh" "$tmp/nf4" lora >"$tmp/nf4.txt"
grep -qxF '| llama3-8b 2x512 qv nf4 | 102,400 (102,400-102,400) | n/a | n/a | n/a | not measured (0.00) | n/a |' "$tmp/nf4.txt"
# full fine-tuning: one row per mgrun kernels value beside one PyTorch run
MG_L4L_FULL="llama3.2-1b,8,512" MG_L4L_FULL_KERNELS=none,fused \
	python3 "$bench/like4like.py" "$here/fake_mgrun.sh" "$tmp/full" full >"$tmp/full.txt"
cat "$tmp/full.txt"
for k in none fused; do
	grep -qxF "| llama3.2-1b,8,512 | $k | 409,600 (409,600-409,600) | 204,800 (136,533-273,067) | **2.00x** | 1.50x | - | not measured (0.00) | 0.01 (0.00 / 0.00) |" "$tmp/full.txt"
done
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
echo "like4like: ok"
