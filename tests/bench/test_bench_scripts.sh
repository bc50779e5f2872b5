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
# torchrun: one JSON line as bench/torch_fsdp_mbv2.py and
# bench/torch_fsdp_llm.py print (the keys of both); out of memory when
# MG_FAKE_TORCH_OOM names the mode
if [ "\$1" = "-m" ]; then
	echo "REDUCE=\${REDUCE:-} \$*" >>"$tmp/torch_calls"
	for a; do case \$a in "\${MG_FAKE_TORCH_OOM:-none}")
		echo "torch.OutOfMemoryError: CUDA out of memory." >&2; exit 1 ;; esac; done
	echo '{"img_s_total": {"median": 1000, "min": 900, "max": 1250, "p10": 910, "p90": 1200}, "tok_s_gpu": {"median": 1000, "min": 900, "max": 1250, "p10": 910, "p90": 1200}, "params": 2000000000, "policy": "MixedPrecisionPolicy(bf16, reduce bf16)", "driver_peak_rank": 8388608, "max_reserved_rank": 4194304, "max_allocated_rank": 3145728}'
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
line "$tmp/scale.txt" '| 224 | 2 | ddp_ds | 20.00 | 6400 (6400-6400) | 100.0% | 6.40x | 5.12x | 100 | 0.500 | 0.100 |'
line "$tmp/scale.txt" '| 224 | 2 | PyTorch DDP | - | 1000.0 (fastest window 1250.0) | 16% of mgrun 1-GPU x N | 1 | - | - | - | - |'
if MG_FAKE_FAIL=scale_ddp_rr_2_224 bash "$bench/ddp_scaling.sh" "$fake" \
	/nonexistent "$tmp/scale2" 1 2 >"$tmp/scale2.txt" 2>&1; then
	echo "ddp_scaling.sh: a failed mgrun run exited 0"; exit 1
fi
grep -q "^224 2 ddp_rr FAILED (exit 3)" "$tmp/scale2.txt"
# fsdp_llm.sh: 13 steps of 0.02 s, 8 x 512 tokens a GPU = 204,800
# tok/s per GPU; 6 x 1e9 parameters (mgrun's report) x that = 1,229
# TFLOP/s, 154% of the stand-in's 800 TFLOP/s ceiling
cat >"$tmp/bin/gemm" <<'G'
#!/bin/sh
echo "GEMM ceiling bf16: 800 TFLOP/s"
G
chmod +x "$tmp/bin/gemm"
BENCH_GPU_OPS=$tmp/bin/gemm MG_FAKE_TORCH_OOM=ddp \
	MG_FSDP_LLM_MODES="full full_ubw grad_op hybrid offload none" \
	bash "$bench/fsdp_llm.sh" "$fake" "$tmp/llm" 4 >"$tmp/llm.txt"
line "$tmp/llm.txt" '| full (full) | 8 | 204,800 (204,800-204,800) | 1229 | 154% | 0.0 (0.0) | 0.0 | 0.0 | 0.0 | 0.0 (3.0) | 1,000 (900-1,250) (MixedPrecisionPolicy(bf16, reduce bf16)) | 0.0 (0.0 / 0.0) | 204.80x | 163.84x |'
line "$tmp/llm.txt" '| full_ubw (full) | 8 | 204,800 (204,800-204,800) | 1229 | 154% | 0.0 (0.0) | 0.0 | 0.0 | 0.0 | 0.0 (3.0) | 1,000 (900-1,250) (MixedPrecisionPolicy(bf16, reduce bf16)) | 0.0 (0.0 / 0.0) | 204.80x | 163.84x |'
line "$tmp/llm.txt" '| none (ddp) | 2 | 51,200 (51,200-51,200) | 307 | 38% | 0.0 (0.0) | 0.0 | 0.0 | 0.0 | 0.0 (3.0) | out of memory | - | - | - |'
# full_ubw's PyTorch row is full's: five PyTorch runs for six modes
[ "$(grep -c torch_fsdp_llm "$tmp/torch_calls")" = 5 ] ||
	{ echo "fsdp_llm.sh: PyTorch ran $(grep -c torch_fsdp_llm "$tmp/torch_calls") times"; exit 1; }
grep -q "strategy.shard=full --set strategy.update_in_backward=true" \
	/tmp/mgfsdpllm/fsdp_llm_full_ubw/args ||
	{ echo "fsdp_llm.sh: full_ubw did not set update_in_backward"; exit 1; }
grep -q '^| hybrid (hybrid) | 8 | 204,800' "$tmp/llm.txt"
line "$tmp/llm.txt" 'GEMM ceiling (bf16, mg_op_linear, same call): 800 TFLOP/s'
# bf16 reductions on both sides: mgrun's reduce_dtype = param, PyTorch's
# REDUCE=bf16 (its cached fp32 rows not reused)
: >"$tmp/torch_calls"
MG_FSDP_LLM_REDUCE=bf16 MG_FSDP_LLM_MODES=full \
	bash "$bench/fsdp_llm.sh" "$fake" "$tmp/llm" 4 >"$tmp/llm3.txt"
grep -q "strategy.reduce_dtype=param" /tmp/mgfsdpllm/fsdp_llm_full/args ||
	{ echo "fsdp_llm.sh: bf16 did not set reduce_dtype"; exit 1; }
[ "$(grep -c "^REDUCE=bf16 .*torch_fsdp_llm" "$tmp/torch_calls")" = 1 ] ||
	{ echo "fsdp_llm.sh: PyTorch did not run once with REDUCE=bf16"; exit 1; }
if MG_FAKE_FAIL=fsdp_llm_offload bash "$bench/fsdp_llm.sh" "$fake" \
	"$tmp/llm2" 2 >"$tmp/llm2.txt" 2>&1; then
	echo "fsdp_llm.sh: a failed mgrun run exited 0"; exit 1
fi
line "$tmp/llm2.txt" 'hybrid: needs 4 GPUs, skipped'
grep -q '^| offload (offload) | 8 | FAILED |' "$tmp/llm2.txt"
# lora_scaling.sh: 8 x 512 tokens a GPU; 1 GPU 0.02 s a step (204,800
# tok/s), 4 GPUs 0.0275 s (595,782 tok/s: 72.7% of 4 x 204,800)
MG_FAKE_SLOWER=1 bash "$bench/lora_scaling.sh" "$fake" "$tmp/ls" 1 4 >"$tmp/ls.txt"
line "$tmp/ls.txt" '| fsdp | 4 | 8 | all | 595,782 (595,782-595,782) | 148,945 | 72.7% | 0.01 (0.00) |'
line "$tmp/ls.txt" '| ddp_ds | 1 | 8 | all | 204,800 (204,800-204,800) | 204,800 | 100.0% | 0.01 (0.00) |'
if MG_FAKE_FAIL=lora_scaling_ddp_ds_1 bash "$bench/lora_scaling.sh" "$fake" \
	"$tmp/ls2" 1 2 >"$tmp/ls2.txt" 2>&1; then
	echo "lora_scaling.sh: a failed mgrun run exited 0"; exit 1
fi
line "$tmp/ls2.txt" '| ddp_ds | 2 | 8 | all | 409,600 (409,600-409,600) | 204,800 | - (no 1-GPU run) | 0.01 (0.00) |'
# techniques_ratios.py: lora 100 ms at 10,000 tok/s; dpo 190 ms at 5,000
# (2.00x per token); qat 120 ms at 8,000 (1.25x); a point without steady
# steps is said, and exits 1
cat >"$tmp/sweep.json" <<'J'
{"points": [
 {"id": "p01-lora", "values": {"technique": "lora"}, "summary": {"step_median_s": 0.1, "tokens_per_s": 10000}},
 {"id": "p03-dpo", "values": {"technique": "dpo"}, "summary": {"step_median_s": 0.19, "tokens_per_s": 5000}},
 {"id": "p04-qat", "values": {"technique": "qat"}, "summary": {"step_median_s": 0.12, "tokens_per_s": 8000}}]}
J
python3 "$bench/techniques_ratios.py" "$tmp/sweep.json" >"$tmp/tr.txt"
line "$tmp/tr.txt" '| dpo | 190.0 | 5,000 | 1.90x | 2.00x | at most 2.2x |'
line "$tmp/tr.txt" '| qat | 120.0 | 8,000 | 1.20x | 1.25x | at most 1.3x |'
sed 's/"step_median_s": 0.12/"step_median_s": null/' "$tmp/sweep.json" >"$tmp/sweep2.json"
if python3 "$bench/techniques_ratios.py" "$tmp/sweep2.json" >"$tmp/tr2.txt"; then
	echo "techniques_ratios.py: a point without steps exited 0"; exit 1
fi
line "$tmp/tr2.txt" '| qat | - | - | - | - | no steady steps |'
echo "bench scripts: ok"
