#!/bin/sh
# equivalence.sh SCENARIO MPIEXEC MGRUN CKPT_DIFF CONFDIR WORK
# Strategy equivalence on CPU ranks under MPI (the oracle is the
# single-rank run): each scenario trains a few steps two ways and compares
# the checkpoints' parameters, and the reports' per-rank counters.
set -eu
scenario=$1 mpiexec=$2 mgrun=$3 ckdiff=$4 conf=$5 work=$6
rm -rf "$work"
mkdir -p "$work"
# Open MPI in containers and CI: root allowed, more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Open MPI's own allocations are not ours to leak-check.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"

# run NAME NRANKS INI [--set ...]: train, fail loudly with the log.
run() {
	name=$1 np=$2 ini=$3
	shift 3
	if [ "$np" -eq 1 ]; then
		set -- "$mgrun" -c "$ini" "$@"
	else
		set -- "$mpiexec" -np "$np" "$mgrun" -c "$ini" "$@"
	fi
	if ! "$@" --set run.out_dir="$work" --set run.name="$name" \
		>"$work/$name.log" 2>&1; then
		cat "$work/$name.log"
		echo "FAIL: $name did not finish"
		exit 1
	fi
}

# refuses_clip STRATEGY: update_in_backward with llama.ini's clipping is
# refused, with the reason, and nothing runs.
refuses_clip() {
	if "$mgrun" -c "$llama" --set strategy.name="$1" \
		--set strategy.update_in_backward=true --set run.out_dir="$work" \
		--set run.name="clip_$1" >"$work/clip_$1.log" 2>&1; then
		echo "FAIL: $1 update_in_backward with clipping was accepted"
		exit 1
	fi
	grep -q "$1: update_in_backward .* cannot clip: set optimizer.max_grad_norm = 0" \
		"$work/clip_$1.log" ||
		{ cat "$work/clip_$1.log"; echo "FAIL: $1 clip error"; exit 1; }
}

same() { # same A B RTOL
	"$ckdiff" "$work/$1/checkpoint.safetensors" \
		"$work/$2/checkpoint.safetensors" "$3"
}

# rdiff A B: the largest difference of their parameters relative to each
# tensor's largest magnitude (ckpt_diff's measure).
rdiff() {
	"$ckdiff" "$work/$1/checkpoint.safetensors" \
		"$work/$2/checkpoint.safetensors" 1 | tail -1 |
		sed -n 's/.*largest relative difference \([^ ]*\).*/\1/p'
}

# The gradient norms a run logged (steps.csv, as printed: 6 digits).
norms() {
	cut -d, -f6 "$work/$1/steps.csv" | tail -n +2
}

# The first epoch's test loss in a run's report.json.
test_loss() {
	grep -m1 '"test_loss"' "$work/$1/report.json" | sed 's/.*:[[:space:]]*//; s/,$//'
}

# Sum of one per-rank counter in a run's report.json.
counter() {
	grep "\"$2\":" "$work/$1/report.json" |
		awk -F: '{ gsub(/[ ,]/, "", $2); s += $2 } END { print s }'
}

mlp=$conf/mlp.ini mbv2=$conf/mbv2.ini llama=$conf/llama.ini
case $scenario in
confs_7b)
	# The user-facing 7B examples as written (conf/llama2_7b_*.ini), on
	# CPU ranks with a tiny model of Llama 2's vocabulary: their data
	# (the alpaca file through the Llama 2 tokenizer), strategy,
	# evaluation and checkpoint run end to end; the GPU machine runs
	# them at 7B. fsdp's one held-out row on 2 ranks hung evaluation
	# once.
	root=$conf/../..
	if [ ! -d "$root/.deps/tokenizers/llama2" ]; then
		echo "SKIPPED: no .deps/tokenizers (scripts/fetch-tokenizers.sh)"
		exit 77
	fi
	set -- --set run.device=cpu --set run.precision=fp32 \
		--set model.preset=tiny --set model.vocab_size=32000 \
		--set run.max_steps=3
	run fsdp_7b 2 "$root/conf/llama2_7b_fsdp.ini" "$@"
	run offload_7b 1 "$root/conf/llama2_7b_offload.ini" "$@"
	for r in fsdp_7b offload_7b; do
		l=$(test_loss "$r")
		echo "$r: test loss ${l:-none}"
		[ -n "$l" ] && [ -f "$work/$r/checkpoint.safetensors" ] || exit 1
	done
	;;
ds_vs_single)
	# 4 ranks x 16 == 1 rank x 64, in fp64 and in fp32.
	run single 1 "$mlp" --set run.batch_size=64
	run ds4 4 "$mlp" --set strategy.name=ddp_ds
	same single ds4 1e-10
	run single32 1 "$mlp" --set run.batch_size=64 --set run.precision=fp32
	run ds4_32 4 "$mlp" --set strategy.name=ddp_ds --set run.precision=fp32
	same single32 ds4_32 1e-4
	;;
buckets)
	# Many tiny buckets (each all-reduced as backward completes it) and
	# AdamW: still the single-rank model.
	set -- --set optimizer.name=adamw --set optimizer.lr=0.003
	run single 1 "$mlp" --set run.batch_size=32 "$@"
	run ds2 2 "$mlp" --set strategy.name=ddp_ds \
		--set strategy.bucket_mb=0.002 "$@"
	same single ds2 1e-10
	# At 2 KiB every weight (fc0 294 KiB, fc1 9 KiB, out 1.9 KiB in
	# fp64) is a bucket of its own and the three biases share one: 4
	# gradient all-reduces a step, plus the metrics all-reduce, over 12
	# steps, plus the setup broadcast - on each of 2 ranks. (25 MiB
	# buckets would give 2 + 1 a step.)
	calls=$(counter ds2 calls)
	echo "collectives on 2 ranks: $calls"
	test "$calls" -eq $((2 * (12 * (4 + 1) + 1)))
	;;
grad_accum)
	# run.grad_accum = K micro-batches of B before one optimizer step
	# trains what one step of K x B does: on one rank, and on 2 ddp_ds
	# ranks that reduce once per step (no_sync on the first micro-batch).
	run single 1 "$mlp" --set run.batch_size=64
	run accum4 1 "$mlp" --set run.grad_accum=4
	same single accum4 1e-10
	run ds2_accum2 2 "$mlp" --set strategy.name=ddp_ds --set run.grad_accum=2
	same single ds2_accum2 1e-10
	# Two gradient all-reduces (weights and no-decay biases are two
	# buckets) and one metrics all-reduce a step, plus the setup
	# broadcast, on each of 2 ranks: nothing after the first
	# micro-batch (reducing there too would make it 2 x 2 + 1 a step).
	calls=$(counter ds2_accum2 calls)
	echo "collectives on 2 ranks with grad_accum 2: $calls"
	test "$calls" -eq $((2 * (12 * 3 + 1)))
	# Sharded strategies with 2 micro-batches on 2 ranks (hybrid: 4
	# ranks in 2 groups of 2) train the same model, and their reduction
	# counts show where they reduce. mlp has 3 units, one flat each, so
	# a step of fsdp or offload issues per rank: the metrics all-reduce,
	# the gradient-norm all-reduce (not with shard = none: G = 1), and:
	#   none    3 all-reduces once (reducing every micro-batch: 6)
	#   grad_op 3 gathers a micro-batch, 3 reduce-scatters once (6)
	#   full    6 gathers and 3 reduce-scatters a micro-batch (sums),
	#           less the head's gather in backward once the order is
	#           known (every micro-batch but the run's first keeps the
	#           head gathered from forward: 5 gathers, +1 once)
	#   hybrid  as full, plus 3 replica all-reduces once (6)
	#   offload 3 reduce-scatters a micro-batch, 3 all-gathers, and 3
	#           all-gathers once at setup (each rank makes only its
	#           shard of the initial values)
	run fsdp_none 2 "$mlp" --set strategy.name=fsdp --set strategy.shard=none \
		--set run.grad_accum=2
	run fsdp_grad_op 2 "$mlp" --set strategy.name=fsdp \
		--set strategy.shard=grad_op --set run.grad_accum=2
	run fsdp_full 2 "$mlp" --set strategy.name=fsdp --set run.grad_accum=2
	run fsdp_hybrid 4 "$mlp" --set strategy.name=fsdp \
		--set strategy.shard=hybrid --set strategy.shard_group_size=2 \
		--set run.batch_size=8 --set run.grad_accum=2
	run off2_accum2 2 "$mlp" --set strategy.name=offload --set run.grad_accum=2
	for r in fsdp_none:2:4:0 fsdp_grad_op:2:11:0 fsdp_full:2:18:1 \
		fsdp_hybrid:4:21:1 off2_accum2:2:11:3; do
		name=${r%%:*} rest=${r#*:}
		np=${rest%%:*} rest=${rest#*:}
		per=${rest%%:*} once=${rest#*:}
		same single "$name" 1e-10
		# The step's global norm (clipping acts on steps 7 to 11)
		# is the whole batch's: taken over the summed gradient.
		test "$(norms "$name")" = "$(norms single)"
		calls=$(counter "$name" calls)
		echo "collectives of $name with grad_accum 2: $calls"
		test "$calls" -eq $((np * (12 * per + once)))
	done
	# Offload copies each step's summed gradient shard to the host
	# once: the bytes of a step without accumulation (12 steps of the
	# 19616 fp64 elements of a rank's padded shards, on 2 ranks).
	run off2 2 "$mlp" --set strategy.name=offload --set run.batch_size=32
	d2h=$(counter off2_accum2 d2h_bytes)
	echo "gradient bytes to the host with grad_accum 2: $d2h"
	test "$d2h" -eq "$(counter off2 d2h_bytes)"
	test "$d2h" -eq $((2 * 12 * 19616 * 8))
	;;
uneven)
	# drop_last = false: the last global batch is padded to equal
	# shares, as PyTorch's DistributedSampler pads.
	set -- --set run.max_steps=0 --set dataset.limit_train=202 \
		--set strategy.drop_last=false
	run ds4 4 "$mlp" --set strategy.name=ddp_ds "$@"
	# 202 = 3 x 64 + 10: 4 steps, the last 10 padded to 4 x 3 = 12.
	test "$(counter ds4 samples_computed)" -eq 204
	;;
rr_vs_ds)
	# Same shares, so the same model - batch norm and dropout included;
	# ddp_rr reads and copies every sample on every rank.
	run ds 4 "$mbv2" --set strategy.name=ddp_ds
	run rr 4 "$mbv2" --set strategy.name=ddp_rr
	same ds rr 1e-6
	ds_read=$(counter ds samples_read) rr_read=$(counter rr samples_read)
	test "$rr_read" -eq $((4 * ds_read))
	test "$(counter rr samples_computed)" -eq "$(counter ds samples_computed)"
	echo "samples read: ddp_ds $ds_read, ddp_rr $rr_read"
	;;
ddp_4x)
	# Plain DDP: every rank trains on what one rank alone would, so 4
	# ranks give the single-rank model at 4x the samples.
	run single 1 "$mbv2"
	run ddp4 4 "$mbv2" --set strategy.name=ddp
	same single ddp4 1e-5
	run mlp1 1 "$mlp"
	run mlp4 4 "$mlp" --set strategy.name=ddp
	same mlp1 mlp4 1e-10
	one=$(counter single samples_computed)
	four=$(counter ddp4 samples_computed)
	test "$four" -eq $((4 * one))
	echo "samples computed: single $one, ddp on 4 ranks $four"
	;;
fsdp_modes)
	# Every shard mode on 4 ranks (hybrid: 2 groups of 2) trains the
	# single-rank model; mlp's 48-, 24- and 10-element biases make the
	# shards uneven (padded).
	run single 1 "$mlp" --set run.batch_size=64
	for mode in full grad_op none; do
		run "$mode" 4 "$mlp" --set strategy.name=fsdp \
			--set strategy.shard="$mode"
		same single "$mode" 1e-10
	done
	run hybrid 4 "$mlp" --set strategy.name=fsdp --set strategy.shard=hybrid \
		--set strategy.shard_group_size=2
	same single hybrid 1e-10
	# copy_engine on CPU ranks: the MPI communicator has no windows, so
	# the run says so and trains exactly as without it.
	for mode in full grad_op; do
		run "${mode}_ce" 4 "$mlp" --set strategy.name=fsdp \
			--set strategy.shard="$mode" --set strategy.copy_engine=true
		grep -q "has no copy-engine windows" "$work/${mode}_ce.log"
		same "$mode" "${mode}_ce" 0
	done
	# Sharding shows in memory: full holds about 1/4 of the parameter,
	# gradient and optimizer bytes per rank, none all of them.
	for cat in params grads optimizer; do
		one=$(counter single "$cat") full=$(counter full "$cat")
		none=$(counter none "$cat")
		echo "$cat bytes: single $one, full (sum of 4 ranks) $full," \
			"none (sum) $none"
		awk -v a="$one" -v b="$full" -v c="$none" 'BEGIN {
			exit !(b >= a && b <= 1.1 * a && c >= 4 * a) }'
	done
	# AdamW in fp32, and MobileNetV2 (batch norm buffers) against ddp_ds.
	set -- --set optimizer.name=adamw --set optimizer.lr=0.003 \
		--set run.precision=fp32
	run single_adamw 1 "$mlp" --set run.batch_size=64 "$@"
	run full_adamw 4 "$mlp" --set strategy.name=fsdp "$@"
	same single_adamw full_adamw 1e-4
	run mbv2_ds 4 "$mbv2" --set strategy.name=ddp_ds
	run mbv2_full 4 "$mbv2" --set strategy.name=fsdp
	same mbv2_ds mbv2_full 1e-5
	;;
fsdp_resume)
	# Save with 4 ranks, resume with 2 (same global batch): the model
	# one rank trains in one go. Then a fsdp checkpoint resumed by
	# ddp_ds on 1 rank.
	run single 1 "$mlp" --set run.batch_size=64
	run split 4 "$mlp" --set strategy.name=fsdp --set run.stop_after=6
	run split 2 "$mlp" --set strategy.name=fsdp --set run.batch_size=32 \
		--resume
	grep -q "resumed from .* at step 6" "$work/split.log"
	same single split 1e-10
	run other 4 "$mlp" --set strategy.name=fsdp --set strategy.shard=grad_op \
		--set run.stop_after=6
	run other 1 "$mlp" --set strategy.name=ddp_ds --set run.batch_size=64 \
		--resume
	same single other 1e-10
	;;
offload)
	# The host optimizer (ZeRO-Offload) on 1 and on 4 ranks (each rank
	# updating its shard) trains the single-rank model, with SGD in fp64
	# and AdamW in fp32; its checkpoint resumes in fsdp on 2 ranks.
	run single 1 "$mlp" --set run.batch_size=64
	run off1 1 "$mlp" --set strategy.name=offload --set run.batch_size=64
	same single off1 1e-10
	run off4 4 "$mlp" --set strategy.name=offload
	same single off4 1e-10
	set -- --set optimizer.name=adamw --set optimizer.lr=0.003 \
		--set run.precision=fp32
	run single_adamw 1 "$mlp" --set run.batch_size=64 "$@"
	run off4_adamw 4 "$mlp" --set strategy.name=offload "$@"
	same single_adamw off4_adamw 1e-4
	run mixed 4 "$mlp" --set strategy.name=offload --set run.stop_after=6
	run mixed 2 "$mlp" --set strategy.name=fsdp --set run.batch_size=32 \
		--resume
	same single mixed 1e-10
	;;
examples)
	# The example strategies of examples/ (MG_PLUGIN_PATH points at
	# their in-tree build) on 2 ranks against their references, in fp32
	# so bf16 compression has something to round.
	set -- --set run.precision=fp32 --set run.batch_size=16
	run ds 2 "$mlp" --set strategy.name=ddp_ds "$@"
	# bf16_ddp without compression is ddp_ds, bit for bit.
	run plain 2 "$mlp" --set strategy.name=bf16_ddp \
		--set strategy.compress=false "$@"
	same ds plain 0
	# With compression: close to ddp_ds (gradients rounded to bf16, 8
	# significant bits, relative error 2^-9 per element, over 12 steps),
	# but not equal, and the all-reduces really moved bf16: gradient
	# traffic halves (39106 fp32 gradients a step, 12 steps, plus the
	# fp32 setup broadcast of the parameters and the metrics).
	run bf16 2 "$mlp" --set strategy.name=bf16_ddp "$@"
	same ds bf16 2e-3
	if same ds bf16 0 >/dev/null; then
		echo "FAIL: bf16 compression changed nothing"
		exit 1
	fi
	ds_bytes=$(counter ds comm_bytes) bf_bytes=$(counter bf16 comm_bytes)
	echo "collective bytes on 2 ranks: ddp_ds $ds_bytes, bf16_ddp $bf_bytes"
	awk -v a="$ds_bytes" -v b="$bf_bytes" 'BEGIN { exit !(b < 0.6 * a) }'
	# local_avg averaging every step with plain gradients (no clipping)
	# is DDP for SGD with momentum and weight decay (linear in the
	# gradient): equal to ddp_ds within rounding, in fp64.
	set -- --set optimizer.max_grad_norm=0 --set strategy.period=1
	run ds64 2 "$mlp" --set strategy.name=ddp_ds \
		--set optimizer.max_grad_norm=0
	run la 2 "$mlp" --set strategy.name=local_avg "$@"
	same ds64 la 1e-10
	# Averaging rarely is not DDP: the same run with period 5 differs.
	run la4 2 "$mlp" --set strategy.name=local_avg --set strategy.period=5 \
		--set optimizer.max_grad_norm=0
	if same ds64 la4 1e-6 >/dev/null; then
		echo "FAIL: local_avg averaging every 5 steps equals DDP"
		exit 1
	fi
	# A strategy that does not declare gradient accumulation is
	# refused, named (local_avg has no MG_STRATEGY_GRAD_ACCUM).
	if "$mgrun" -c "$mlp" --set strategy.name=local_avg \
		--set run.grad_accum=2 --set run.out_dir="$work" \
		>"$work/refused.log" 2>&1; then
		echo "FAIL: local_avg with grad_accum 2 was not refused"
		exit 1
	fi
	grep -q "strategy 'local_avg'.*does not declare gradient accumulation" \
		"$work/refused.log" || {
		cat "$work/refused.log"
		echo "FAIL: the refusal does not name local_avg"
		exit 1
	}
	;;
zero)
	# The ZeRO examples (examples/zero: ZeRO-1, and ZeRO-2 with the
	# optimizer state on the host, each a few tens of lines over the
	# kit's unit pipeline and shard store) on 4 ranks against their
	# in-tree references. ZeRO-1 all-reduces whole gradients and updates
	# element-wise as ddp_ds does: without clipping, bit for bit.
	run single 1 "$mlp" --set run.batch_size=64
	set -- --set optimizer.max_grad_norm=0
	run ds 4 "$mlp" --set strategy.name=ddp_ds "$@"
	run z1 4 "$mlp" --set strategy.name=zero1 "$@"
	same ds z1 0
	# With clipping the norm (F32, mg_optim_sumsq) is summed by shard,
	# then over the ranks, not in ddp_ds's order: the clip factor
	# differs by F32 rounding (a few 2^-24), which scales every update;
	# over 12 SGD steps that stays far below 1e-5 relative, and the runs
	# are not equal.
	run ds_clip 4 "$mlp" --set strategy.name=ddp_ds
	run z1_clip 4 "$mlp" --set strategy.name=zero1
	same ds_clip z1_clip 1e-5
	# Gradient accumulation: whole gradients summed over micro-batches
	# and reduced once, as ddp_ds's no_sync.
	run ds_acc 4 "$mlp" --set strategy.name=ddp_ds --set run.grad_accum=2 \
		--set run.batch_size=8 "$@"
	run z1_acc 4 "$mlp" --set strategy.name=zero1 --set run.grad_accum=2 \
		--set run.batch_size=8 "$@"
	same ds_acc z1_acc 1e-12
	# ZeRO-2 with host state is offload's computation: the same
	# reduce-scatters, the norm over the same shards in the same order,
	# the same host update: bit for bit, clipping on.
	# steps.csv in full precision shows the same losses and gradient
	# norms to the last bit (17 digits).
	run off 4 "$mlp" --set strategy.name=offload \
		--set run.csv_full_precision=true
	run z2 4 "$mlp" --set strategy.name=zero2_host \
		--set run.csv_full_precision=true
	same off z2 0
	same ds_clip z2 1e-5
	cut -d, -f3,6 "$work/off/steps.csv" >"$work/off.curve"
	cut -d, -f3,6 "$work/z2/steps.csv" >"$work/z2.curve"
	cmp "$work/off.curve" "$work/z2.curve"
	grep -Eq '^[0-9.e+-]{14,},[0-9.e+-]{14,}$' "$work/z2.curve" || {
		head -3 "$work/z2.curve"
		echo "FAIL: steps.csv not in full precision"
		exit 1
	}
	# The installed differ (mgrun ckpt-diff) agrees with the tests'.
	"$mgrun" ckpt-diff "$work/off/checkpoint.safetensors" \
		"$work/z2/checkpoint.safetensors" | grep -q ': same$'
	if "$mgrun" ckpt-diff "$work/ds_clip/checkpoint.safetensors" \
		"$work/z1_clip/checkpoint.safetensors" >/dev/null 2>&1; then
		echo "FAIL: ckpt-diff found clipped zero1 equal to ddp_ds"
		exit 1
	fi
	"$mgrun" ckpt-diff "$work/ds_clip/checkpoint.safetensors" \
		"$work/z1_clip/checkpoint.safetensors" --tolerance 1e-5 \
		--prefix optim/ >/dev/null
	# Checkpoints are full named tensors: ZeRO-1 on 4 ranks stops after
	# 6 steps, ZeRO-2 on 2 ranks resumes it and ends where ddp_ds does.
	run mixed 4 "$mlp" --set strategy.name=zero1 --set run.stop_after=6
	run mixed 2 "$mlp" --set strategy.name=zero2_host \
		--set run.batch_size=32 --resume
	same ds_clip mixed 1e-5
	# Memory by category shows the sharding: optimizer state summed over
	# the 4 ranks is one model's (each rank holds 1/4); ZeRO-1 keeps
	# whole gradients on every rank (4 models' worth), ZeRO-2 a shard on
	# the device and its copy on the host (2 models' worth in all).
	for cat in optimizer grads; do
		echo "$cat bytes: single $(counter single "$cat"), zero1 (sum of" \
			"4 ranks) $(counter z1_clip "$cat"), zero2_host (sum)" \
			"$(counter z2 "$cat")"
	done
	one=$(counter single optimizer)
	for r in z1_clip z2; do
		awk -v a="$one" -v b="$(counter $r optimizer)" \
			'BEGIN { exit !(b >= a && b <= 1.1 * a) }'
	done
	one=$(counter single grads)
	awk -v a="$one" -v b="$(counter z1_clip grads)" \
		'BEGIN { exit !(b >= 4 * a) }'
	awk -v a="$one" -v b="$(counter z2 grads)" \
		'BEGIN { exit !(b >= a && b <= 2.2 * a) }'
	;;
families)
	# The decoder families (Qwen2's q/k/v biases, Qwen3's q/k norms,
	# Mistral's sliding window shorter than the rows, LoRA over Qwen2's
	# frozen biases, Gemma 2's soft-caps and mixed layers, Gemma 3's
	# local RoPE base, Phi-3's partial rotary and its fused modules' LoRA,
	# one A shared by q, k, v): ddp_ds, fsdp full and grad_op and offload on 4
	# ranks train what one rank trains with the whole batch. No
	# clipping: these models' gradient norms pass max_grad_norm, and
	# fsdp sums the squared norm across ranks in F32 (a clip factor
	# 1e-8 apart in fp64, as dpo_full's note says).
	for fam in "qwen2" "qwen3 --set model.head_dim=24" \
		"mistral --set model.sliding_window=5" \
		"qwen2 --set model.lora_rank=4 --set model.lora_alpha=8 --set model.lora_targets=all" \
		"gemma2 --set model.sliding_window=5 --set model.attn_logit_softcapping=3 --set model.final_logit_softcapping=5" \
		"gemma3_text --set model.head_dim=24 --set model.sliding_window=5 --set model.sliding_window_pattern=2" \
		"phi3 --set model.partial_rotary_factor=0.75 --set model.sliding_window=5" \
		"phi3 --set model.lora_rank=4 --set model.lora_alpha=8 --set model.lora_targets=all"; do
		tag=$(echo "$fam" | cut -d' ' -f1)
		case $fam in *lora*) tag=${tag}_lora ;; esac
		f="--set optimizer.max_grad_norm=0 --set model.family=$fam"
		# shellcheck disable=SC2086
		run "single_$tag" 1 "$llama" --set run.batch_size=16 $f
		for s in ddp_ds fsdp:full fsdp:grad_op offload; do
			name=${s%%:*} shard=${s#*:}
			set -- --set strategy.name="$name"
			[ "$name" = fsdp ] && set -- "$@" --set strategy.shard="$shard"
			t=$(echo "$s" | tr : _)_$tag
			# shellcheck disable=SC2086
			run "$t" 4 "$llama" "$@" $f
			same "single_$tag" "$t" 1e-10
		done
	done
	;;
llama)
	# A tiny llama with ragged, prompt-masked rows: every strategy on
	# 2 or 4 ranks, and 4 micro-batches on one rank, train the model one
	# rank trains with the whole batch (16 rows a step). Each rank holds
	# a different number of label tokens: only a divisor summed over the
	# whole step (ranks and micro-batches) makes these equal.
	run single 1 "$llama" --set run.batch_size=16
	# Control: other data must give another model (training moves the
	# parameters, so the equalities below are not trivial).
	run other 1 "$llama" --set run.batch_size=16 --set dataset.seed=99
	if same single other 1e-6; then
		echo "FAIL: training on other data gave the same parameters"
		exit 1
	fi
	run accum4 1 "$llama" --set run.grad_accum=4
	same single accum4 1e-10
	run ds4 4 "$llama" --set strategy.name=ddp_ds
	same single ds4 1e-10
	run ds2_accum2 2 "$llama" --set strategy.name=ddp_ds --set run.grad_accum=2
	same single ds2_accum2 1e-10
	for mode in full grad_op none; do
		run "fsdp_$mode" 4 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode"
		same single "fsdp_$mode" 1e-10
	done
	run fsdp_hybrid 4 "$llama" --set strategy.name=fsdp \
		--set strategy.shard=hybrid --set strategy.shard_group_size=2
	same single fsdp_hybrid 1e-10
	# Activation checkpointing under the sharded strategies: backward
	# recomputes each layer, so fsdp gathers its unit again in the
	# middle of backward (and grad_op keeps it), offload's device copy
	# serves both passes; one rank without checkpointing is the oracle.
	ck="--set model.activation_checkpointing=true"
	for mode in full grad_op; do
		# shellcheck disable=SC2086
		run "ckpt_fsdp_$mode" 4 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode" $ck
		same single "ckpt_fsdp_$mode" 1e-10
		# and it did checkpoint: less activation memory a rank
		a=$(counter "fsdp_$mode" activations)
		b=$(counter "ckpt_fsdp_$mode" activations)
		echo "activation bytes (4 ranks): $a without, $b with checkpointing"
		[ "$b" -lt "$a" ]
	done
	# shellcheck disable=SC2086
	run ckpt_offload 4 "$llama" --set strategy.name=offload $ck
	same single ckpt_offload 1e-10
	# Evaluation where the last round leaves a rank without a batch (5
	# test rows in batches of 2 over 4 ranks): fsdp's forward is
	# collective, so that rank must still run one (it hung before), and
	# the test loss is the one rank's.
	set -- --set run.eval=true --set dataset.test_samples=5 \
		--set run.eval_batch_size=2
	run eval_single 1 "$llama" --set run.batch_size=16 "$@"
	run eval_fsdp 4 "$llama" --set strategy.name=fsdp "$@"
	a=$(test_loss eval_single) b=$(test_loss eval_fsdp)
	echo "test loss: one rank $a, 4 fsdp ranks $b"
	awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d
		exit !(a != "" && b != "" && d <= 1e-6 * (a < 0 ? -a : a)) }'
	# Prefetch depth: gathering 3 units ahead, or none, trains the same
	# model; 3 ahead holds more gather buffers at its peak than 1 (so
	# the option really gathers ahead), on demand no more than 1.
	run fsdp_pf3 4 "$llama" --set strategy.name=fsdp \
		--set strategy.prefetch_depth=3
	same single fsdp_pf3 1e-10
	run fsdp_pf0 4 "$llama" --set strategy.name=fsdp \
		--set strategy.prefetch=false
	same single fsdp_pf0 1e-10
	run fsdp_hybrid_pf2 4 "$llama" --set strategy.name=fsdp \
		--set strategy.shard=hybrid --set strategy.shard_group_size=2 \
		--set strategy.prefetch_depth=2
	same single fsdp_hybrid_pf2 1e-10
	g0=$(counter fsdp_pf0 gather) g1=$(counter fsdp_full gather)
	g3=$(counter fsdp_pf3 gather)
	echo "gather peaks (4 ranks summed): on demand $g0, depth 1 $g1, depth 3 $g3"
	test "$g3" -gt "$g1"
	test "$g1" -ge "$g0"
	if "$mpiexec" -np 2 "$mgrun" -c "$llama" --set strategy.name=fsdp \
		--set strategy.prefetch=false --set strategy.prefetch_depth=2 \
		--set run.out_dir="$work" --set run.name=pf_bad \
		>"$work/pf_bad.log" 2>&1; then
		echo "FAIL: prefetch_depth without prefetch accepted"
		exit 1
	fi
	grep -q "prefetch_depth applies to prefetch = true only" "$work/pf_bad.log"
	run off2 2 "$llama" --set strategy.name=offload --set run.batch_size=8
	same single off2 1e-10
	# Gradient accumulation under sharding: each fsdp mode on 2 ranks
	# with 2 micro-batches (hybrid: 2 groups of 2), 4 micro-batches on
	# 1 and 2 ranks, and offload on 1 and 2 ranks, all the whole-batch
	# model: full and hybrid sum reduce-scattered shards, grad_op and
	# none reduce once (no_sync), offload sums its shard on the device.
	for mode in full grad_op none; do
		run "fsdp_${mode}_accum2" 2 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode" --set run.grad_accum=2
		same single "fsdp_${mode}_accum2" 1e-10
	done
	run fsdp_hybrid_accum2 4 "$llama" --set strategy.name=fsdp \
		--set strategy.shard=hybrid --set strategy.shard_group_size=2 \
		--set run.batch_size=2 --set run.grad_accum=2
	same single fsdp_hybrid_accum2 1e-10
	run fsdp1_accum4 1 "$llama" --set strategy.name=fsdp \
		--set run.grad_accum=4
	same single fsdp1_accum4 1e-10
	for mode in full grad_op; do
		run "fsdp_${mode}_accum4" 2 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode" --set run.batch_size=2 \
			--set run.grad_accum=4
		same single "fsdp_${mode}_accum4" 1e-10
	done
	run off1_accum4 1 "$llama" --set strategy.name=offload \
		--set run.grad_accum=4
	same single off1_accum4 1e-10
	run off2_accum2 2 "$llama" --set strategy.name=offload \
		--set run.grad_accum=2
	same single off2_accum2 1e-10
	run off2_accum4 2 "$llama" --set strategy.name=offload \
		--set run.batch_size=2 --set run.grad_accum=4
	same single off2_accum4 1e-10
	# Stopped with accumulation and resumed on another rank count (the
	# same micro-batches of 8 rows, 2 a step: the data order): fsdp
	# full on 2 ranks then hybrid on 4, offload on 2 then on 1.
	run res_fsdp 2 "$llama" --set strategy.name=fsdp --set run.grad_accum=2 \
		--set run.stop_after=3
	run res_fsdp 4 "$llama" --set strategy.name=fsdp \
		--set strategy.shard=hybrid --set strategy.shard_group_size=2 \
		--set run.batch_size=2 --set run.grad_accum=2 --resume
	grep -q "resumed from .* at step 3" "$work/res_fsdp.log"
	same single res_fsdp 1e-10
	run res_off 2 "$llama" --set strategy.name=offload --set run.grad_accum=2 \
		--set run.stop_after=3
	run res_off 1 "$llama" --set strategy.name=offload \
		--set run.batch_size=8 --set run.grad_accum=2 --resume
	grep -q "resumed from .* at step 3" "$work/res_off.log"
	same single res_off 1e-10
	# Packed rows (documents restarting mid-row) on 2 ranks.
	run packed1 1 "$llama" --set run.batch_size=16 --set dataset.pack=true
	run packed2 2 "$llama" --set strategy.name=ddp_ds \
		--set run.batch_size=8 --set dataset.pack=true
	same packed1 packed2 1e-10
	;;
kernels)
	# The fused kernels (model.kernels = fused: add + RMSNorm, the
	# chunked linear + cross-entropy head in chunks of 7 tokens) under
	# the strategies: the unfused single-rank model within fp64 rounding,
	# untied and tied (the head's gradient lands in the embedding's
	# unit), and with LoRA on the head.
	set -- --set model.kernels=fused --set model.flce_chunk=7
	for tie in no yes; do
		t="--set model.tie_embeddings=$tie"
		run "single_$tie" 1 "$llama" --set run.batch_size=16 $t
		run "fused_$tie" 1 "$llama" --set run.batch_size=16 $t "$@"
		same "single_$tie" "fused_$tie" 1e-10
		run "ds2_accum2_$tie" 2 "$llama" --set strategy.name=ddp_ds \
			--set run.grad_accum=2 $t "$@"
		same "single_$tie" "ds2_accum2_$tie" 1e-10
		run "fsdp_full_$tie" 4 "$llama" --set strategy.name=fsdp \
			--set strategy.shard=full $t "$@"
		same "single_$tie" "fsdp_full_$tie" 1e-10
		run "off2_$tie" 2 "$llama" --set strategy.name=offload \
			--set run.batch_size=8 $t "$@"
		same "single_$tie" "off2_$tie" 1e-10
		# Accumulating: the tied head's gradient is summed into the
		# embedding's shard micro-batch by micro-batch.
		run "fsdp_full_accum2_$tie" 2 "$llama" --set strategy.name=fsdp \
			--set run.grad_accum=2 $t "$@"
		same "single_$tie" "fsdp_full_accum2_$tie" 1e-10
		run "off2_accum2_$tie" 2 "$llama" --set strategy.name=offload \
			--set run.grad_accum=2 $t "$@"
		same "single_$tie" "off2_accum2_$tie" 1e-10
	done
	l="--set model.tie_embeddings=no --set model.lora_rank=4
		--set model.lora_targets=q,v,head --set model.lora_dropout=0.2"
	run lora1 1 "$llama" --set run.batch_size=16 $l
	run lora_fsdp4 4 "$llama" --set strategy.name=fsdp $l "$@"
	same lora1 lora_fsdp4 1e-10
	;;
lora)
	# LoRA on the tiny llama: the base frozen, rank-4 adapters on every
	# projection and the untied head, adapter dropout on. Every
	# replicated strategy, every fsdp shard mode and offload on 2 or 4
	# ranks, and
	# 4 micro-batches on one rank, train the adapters one rank trains
	# with the whole batch;
	# dropout masks key on each row's global sample index.
	set -- --set model.lora_rank=4 --set model.lora_alpha=8 \
		--set model.lora_targets=all,head --set model.lora_dropout=0.2 \
		--set model.tie_embeddings=no
	run single 1 "$llama" --set run.batch_size=16 "$@"
	run other 1 "$llama" --set run.batch_size=16 --set dataset.seed=99 "$@"
	if same single other 1e-6; then
		echo "FAIL: training on other data gave the same adapters"
		exit 1
	fi
	# The checkpoint holds the adapters (and their optimizer state)
	# only: the frozen base is re-created from the seed.
	python3 - "$work/single/checkpoint.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    keys = [k for k in json.loads(f.read(n)) if k != "__metadata__"]
params = [k for k in keys if k.startswith("param/")]
assert params and all(".lora_" in k for k in params), params
assert len(params) == 2 * (2 * 7 + 1), len(params)
print("checkpoint: %d adapter tensors, no base" % len(params))
PY
	run accum4 1 "$llama" --set run.grad_accum=4 "$@"
	same single accum4 1e-10
	run ds4 4 "$llama" --set strategy.name=ddp_ds "$@"
	same single ds4 1e-10
	run ds2_accum2 2 "$llama" --set strategy.name=ddp_ds \
		--set run.grad_accum=2 "$@"
	same single ds2_accum2 1e-10
	run rr4 4 "$llama" --set strategy.name=ddp_rr "$@"
	same single rr4 1e-10
	# Plain DDP: every rank computes the rows one rank alone would.
	run single4 1 "$llama" "$@"
	run ddp4 4 "$llama" --set strategy.name=ddp "$@"
	same single4 ddp4 1e-10
	# Stopped and resumed: the base comes back from the seed.
	run resumed 2 "$llama" --set strategy.name=ddp_ds --set run.batch_size=8 \
		--set run.stop_after=3 "$@"
	run resumed 2 "$llama" --set strategy.name=ddp_ds --set run.batch_size=8 \
		--resume "$@"
	same single resumed 1e-10
	# Every fsdp shard mode: the frozen base sharded and gathered too.
	for mode in full grad_op none; do
		run "fsdp_$mode" 4 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode" "$@"
		same single "fsdp_$mode" 1e-10
	done
	run fsdp_hybrid 4 "$llama" --set strategy.name=fsdp \
		--set strategy.shard=hybrid --set strategy.shard_group_size=2 "$@"
	same single fsdp_hybrid 1e-10
	# grad_op keeps each unit's gather buffer all run, so the frozen
	# base is gathered in the first step only: with 3 and 6 steps,
	# 2 x calls(3) - calls(6) is the one-time gathers, per rank the 4
	# frozen flats (embedding, 2 layers, head). Full shard gathers the
	# base every step; only the head's 2 flats are gathered again in
	# backward in the first step alone (later ones keep the head from
	# forward, once the order is known).
	for mode in grad_op full; do
		for n in 3 6; do
			run "once_${mode}_$n" 2 "$llama" --set strategy.name=fsdp \
				--set strategy.shard="$mode" --set run.max_steps=$n "$@"
		done
		once=$((2 * $(counter "once_${mode}_3" calls) - \
			$(counter "once_${mode}_6" calls)))
		echo "fsdp $mode: base gathers not repeated after step 1: $once"
		case $mode in
		grad_op) test "$once" -eq $((2 * 4)) ;;
		full) test "$once" -eq $((2 * 2)) ;;
		esac
	done
	# Without dropout the q/k/v and gate/up adapters run fused (their
	# A's lie back to back in replicated storage and in flats).
	run nodrop1 1 "$llama" --set run.batch_size=16 "$@" \
		--set model.lora_dropout=0
	grep -q "LoRA backward of q_proj,k_proj,v_proj fused" \
		"$work/nodrop1.log" || {
		cat "$work/nodrop1.log"
		echo "FAIL: the q/k/v adapters did not run fused"
		exit 1
	}
	run nodrop_ds4 4 "$llama" --set strategy.name=ddp_ds "$@" \
		--set model.lora_dropout=0
	same nodrop1 nodrop_ds4 1e-10
	run nodrop_fsdp4 4 "$llama" --set strategy.name=fsdp "$@" \
		--set model.lora_dropout=0
	same nodrop1 nodrop_fsdp4 1e-10
	# Offload: the adapters' optimizer on the host, the base on the
	# device only.
	run off2 2 "$llama" --set strategy.name=offload --set run.batch_size=8 \
		"$@"
	same single off2 1e-10
	# Accumulating with a frozen base (and dropout keyed on each row's
	# place in the step): fsdp full and grad_op, offload, 2 ranks.
	for mode in full grad_op; do
		run "fsdp_${mode}_accum2" 2 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode" --set run.grad_accum=2 "$@"
		same single "fsdp_${mode}_accum2" 1e-10
	done
	run off2_accum2 2 "$llama" --set strategy.name=offload \
		--set run.grad_accum=2 "$@"
	same single off2_accum2 1e-10
	;;
qat)
	# Quantization-aware training (qat = 8da4w) on the tiny llama,
	# qat_group 16 (it divides hidden_size 32, heads x head_dim 32 and
	# intermediate_size 48): fake quantization adds no parameter,
	# gradient or unit, and its scales are per token (activations) and
	# per weight group of one rank's lent weight, so ddp_ds, fsdp (full,
	# grad_op), offload on 2 ranks and 2 micro-batches train what one
	# rank trains with the whole batch: full fine-tuning (the weight
	# masks applied in place to the lent gradients, also across
	# micro-batches) and LoRA (the frozen base fake-quantized).
	q="--set model.qat=8da4w --set model.qat_group=16"
	for kind in full lora; do
		set -- $q
		[ $kind = lora ] && set -- "$@" --set model.lora_rank=4 \
			--set model.lora_alpha=8 \
			--set model.lora_targets=all,head \
			--set model.lora_dropout=0.2 --set model.tie_embeddings=no
		run "single_$kind" 1 "$llama" --set run.batch_size=16 "$@"
		grep -q "qat = 8da4w" "$work/single_$kind.log" || {
			cat "$work/single_$kind.log"
			echo "FAIL: the $kind run does not say it trains with qat"
			exit 1
		}
		# Control: without qat another model (the quantizers are in
		# the path, so the equalities below are not the plain ones).
		run "float_$kind" 1 "$llama" --set run.batch_size=16 "$@" \
			--set model.qat=none
		if same "single_$kind" "float_$kind" 1e-6; then
			echo "FAIL: $kind: qat trained the float model"
			exit 1
		fi
		run "ds2_$kind" 2 "$llama" --set strategy.name=ddp_ds \
			--set run.batch_size=8 "$@"
		same "single_$kind" "ds2_$kind" 1e-10
		for mode in full grad_op; do
			run "fsdp_${mode}_$kind" 2 "$llama" --set strategy.name=fsdp \
				--set strategy.shard="$mode" --set run.batch_size=8 "$@"
			same "single_$kind" "fsdp_${mode}_$kind" 1e-10
		done
		run "fsdp_full_accum2_$kind" 2 "$llama" --set strategy.name=fsdp \
			--set strategy.shard=full --set run.grad_accum=2 "$@"
		same "single_$kind" "fsdp_full_accum2_$kind" 1e-10
		run "off2_$kind" 2 "$llama" --set strategy.name=offload \
			--set run.batch_size=8 "$@"
		same "single_$kind" "off2_$kind" 1e-10
	done
	;;
qlora)
	# QLoRA: the lora scenario's adapters over a base of NF4 blobs
	# (quant = nf4): replicated strategies keep the blobs in their
	# frozen buffer, fsdp shards and gathers them as bytes in packed
	# flats (every shard mode), offload keeps them on the device. N
	# ranks train the adapters one rank trains with the N-times batch.
	set -- --set model.lora_rank=4 --set model.lora_alpha=8 \
		--set model.lora_targets=all,head --set model.lora_dropout=0.2 \
		--set model.tie_embeddings=no --set model.quant=nf4
	run single 1 "$llama" --set run.batch_size=16 "$@"
	grep -q "15360 frozen in NF4" "$work/single.log" || {
		cat "$work/single.log"
		echo "FAIL: the run does not say its base is NF4"
		exit 1
	}
	# Not the float base's adapters: the base really is quantized.
	run float 1 "$llama" --set run.batch_size=16 "$@" \
		--set model.quant=none
	if same single float 1e-6; then
		echo "FAIL: the NF4 base trained the float base's adapters"
		exit 1
	fi
	python3 - "$work/single/checkpoint.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    keys = [k for k in json.loads(f.read(n)) if k != "__metadata__"]
params = [k for k in keys if k.startswith("param/")]
assert params and all(".lora_" in k for k in params), params
assert len(params) == 2 * (2 * 7 + 1), len(params)
print("checkpoint: %d adapter tensors, no NF4 base" % len(params))
PY
	run accum4 1 "$llama" --set run.grad_accum=4 "$@"
	same single accum4 1e-10
	for s in ddp_ds ddp_rr; do
		run "${s}4" 4 "$llama" --set strategy.name="$s" "$@"
		same single "${s}4" 1e-10
	done
	run single4 1 "$llama" "$@"
	run ddp4 4 "$llama" --set strategy.name=ddp "$@"
	same single4 ddp4 1e-10
	for mode in full grad_op none; do
		run "fsdp_$mode" 4 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode" "$@"
		same single "fsdp_$mode" 1e-10
	done
	run fsdp_hybrid 4 "$llama" --set strategy.name=fsdp \
		--set strategy.shard=hybrid --set strategy.shard_group_size=2 "$@"
	same single fsdp_hybrid 1e-10
	# 3 ranks: packed shards that cut the blobs at other places.
	run fsdp3 3 "$llama" --set strategy.name=fsdp \
		--set run.batch_size=4 "$@"
	run single12 1 "$llama" --set run.batch_size=12 "$@"
	same single12 fsdp3 1e-10
	run off2 2 "$llama" --set strategy.name=offload --set run.batch_size=8 \
		"$@"
	same single off2 1e-10
	# Stopped and resumed under fsdp: the NF4 base comes back from the
	# seed, the adapters from the checkpoint.
	run resumed 2 "$llama" --set strategy.name=fsdp --set run.batch_size=8 \
		--set run.stop_after=3 "$@"
	run resumed 2 "$llama" --set strategy.name=fsdp --set run.batch_size=8 \
		--resume "$@"
	same single resumed 1e-10
	;;
dpo_fp32)
	# How far fp32 runs that train the same model may drift apart, the
	# bound the GPU suite holds DPO with full fine-tuning to
	# (gpu_equivalence_llm.sh): with SGD, 4 ranks (another reduction
	# order) match one rank to fp32 rounding; with AdamW, which divides
	# each gradient by its own running magnitude, the rounding of tiny
	# gradients grows by orders of magnitude, and one rank with the batch
	# as 2 micro-batches (the same model, another summation order) drifts
	# as far. The 4-rank run must stay within 4x that floor.
	set -- --set model.objective=dpo --set model.dpo_beta=0.5 \
		--set dataset.pairs=true --set dataset.prompt_frac=0.3 \
		--set model.tie_embeddings=no --set optimizer.max_grad_norm=0 \
		--set run.precision=fp32
	run sgd_single 1 "$llama" --set run.batch_size=16 \
		--set optimizer.name=sgd "$@"
	run sgd_ds4 4 "$llama" --set strategy.name=ddp_ds \
		--set optimizer.name=sgd "$@"
	same sgd_single sgd_ds4 1e-6
	run adamw_single 1 "$llama" --set run.batch_size=16 "$@"
	run adamw_accum 1 "$llama" --set run.batch_size=8 \
		--set run.grad_accum=2 "$@"
	run adamw_ds4 4 "$llama" --set strategy.name=ddp_ds "$@"
	floor=$(rdiff adamw_single adamw_accum)
	bound=$(awk -v f="$floor" 'BEGIN { printf "%.3g", 4 * (f > 1e-6 ? f : 1e-6) }')
	echo "fp32 AdamW: one rank with 2 micro-batches drifts $floor; bound $bound"
	# the amplification is real: else this scenario proves nothing
	awk -v f="$floor" 'BEGIN { exit !(f > 1e-5) }' ||
		{ echo "FAIL: AdamW drift $floor: no amplification"; exit 1; }
	same adamw_single adamw_ds4 "$bound"
	;;
dpo)
	# DPO with LoRA on the tiny llama (model objective = dpo): rows of
	# preference pairs [prompt + chosen | prompt + rejected], a loss per
	# pair against the reference (the base, adapters off) computed in
	# every forward. A pair is one row, so ranks and micro-batches split
	# pairs like samples: N ranks, micro-batches, fsdp (full, grad_op),
	# ddp_rr and offload train the adapters one rank trains with the
	# whole batch; then full fine-tuning, whose reference is a frozen copy.
	set -- --set model.lora_rank=4 --set model.lora_alpha=8 \
		--set model.lora_targets=all,head --set model.tie_embeddings=no \
		--set model.objective=dpo --set model.dpo_beta=0.5 \
		--set model.dpo_label_smoothing=0.1 --set dataset.pairs=true \
		--set dataset.prompt_frac=0.3
	run single 1 "$llama" --set run.batch_size=16 "$@"
	grep -q "rewards/margins" "$work/single.log" || {
		cat "$work/single.log"
		echo "FAIL: no DPO metrics in the progress line"
		exit 1
	}
	run other 1 "$llama" --set run.batch_size=16 --set dataset.seed=99 "$@"
	if same single other 1e-6; then
		echo "FAIL: training on other pairs gave the same adapters"
		exit 1
	fi
	run accum4 1 "$llama" --set run.grad_accum=4 "$@"
	same single accum4 1e-10
	run ds2 2 "$llama" --set strategy.name=ddp_ds --set run.batch_size=8 "$@"
	same single ds2 1e-10
	run ds4 4 "$llama" --set strategy.name=ddp_ds "$@"
	same single ds4 1e-10
	run ds2_accum2 2 "$llama" --set strategy.name=ddp_ds \
		--set run.grad_accum=2 "$@"
	same single ds2_accum2 1e-10
	for mode in full grad_op; do
		run "fsdp_$mode" 4 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode" "$@"
		same single "fsdp_$mode" 1e-10
	done
	run rr4 4 "$llama" --set strategy.name=ddp_rr "$@"
	same single rr4 1e-10
	run off2 2 "$llama" --set strategy.name=offload --set run.batch_size=8 \
		"$@"
	same single off2 1e-10
	# Full fine-tuning: the reference is a frozen copy of the starting
	# weights (sharded or replicated as the strategy keeps frozen
	# parameters, never checkpointed: a resume remakes it from the start).
	# No clipping here: the gradient norm is summed in F32 (mg_optim_vals),
	# so a clipped step's scale differs by F32 rounding between shardings,
	# which AdamW's moments carry into the later unclipped steps (1e-8).
	set -- --set optimizer.max_grad_norm=0 \
		--set model.tie_embeddings=no --set model.objective=dpo \
		--set model.dpo_beta=0.5 --set dataset.pairs=true \
		--set dataset.prompt_frac=0.3
	run full1 1 "$llama" --set run.batch_size=16 "$@"
	run full_ds2 2 "$llama" --set strategy.name=ddp_ds \
		--set run.batch_size=8 "$@"
	same full1 full_ds2 1e-10
	for mode in full grad_op; do
		run "full_fsdp_$mode" 4 "$llama" --set strategy.name=fsdp \
			--set strategy.shard="$mode" "$@"
		same full1 "full_fsdp_$mode" 1e-10
	done
	run full_off2 2 "$llama" --set strategy.name=offload \
		--set run.batch_size=8 "$@"
	same full1 full_off2 1e-10
	run full_res 4 "$llama" --set strategy.name=fsdp --set run.stop_after=3 \
		"$@"
	run full_res 2 "$llama" --set strategy.name=fsdp --set run.batch_size=8 \
		--resume "$@"
	same full1 full_res 1e-10
	;;
update_in_backward)
	# fsdp's update_in_backward (each unit updated as its gradient shard
	# lands) trains the single-rank model in every shard mode, and with
	# 2 micro-batches (the update after the last one); without clipping,
	# which it refuses. Pooled gradient shards (G > 1, no accumulation)
	# hold less than the whole shard fsdp keeps otherwise.
	set -- --set optimizer.max_grad_norm=0
	run single 1 "$llama" --set run.batch_size=16 "$@"
	set -- "$@" --set strategy.name=fsdp --set strategy.update_in_backward=true
	for mode in full grad_op none; do
		run "ubw_$mode" 4 "$llama" --set strategy.shard="$mode" "$@"
		same single "ubw_$mode" 1e-10
	done
	run ubw_hybrid 4 "$llama" --set strategy.shard=hybrid \
		--set strategy.shard_group_size=2 "$@"
	same single ubw_hybrid 1e-10
	run ubw_accum 2 "$llama" --set run.grad_accum=2 "$@"
	same single ubw_accum 1e-10
	# stopped on 4 ranks, resumed on 2 (the optimizer state is the same
	# whichever way the updates ran)
	run ubw_res 4 "$llama" --set run.stop_after=3 "$@"
	run ubw_res 2 "$llama" --set run.batch_size=8 --resume "$@"
	grep -q "resumed from .* at step 3" "$work/ubw_res.log"
	same single ubw_res 1e-10
	# the reported gradient norms are the single rank's (6 digits)
	[ "$(norms single)" = "$(norms ubw_full)" ] ||
		{ echo "FAIL: gradient norms differ"; exit 1; }
	run plain 4 "$llama" --set strategy.name=fsdp --set optimizer.max_grad_norm=0
	same single plain 1e-10
	a=$(counter ubw_full grads) b=$(counter plain grads)
	echo "gradient bytes (sum of 4 ranks): update_in_backward $a, after backward $b"
	awk -v a="$a" -v b="$b" 'BEGIN { exit !(a < b) }' ||
		{ echo "FAIL: pooled gradient shards not smaller"; exit 1; }
	refuses_clip fsdp
	# offload's update_in_backward (each unit's host update as its
	# gradient shard reaches the host, on the side stream): the same
	# arithmetic on the same values as after backward, so the same bits
	# as offload without it on 4 ranks, and the single rank on 1 and 4
	# ranks and with 2 micro-batches; clipping refused alike.
	set -- --set optimizer.max_grad_norm=0 --set strategy.name=offload
	run off_plain 4 "$llama" "$@"
	set -- "$@" --set strategy.update_in_backward=true
	run off_ubw 4 "$llama" "$@"
	grep -q "offload: update_in_backward: each unit" "$work/off_ubw.log" ||
		{ echo "FAIL: offload did not say update_in_backward"; exit 1; }
	same off_plain off_ubw 0
	same single off_ubw 1e-10
	run off_ubw1 1 "$llama" --set run.batch_size=16 "$@"
	same single off_ubw1 1e-10
	run off_ubw_accum 2 "$llama" --set run.grad_accum=2 "$@"
	same single off_ubw_accum 1e-10
	[ "$(norms single)" = "$(norms off_ubw)" ] ||
		{ echo "FAIL: offload gradient norms differ"; exit 1; }
	refuses_clip offload
	;;
*)
	echo "unknown scenario $scenario"
	exit 2
	;;
esac
echo "PASS: $scenario"
