#!/bin/sh
# gpu_equivalence_llm.sh MGRUN CKPT_DIFF CONFDIR WORK [N] - the llama and
# LoRA equivalence scenarios of equivalence.sh on N GPUs (default 2) with
# NCCL, started by mgrun's launcher (run.gpus): N GPUs with batch 4 each
# train what one GPU trains with batch 4N, on ragged rows with masked
# prompts (so ranks hold different label-token counts), full fine-tuning
# and LoRA (frozen base, adapters on every projection and the head), and
# QLoRA (that base's projections in NF4: blobs gathered as bytes).
# DPO with LoRA on preference pairs (model.objective = dpo), and with full
# fine-tuning (the reference a frozen copy). accum: the
# N GPUs take micro-batches of 2 with run.grad_accum = 2 (fsdp in every
# mode and offload reduce per micro-batch or once a step, as
# docs/ARCHITECTURE.md says) against the same single GPU with batch 4N.
# fsdp hybrid joins on 4+ GPUs (2 replicas of N/2), and `nodes` runs it as
# a multi-node job would: N/2 "nodes" of 2 GPUs on this host (N "nodes"
# of 1 GPU on 2 or 3 GPUs), each rank a process started with torchrun's
# environment (RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT;
# CUDA_VISIBLE_DEVICES the node's GPUs), hybrid's shard group the node
# (shard_group_size 0).
# CUDA has no fp64 llama ops, so fp32: the parameters within 1e-3 of each
# tensor's largest magnitude and every step's loss within 1e-5 relative.
# Why 1e-3: at the tiny model's lr 0.01, AdamW divides each gradient by
# its own running magnitude, so the rounding of another reduction order
# in elements with tiny gradients grows into parameter differences over
# 6 steps; on 4 H200s DPO with full fine-tuning differed by 6.7e-4 and
# offload QLoRA by 3.1e-4 while their losses agreed to 1e-6. A reduction
# that drops or double-counts a rank's part moves the update direction
# of every parameter by ~lr per step (~1e-1 of these tensors' largest
# values over 6 steps) and the losses at the second step.
# DPO with full fine-tuning drifts most (1.41e-3 once on 4 H200s), so
# its bound is measured, not set: 4x how far one GPU drifts from itself
# with the batch as 2 micro-batches (the same model, another summation
# order). equivalence.sh's dpo_fp32 shows the mechanism on CPU ranks:
# SGD 4 ranks against 1 to 1.2e-7, AdamW 3.7e-4, AdamW's own 2
# micro-batch drift 6.7e-4.
# Run by scripts/gpu.sh dist.
set -u
mgrun=$1 ckdiff=$2 conf=$3 work=$4 n=${5:-2}
rm -rf "$work"
mkdir -p "$work"
export NCCL_NVLS_ENABLE=0
fails=0
rtol=${MG_EQ_RTOL:-1e-3}
here=$(cd "$(dirname "$0")" && pwd)
llama=$conf/llama.ini
gpu="--set run.device=cuda --set run.precision=fp32"

run() { # run NAME GPUS [--set ...]
	name=$1 g=$2
	shift 2
	if ! "$mgrun" -c "$llama" $gpu --set run.gpus="$g" \
		--set run.out_dir="$work" --set run.name="$name" "$@" \
		>"$work/$name.log" 2>&1; then
		tail -20 "$work/$name.log"
		echo "FAIL: $name did not finish"
		fails=$((fails + 1))
		return 1
	fi
}

# losses_close A B: every step's loss of run B within 1e-5 of run A's
# (relative, or absolute below 1), the same number of steps.
losses_close() {
	awk -F, -f "$here/../common/loss_diff.awk" "$work/$1/steps.csv" \
		"$work/$2/steps.csv" | awk '{
		if ($1 == 0 || $1 != $2 || !($4 <= 1e-5)) {
			printf "losses: %d against %d steps, worst relative difference %s\n", $2, $1, $4
			exit 1 } }'
}

# same A B WHAT [RTOL]: the parameters within RTOL of the tensor's
# largest magnitude (ckpt_diff) and every step's loss within 1e-5.
same() {
	if "$ckdiff" "$work/$1/checkpoint.safetensors" \
		"$work/$2/checkpoint.safetensors" "${4:-$rtol}" &&
		losses_close "$1" "$2"; then
		echo "PASS: $3"
	else
		echo "FAIL: $3"
		fails=$((fails + 1))
	fi
}

# copy_engine_used RUN: its shards were NCCL windows, all-gathers went
# to the zero-CTA communicator, and the steps ran eagerly (replayed from
# a CUDA graph, such all-gathers hung: comm_nccl.c); a process whose
# NCCL has no windows (older than 2.28) says why and is not a failure.
copy_engine_used() {
	if grep -q "no copy-engine window" "$work/$1.log"; then
		echo "SKIPPED: $1 ran without windows:" \
			"$(grep -m1 "no copy-engine window" "$work/$1.log")"
	elif grep -q "are NCCL windows" "$work/$1.log" &&
		grep -q "go to the zero-CTA communicator" "$work/$1.log" &&
		grep -q "steps run eagerly while copy-engine" "$work/$1.log" &&
		! grep -q "step captured" "$work/$1.log"; then
		echo "PASS: $1 gathered between NCCL windows, steps eager"
	else
		echo "FAIL: $1: no sign of windows or of a fallback in its log"
		fails=$((fails + 1))
	fi
}

lora="--set model.lora_rank=4 --set model.lora_alpha=8
--set model.lora_targets=all,head --set model.tie_embeddings=no"
# DPO: rows of preference pairs, the reference pass in every forward.
dpo="$lora --set model.objective=dpo --set model.dpo_beta=0.5
--set dataset.pairs=true --set dataset.prompt_frac=0.3"
# MG_EQ_MODES / MG_EQ_STRATEGIES narrow a run (accum needs full's single;
# MG_EQ_MODES=none leaves only the bf16 block below).
# DPO with full fine-tuning: the reference a frozen copy of the start
# (no clipping: the F32 gradient norm's rounding, equivalence.sh says why).
dpo_full="--set model.objective=dpo --set model.dpo_beta=0.5
--set dataset.pairs=true --set dataset.prompt_frac=0.3
--set model.tie_embeddings=no --set optimizer.max_grad_norm=0"
# ubw: update_in_backward, without clipping: fsdp's (each unit's AdamW
# update as its gradient shard lands, pooled shards) and offload's (each
# unit's host update on the side stream while backward goes on).
# The decoder families (llama_family.c): Qwen2 (biases, full fine-tuning
# and LoRA), Qwen3 (q/k norms), Mistral (a window shorter than the rows),
# Phi-3 (partial rotary, a window; its fused modules' LoRA).
fam="--set model.tie_embeddings=no --set model.family"
for mode in ${MG_EQ_MODES:-full lora qlora dpo dpo_full accum ubw qwen2 \
	qwen2_lora qwen3 mistral phi3 phi3_lora}; do
	[ "$mode" = none ] && continue
	extra="" ref=single_$mode sx="" strategies=""
	[ $mode = lora ] && extra=$lora
	[ $mode = qlora ] && extra="$lora --set model.quant=nf4"
	[ $mode = dpo ] && extra=$dpo
	[ $mode = dpo_full ] && extra=$dpo_full
	[ $mode = qwen2 ] && extra="$fam=qwen2"
	[ $mode = qwen2_lora ] && extra="$lora --set model.family=qwen2"
	[ $mode = qwen3 ] && extra="$fam=qwen3 --set model.head_dim=24"
	[ $mode = mistral ] && extra="$fam=mistral --set model.sliding_window=5"
	[ $mode = phi3 ] && extra="$fam=phi3 --set model.partial_rotary_factor=0.75 --set model.sliding_window=5"
	[ $mode = phi3_lora ] && extra="$lora --set model.family=phi3"
	if [ $mode = ubw ]; then
		extra="--set optimizer.max_grad_norm=0"
		sx="--set strategy.update_in_backward=true"
		strategies="fsdp:full fsdp:grad_op fsdp:none offload"
	fi
	if [ $mode = accum ]; then
		extra="--set run.batch_size=2 --set run.grad_accum=2"
		ref=single_full
		if [ ! -e "$work/$ref/checkpoint.safetensors" ]; then
			echo "FAIL: accum needs the full mode's single run"
			fails=$((fails + 1))
			continue
		fi
	else
		# shellcheck disable=SC2086
		run single_$mode 1 --set run.batch_size=$((4 * n)) $extra ||
			continue
	fi
	tol=""
	if [ $mode = dpo_full ]; then
		# shellcheck disable=SC2086
		run single_dpo_full_accum 1 --set run.batch_size=$((2 * n)) \
			--set run.grad_accum=2 $extra &&
			floor=$("$ckdiff" "$work/single_dpo_full/checkpoint.safetensors" \
				"$work/single_dpo_full_accum/checkpoint.safetensors" 1 |
				tail -1 |
				sed -n 's/.*largest relative difference \([^ ]*\).*/\1/p') &&
			tol=$(awk -v f="$floor" \
				'BEGIN { printf "%.3g", 4 * (f > 1e-6 ? f : 1e-6) }') &&
			echo "dpo_full: one GPU with 2 micro-batches drifts $floor: bound $tol"
	fi
	hyb=""
	[ "$n" -ge 4 ] && [ $((n % 2)) -eq 0 ] && hyb=fsdp:hybrid
	[ -n "$strategies" ] && strategies="$strategies $hyb"
	for s in ${MG_EQ_STRATEGIES:-${strategies:-ddp_ds ddp_rr fsdp:full \
		fsdp:grad_op fsdp:none $hyb offload}}; do
		name=${s%%:*} shard=${s#*:}
		set -- --set strategy.name="$name"
		[ "$name" = fsdp ] && set -- "$@" --set strategy.shard="$shard"
		[ "$shard" = hybrid ] &&
			set -- "$@" --set strategy.shard_group_size=$((n / 2))
		tag=$(echo "$s" | tr : _)_$mode
		# shellcheck disable=SC2086
		run "$tag" "$n" "$@" $extra $sx &&
			same "$ref" "$tag" \
				"$s on $n GPUs == 1 GPU with ${n}x the batch, llama $mode" \
				$tol
	done
done
# bf16 (MG_EQ_BF16=0 skips): the only runs with compute-dtype shard copies
# (lp flats; the CPU has no mixed precision). grad_op keeps them in its
# gather slots and gathers in place, update_in_backward pools the
# gradient shards, copy_engine (ce) gathers between NCCL windows on the
# copy engines; all only move where data lives, so on the same N GPUs
# they must train what full shard trains, to the bit (1e-6 relative).
if [ "${MG_EQ_BF16:-1}" = 1 ]; then
	b16="--set run.precision=bf16 --set strategy.name=fsdp
--set optimizer.max_grad_norm=0"
	# shellcheck disable=SC2086
	if run bf16_full "$n" $b16 --set strategy.shard=full; then
		for v in "grad_op" "grad_op ubw" "full ubw" "full ce" \
			"grad_op ce"; do
			set -- --set strategy.shard="${v% *}"
			case ${v#* } in
			ubw) set -- "$@" --set strategy.update_in_backward=true ;;
			ce) set -- "$@" --set strategy.copy_engine=true ;;
			esac
			tag=bf16_$(echo "$v" | tr ' ' _)
			# shellcheck disable=SC2086
			run "$tag" "$n" $b16 "$@" || continue
			same bf16_full "$tag" \
				"bf16 fsdp $v == fsdp full on $n GPUs" 1e-6
			case $tag in *_ce) copy_engine_used "$tag" ;; esac
		done
	fi
fi
# "Nodes" of 2 GPUs (1 GPU on a 2-GPU machine): one process a rank, as
# srun or torchrun start them; hybrid's shard group is the node
# (shard_group_size 0, from LOCAL_WORLD_SIZE), and the job must equal the
# single GPU's full fine-tuning.
per=1
[ "$n" -ge 4 ] && [ $((n % 2)) -eq 0 ] && per=2
if [ "$n" -ge 2 ] && [ -e "$work/single_full/checkpoint.safetensors" ]; then
	port=$((20000 + $$ % 20000))
	pids=""
	r=0
	while [ $r -lt "$n" ]; do
		node=$((r / per))
		devs=$((per * node))
		[ $per = 2 ] && devs="$devs,$((per * node + 1))"
		CUDA_VISIBLE_DEVICES=$devs RANK=$r \
			WORLD_SIZE=$n LOCAL_RANK=$((r % per)) LOCAL_WORLD_SIZE=$per \
			MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
			timeout 300 "$mgrun" -c "$llama" $gpu \
			--set strategy.name=fsdp --set strategy.shard=hybrid \
			--set run.out_dir="$work" --set run.name=nodes_hybrid \
			>"$work/nodes_rank$r.log" 2>&1 &
		pids="$pids $!"
		r=$((r + 1))
	done
	ok=1
	for p in $pids; do wait "$p" || ok=0; done
	what="fsdp hybrid on $((n / per)) nodes of $per GPU(s) (torchrun environment)"
	if [ $ok -eq 1 ]; then
		same single_full nodes_hybrid "$what == 1 GPU with ${n}x the batch"
	else
		tail -5 "$work"/nodes_rank*.log
		echo "FAIL: $what did not finish"
		fails=$((fails + 1))
	fi
fi
echo "gpu_equivalence_llm: $fails failure(s)"
[ $fails -eq 0 ]
