#!/bin/sh
# test_bench_scripts.sh BENCH_DIR TMP - the multi-GPU benchmark scripts
# without GPUs: bench/sharding.sh and bench/ddp_scaling.sh against a
# stand-in mgrun and a stand-in `python3 -m torch.distributed.run` (every
# other python3 call is the real one); their tables, and a failed run
# reaching their exit status (scripts/gpu.sh passes it on).
set -eu
bench=$1 tmp=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$tmp" && mkdir -p "$tmp/bin"
py=$(command -v python3)
cat >"$tmp/bin/python3" <<PY
#!/bin/sh
# torchrun: one JSON line as bench/torch_fsdp_mbv2.py prints
if [ "\$1" = "-m" ]; then
	echo '{"img_s_total": {"median": 1000, "min": 900, "max": 1250, "p10": 910, "p90": 1200}, "policy": "MixedPrecisionPolicy(bf16, reduce bf16)", "driver_peak_rank": 8388608, "max_reserved_rank": 4194304, "max_allocated_rank": 3145728}'
	exit 0
fi
exec "$py" "\$@"
PY
chmod +x "$tmp/bin/python3"
export PATH="$tmp/bin:$PATH" MG_BENCH_STEPS=20 MG_BENCH_PRECISIONS=bf16 \
	MG_BENCH_SIZES=224
fake=$here/fake_mgrun_dist.sh
line() { grep -qxF "$2" "$1" || { echo "missing in $1: $2"; exit 1; }; }

bash "$bench/sharding.sh" "$fake" /nonexistent "$tmp/shard" 4 >"$tmp/shard.txt"
# 0.02 s a step on 4 GPUs = 12,800 img/s; PyTorch 1,000 (fastest 1,250)
line "$tmp/shard.txt" '| bf16 | fsdp_full | 12,800 (12,800-12,800) | 9.0 (2.0) | 1.0 | 0.0 | 0.0 | 0.0 | 0.0 | 32.0 | 0.0 | 1,000 (900-1,250) (full, MixedPrecisionPolicy(bf16, reduce bf16)) | 8.0 (4.0 / 3.0) | 12.80x | 10.24x |'
if MG_FAKE_FAIL=shard_offload_bf16 bash "$bench/sharding.sh" "$fake" \
	/nonexistent "$tmp/shard2" 4 >"$tmp/shard2.txt" 2>&1; then
	echo "sharding.sh: a failed mgrun run exited 0"; exit 1
fi
line "$tmp/shard2.txt" '| bf16 | offload | FAILED |'

bash "$bench/ddp_scaling.sh" "$fake" /nonexistent "$tmp/scale" 1 2 >"$tmp/scale.txt"
line "$tmp/scale.txt" '| 224 | 2 | ddp_ds | 20.00 | 6400 | 100.0% | 6.40x | 5.12x | 100 | 0.500 | 0.100 |'
line "$tmp/scale.txt" '| 224 | 2 | PyTorch DDP | - | 1000.0 (fastest window 1250.0) | 16% of mgrun 1-GPU x N | 1 | - | - | - | - |'
if MG_FAKE_FAIL=scale_ddp_rr_2_224 bash "$bench/ddp_scaling.sh" "$fake" \
	/nonexistent "$tmp/scale2" 1 2 >"$tmp/scale2.txt" 2>&1; then
	echo "ddp_scaling.sh: a failed mgrun run exited 0"; exit 1
fi
grep -q "^224 2 ddp_rr FAILED (exit 3)" "$tmp/scale2.txt"
echo "bench scripts: ok"
