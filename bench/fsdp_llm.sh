#!/bin/bash
# fsdp_llm.sh MGRUN OUT [GPUS] - seed 002's question at the issue's
# scale: full fine-tuning of a Llama-2-7B-shaped model on GPUS GPUs
# (default 4) with every fsdp shard mode and offload, beside PyTorch
# FSDP2 in its best working configuration (bench/torch_fsdp_llm.py, the
# model and policy of ../shared/baselines/torch_fsdp.py) in the same call.
# Tokens/s per GPU, model TFLOP/s per GPU (6 x parameters x tokens/s) and
# its share of the bf16 GEMM ceiling measured in the same call
# (bench_gpu_ops gemm, when BENCH_GPU_OPS names it), and each side's
# largest rank's process peak as the driver sees it.
#
# Both sides as bench/bench_stats.py says: WARM steps, then 5 windows of
# STEPS steps; mgrun's windows are cut from its steps.csv, PyTorch's are
# CUDA-event windows with the slowest rank's window counting. Pairs
# (mgrun mode | PyTorch mode): fsdp full | full, grad_op | grad_op,
# hybrid (2 replicas, GPUS/2 each; 4+ GPUs) | hybrid, none | DDP,
# offload | FSDP2 CPUOffloadPolicy, and full_ubw / grad_op_ubw (fsdp's
# update_in_backward: each unit's AdamW update as its gradient shard
# lands, no whole gradient shard held) | full / grad_op, offload_ubw
# (offload's: each unit's host update while backward goes on) | offload
# (PyTorch's row measured once and shown for each). A run that cannot fit says so (both
# sides report out of memory rather than fail the table).
#
# Environment: MG_FSDP_LLM_MODES ("full full_ubw grad_op grad_op_ubw
# hybrid offload"; add
# none for the unsharded pair, which does not fit 80 GB at 7B),
# MG_FSDP_LLM_MB (8, micro-batch per GPU), MG_FSDP_LLM_DDP_MB (2: the
# no-shard pair, as the baseline's table), MG_FSDP_LLM_LAYERS (32),
# MG_FSDP_LLM_STEPS (2 per window), MG_FSDP_LLM_WARM (3),
# MG_FSDP_LLM_REDUCE (fp32: gradients reduced in fp32 on both sides;
# bf16: mgrun's strategy.reduce_dtype = param and FSDP2's reduce_dtype
# bf16, its MixedPrecisionPolicy default),
# MG_FSDP_LLM_CKPT (0; 1: activation checkpointing on both sides, every
# decoder layer: mgrun's model.activation_checkpointing, transformers'
# gradient checkpointing; seed 002's micro-batches 16 and 32 need it),
# MG_FSDP_LLM_SETS (more --set for mgrun), MG_FSDP_LLM_TORCH (1; 0 skips
# PyTorch), MG_FSDP_LLM_TIMEOUT (420 s a run: a rank out of memory can
# leave the others waiting in a collective), BENCH_GPU_OPS (path of
# bench_gpu_ops for the ceiling).
# Exit status 1 when a run failed for a reason other than memory.
set -u
mgrun=$1 out=$2 g=${3:-4}
modes=${MG_FSDP_LLM_MODES:-full full_ubw grad_op grad_op_ubw hybrid offload}
mb=${MG_FSDP_LLM_MB:-8}
ddp_mb=${MG_FSDP_LLM_DDP_MB:-2}
layers=${MG_FSDP_LLM_LAYERS:-32}
per=${MG_FSDP_LLM_STEPS:-2}
warm=${MG_FSDP_LLM_WARM:-3}
extra=${MG_FSDP_LLM_SETS:-}
reduce=${MG_FSDP_LLM_REDUCE:-fp32}
case $reduce in
fp32) rsets= ;;
bf16) rsets="--set strategy.reduce_dtype=param" ;;
*) echo "MG_FSDP_LLM_REDUCE=$reduce: fp32 or bf16"; exit 2 ;;
esac
ckpt=${MG_FSDP_LLM_CKPT:-0}
case $ckpt in
0) csets= ;;
1) csets="--set model.activation_checkpointing=true" ;;
*) echo "MG_FSDP_LLM_CKPT=$ckpt: 0 or 1"; exit 2 ;;
esac
torch_too=${MG_FSDP_LLM_TORCH:-1}
limit=${MG_FSDP_LLM_TIMEOUT:-420}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
jsonl=$out/fsdp_llm.jsonl
: >"$jsonl"
rm -f "$out"/torch_*_*.json # PyTorch rows measured in this call only
export NCCL_NVLS_ENABLE=0
status=0
steps=$((warm + 5 * per))

ceiling=null
if [ -n "${BENCH_GPU_OPS:-}" ]; then
	"$BENCH_GPU_OPS" gemm >"$out/gemm.log" 2>&1
	c=$(sed -n 's/^GEMM ceiling bf16: \([0-9.]*\) TFLOP.*/\1/p' "$out/gemm.log")
	[ -n "$c" ] && ceiling=$c
fi

# out of memory, in either side's words
oom() { grep -qiE "out of memory|cudaErrorMemoryAllocation|OutOfMemoryError" "$1"; }

for mode in $modes; do
	b=$mb tmode=$mode
	case $mode in
	full | grad_op) sets="--set strategy.shard=$mode" ;;
	full_ubw | grad_op_ubw)
		tmode=${mode%_ubw}
		sets="--set strategy.shard=$tmode --set strategy.update_in_backward=true" ;;
	hybrid)
		[ "$g" -ge 4 ] || { echo "hybrid: needs 4 GPUs, skipped"; continue; }
		sets="--set strategy.shard=hybrid --set strategy.shard_group_size=$((g / 2))" ;;
	none) sets="--set strategy.shard=none" b=$ddp_mb tmode=ddp ;;
	offload) sets="--set strategy.name=offload" ;;
	offload_ubw)
		tmode=offload
		sets="--set strategy.name=offload --set strategy.update_in_backward=true" ;;
	*) echo "unknown mode $mode"; status=1; continue ;;
	esac
	run=fsdp_llm_$mode
	rm -rf "/tmp/mgfsdpllm/$run"
	# shellcheck disable=SC2086
	timeout "$limit" "$mgrun" -c "$here/fsdp_llm.ini" --set run.gpus="$g" \
		--set run.batch_size="$b" --set model.num_layers="$layers" \
		--set dataset.train_samples=$((b * g * (steps + 2))) \
		--set run.max_steps="$steps" $sets $rsets $csets $extra \
		--set run.out_dir=/tmp/mgfsdpllm --set run.name="$run" \
		>"$out/$run.log" 2>&1
	rc=$?
	mg='{"error": "mgrun failed"}'
	if [ -f "/tmp/mgfsdpllm/$run/report.json" ] && [ $rc -eq 0 ]; then
		cp "/tmp/mgfsdpllm/$run/report.json" "$out/$run.json"
		mg=$(python3 "$here/bench_stats.py" run "/tmp/mgfsdpllm/$run" \
			--warm "$warm" --windows 5) || { mg='{"error": "no steps"}'; status=1; }
	elif oom "$out/$run.log"; then
		mg='{"oom": true}'
	else
		status=1
		tail -3 "$out/$run.log"
	fi
	tr='{"error": "not run"}'
	cache=$out/torch_${tmode}_${b}_${reduce}_$ckpt.json
	if [ "$torch_too" = 1 ] && [ -s "$cache" ]; then
		tr=$(cat "$cache")
	elif [ "$torch_too" = 1 ]; then
		tr=$(LAYERS=$layers REDUCE=$reduce CKPT=$ckpt timeout "$limit" python3 -m torch.distributed.run \
			--standalone --nproc_per_node="$g" "$here/torch_fsdp_llm.py" \
			"$tmode" "$b" 5 "$per" "$warm" \
			2>"$out/torch_$run.err" | grep '^{' | tail -1)
		if [ -z "$tr" ]; then
			if oom "$out/torch_$run.err"; then
				tr='{"oom": true}'
			else
				tr='{"error": "PyTorch failed"}'
				status=1
				tail -2 "$out/torch_$run.err"
			fi
		else
			echo "$tr" >"$cache"
		fi
	fi
	printf '{"mode": "%s", "tmode": "%s", "world": %s, "mb": %s, "seq": 512, "ckpt": %s, "ceiling": %s, "mgrun": %s, "torch": %s}\n' \
		"$mode" "$tmode" "$g" "$b" "$ckpt" "$ceiling" "$mg" "$tr" >>"$jsonl"
	echo "$mode: done"
done

python3 "$here/fsdp_llm_table.py" "$jsonl" | tee "$out/fsdp_llm.md"
exit $status
