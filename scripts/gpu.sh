#!/bin/bash
# gpu.sh - THE script for the GPU machine (the device tool's `run`), from
# the repository root: runs every GPU test and benchmark with binaries
# built HERE by scripts/device-prepare.sh (carry build-gpu and .deps).
#
#   scripts/gpu.sh [tests|bench|train|compare|llama|all] [args...]  (default: all)
#     tests [group...]   op tests: every CUDA op against its CPU twin
#     bench              op micro-benchmarks
#     train [epochs]     Fashion-MNIST per precision; fp32, bf16 and fp16
#                        must each reach 92% (MG_TRAIN_MIN_ACC)
#     torch_check        mgrun's MobileNetV2 step (fp64, CPU) against
#                        torchvision's (tests/mobilenetv2/torch_check.py)
#     compare [sizes] [precs]  mgrun against PyTorch (bench/mbv2_vs_torch.py)
#     like4like [mbv2] [lora] [full]  bench/RESULTS.md's MobileNetV2,
#                        LoRA and full fine-tuning tables (default: the
#                        first two) against PyTorch at its best (graphed
#                        MobileNetV2, compiled transformers/peft), both
#                        sides measured the same way, the bf16 GEMM
#                        ceiling on random data first
#                        (bench/like4like.py), printed as markdown
#     llama [steps]      LLM ops vs CPU twins, llama vs transformers
#                        (tests/llama/hf_check.py), tiny llama training
#     families           the decoder families (Qwen2, Qwen3, Mistral,
#                        Gemma 2, Gemma 3 text, Phi-3; MG_FAMILIES a
#                        subset, e.g. gemma2,phi3)
#                        against transformers: loss, gradients, greedy
#                        generation, export (tests/llama/family_check.py),
#                        then the LLM ops and attention with windows
#                        (also in llama)
#     text               mgrun tokenize against HF tokenizers
#                        (tests/text/hf_tokenizers_check.py), LoRA adapters
#                        in and out of peft (tests/llama/peft_check.py),
#                        instruction data trained on the GPU
#     dpo [steps]        DPO: its ops against the CPU twins, the loss and
#                        metrics against TRL's formula in PyTorch
#                        (tests/llama/dpo_check.py), conf/dpo.ini
#                        trained on the GPU in fp32 and bf16 (held-out
#                        rewards/accuracies, step time)
#     lora [cells...]    LoRA tokens/s beside transformers + peft
#                        (bench/lora_vs_torch.sh),
#                        then mgrun generate from it on the GPU
#     qlora [cells...]   QLoRA (model.quant = nf4) on the GPU against the CPU
#                        (tests/gpu/qlora_check.sh), then tokens/s and peak
#                        memory of bench/lora_vs_torch.sh's nf4 cells
#                        (default: llama3-8b,2,512,qv,nf4)
#     dist [n]           n (default 2) GPUs: NCCL communicator test, strategy
#                        equivalence with NCCL, launcher supervision
#     watchdog [n]       the collective watchdog on n GPUs over NCCL (also
#                        in dist)
#     dist_llm [n]       only the llama, LoRA and QLoRA equivalence on n GPUs
#                        (tests/strategies/gpu_equivalence_llm.sh)
#     scaling [gpus...]  ddp/ddp_rr/ddp_ds scaling beside PyTorch DDP
#                        (bench/ddp_scaling.sh)
#     sweeps [names...]  conf/sweep_NAME.ini (default: figure1 figure2 table2
#                        table3 figure3 offload_io; `kernels` is seed 002's
#                        kernel swap on Llama 3.2 1B, `seed002` its shard
#                        mode table at 7B on 4 GPUs, `seed000_llm` seed
#                        000's Llama-3-8B LoRA iteration times, needs
#                        .deps/tokenizers; `seed003_llm` seed 003's
#                        memory and traffic charts at 3B), results in
#                        sweeps.tgz;
#                        MG_SWEEP_ARGS go to every sweep (--repeats 3)
#     sharding [n]       ddp_ds, fsdp modes and offload on n GPUs beside
#                        PyTorch FSDP2 (bench/sharding.sh), and the host
#                        optimizer micro-benchmark
#     fsdp_llm [n]       Llama-2-7B-shape full fine-tuning on n GPUs
#                        (default: all visible), every fsdp shard mode and
#                        offload beside PyTorch FSDP2 (bench/fsdp_llm.sh),
#                        with the bf16 GEMM ceiling measured first
#     scale7b [n]        Llama-2-7B shape trained 4 steps on n GPUs (default:
#                        all visible) in every fsdp mode that fits and
#                        offload, each step's loss against 1 GPU with the
#                        optimizer offloaded (tests/gpu/scale_7b_check.sh)
#     lora_scaling [gpus...]  LoRA of the Llama-3-8B shape under ddp_ds
#                        and fsdp on 1 2 4 GPUs (bench/lora_scaling.sh)
#     techniques         seed 001's LoRA / QLoRA / DPO / QAT sweep at Llama
#                        3.2 1B (scripts/techniques.sh: QAT against PTQ
#                        in int4), the DPO and QAT cost ratios
#                        (bench/techniques_ratios.py); results in
#                        techniques.tgz
#     kernels [sizes] [precs]  one profiled MobileNetV2 step window per
#                        cell (batch 64, static device batch; prec tf32 =
#                        fp32 with run.tf32): the top 40 kernels by device
#                        time
#     llm_kernels [cells...]  one profiled window (CUPTI) of like4like's
#                        LLM cells (default: full:llama3.2-1b,8,512
#                        lora:llama3-8b,8,512,all), mgrun run as
#                        like4like runs it: the top kernels a step with
#                        their share of the device time, and by group
#                        (GEMMs, attention, norms, ...; bench/llm_kernels.py)
#     profile            the [profile] window (CUPTI) against mgrun's own
#                        counters, 1 GPU and 2 where visible
#                        (tests/gpu/profile_check.sh; also in all)
#     qat                the fake-quantization ops against their CPU
#                        twins and their bandwidth (bench_gpu_ops qat),
#                        then QAT against post-training quantization on
#                        a small model trained here on the fortune files
#                        (tests/llama/qat_vs_ptq.sh; carry .deps/fortunes
#                        and .deps/tokenizers)
#     rmsnorm            seed 002's kernel swap: the fused add + RMSNorm
#                        against mgrun's unfused ops (bench_gpu_ops
#                        fused) and PyTorch's at micro-batches 8 and 32
#                        (bench/rmsnorm_vs_torch.py)
#     attention [bf16|f16]  the attention op tests (flash and tiled kernels
#                        against the CPU twin), then the attention
#                        micro-benchmark (bench_gpu_ops attention) and
#                        PyTorch SDPA on the same shapes
#                        (bench/attention_vs_torch.py) with the ratio
#
# The GPU machine lacks inih, cJSON and OpenBLAS: their .debs (.deps/debs)
# are unpacked with dpkg -x into $MG_GPU_TMP/mgdeps (default /tmp). cuDNN,
# cuBLAS and the CUDA runtime are found on the machine (the CUDA toolkit or PyTorch's nvidia-*
# pip packages). Binaries are run directly (ctest files hold this
# machine's paths). Logs go to ./gpu-out, or under the device tool's $OUT
# as one archive a mode, $OUT/gpu-MODE.tgz (that tool brings back at most
# 8 files, and a mode writes dozens); the last lines printed are the
# summary. The exit status is 1
# when any step of the chosen mode failed (every mode goes through run).
set -u
cd "$(dirname "$0")/.." || exit 1
root=$PWD
build=${MG_GPU_BUILD:-build-gpu}
what=${1:-all}
shift || true
out=$root/gpu-out
if [ -n "${OUT:-}" ]; then
	# a free name (a call may run a mode twice), packed on exit; TERM
	# and INT exit through the trap too
	tag=gpu-$what
	i=2
	while [ -e "$OUT/$tag.tgz" ] || [ -e "$OUT/$tag" ]; do
		tag=gpu-$what-$i
		i=$((i + 1))
	done
	out=$OUT/$tag
	trap 'tar czf "$OUT/$tag.tgz" -C "$OUT" "$tag" && rm -rf "${OUT:?}/$tag"' EXIT
	trap 'exit 143' TERM INT
fi
mkdir -p "$out"

# Scratch space for runs and unpacked libraries; MG_GPU_TMP lets two
# modes run at once on different GPUs (CUDA_VISIBLE_DEVICES) without
# sharing run folders. The modes pass it unquoted inside sh -c strings,
# so it must not hold blanks.
tmp=${MG_GPU_TMP:-/tmp}
case $tmp in *[[:space:]]*)
	echo "MG_GPU_TMP must not contain blanks: '$tmp'" >&2
	exit 2
	;;
esac
mkdir -p "$tmp"

# Runtime libraries that are not on the GPU machine.
deps=$tmp/mgdeps
mkdir -p "$deps"
for f in .deps/debs/*.deb; do
	[ -e "$f" ] && dpkg -x "$f" "$deps"
done
libpath="$deps/usr/lib/x86_64-linux-gnu"
libpath="$libpath:$deps/usr/lib/x86_64-linux-gnu/openblas-pthread"

# The folder holding library $1 (first match), searched where CUDA and
# PyTorch's wheels put it.
find_lib() {
	local d
	for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
		/usr/local/cuda/extras/CUPTI/lib64 \
		/usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64; do
		[ -e "$d/$1" ] && { echo "$d"; return; }
	done
	local sp
	for sp in $(python3 -c 'import site,sys; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null) /opt/torch/.venv/lib/python3*/site-packages; do
		[ -d "$sp/nvidia" ] || continue
		local hit
		hit=$(find "$sp/nvidia" -name "$1" 2>/dev/null | head -1)
		[ -n "$hit" ] && { dirname "$hit"; return; }
	done
	local hit
	hit=$(find / -xdev -name "$1" -not -path '/proc/*' 2>/dev/null | head -1)
	[ -n "$hit" ] && dirname "$hit"
}

found="== host: $(hostname) $(uname -r)"
for lib in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libcudart.so.13 \
	libnvrtc.so.13 libcupti.so.13; do
	dir=$(find_lib "$lib")
	found="$found
$lib: ${dir:-NOT FOUND}"
	[ -n "$dir" ] && libpath="$libpath:$dir"
done
echo "$found" | tee "$out/env.txt"
export LD_LIBRARY_PATH="$root/$build/core:$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MG_PLUGIN_PATH="$root/$build/plugins"
export NCCL_NVLS_ENABLE=0
{
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
	nvidia-smi
	echo "== ldd test_gpu_ops"
	ldd "$build/tests/gpu/test_gpu_ops" | grep -E "not found|cudnn|cublas|cudart|libmg|openblas"
} 2>&1 | tee -a "$out/env.txt"

status=0
# run LOG NAME COMMAND...: append the output to $out/LOG.log, with a time
# limit so one hang cannot eat the whole lease.
run() {
	local log=$1 name=$2
	shift 2
	echo "== $name: $*" | tee -a "$out/$log.log"
	local t0=$SECONDS
	timeout "${MG_GPU_TIMEOUT:-300}" "$@" >>"$out/$log.log" 2>&1
	local rc=$?
	if [ $rc -eq 124 ]; then
		# timeout signals its own process group, but a nested timeout
		# (the bench scripts limit each run) makes a group of its own,
		# out of reach: its mgrun or PyTorch run would go on beside the
		# next command (the disturbed row in bench/RESULTS.md, 2026-11-27,
		# "Copy engines with eager steps"). Stop what is left of this
		# one first.
		pkill -TERM -f "$build/core/mgrun|bench/torch_" 2>/dev/null
		sleep 5
		pkill -KILL -f "$build/core/mgrun|bench/torch_" 2>/dev/null
	fi
	echo "== $name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/$log.log"
	[ $rc -ne 0 ] && [ $rc -ne 77 ] && status=1
	return 0
}

bin=$build/tests/gpu
groups="conv depthwise batchnorm elementwise pool linear dropout loss pref
resize optim convert determinism graph llm attention nf4 qat fused side"
[ $# -gt 0 ] && groups="$*"
if [ "$what" = tests ] || [ "$what" = all ]; then
	# One process per group: a crash in one still lets the others run.
	for g in $groups; do
		run test_gpu_ops "$g" "$bin/test_gpu_ops" "$g"
	done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
	run bench_f32 bench_f32 "$bin/bench_gpu_ops" 64 f32
	run bench_f16 bench_f16 "$bin/bench_gpu_ops" 64 f16
	# the fused kernels of the llama `kernels` option against the
	# unfused ops: FLCE at 4096 x 128256 x 4096 bf16, add + RMSNorm
	run bench_fused bench_fused "$bin/bench_gpu_ops" fused
fi

mgrun="$build/core/mgrun"
# Fashion-MNIST travels in .deps when the machine lacks Debian's package.
fashion=/usr/share/datasets/fashion-mnist
[ -d "$fashion" ] || fashion=$root/.deps/fashion-mnist
export MG_FASHION_DIR=$fashion
if [ "$what" = train ] || [ "$what" = all ]; then
	# The GPU test of training: Fashion-MNIST to >= 92% test accuracy in
	# fp32, and one run per half precision (the seed paper's finding:
	# accuracy does not depend on precision).
	epochs=${1:-12}
	for prec in fp32 bf16 fp16; do
		run train "train $prec" "$mgrun" -c conf/fashion_mnist_gpu.ini \
			--set dataset.dir="$fashion" --set run.precision=$prec --set run.epochs="$epochs" \
			--set run.out_dir=$tmp/mgruns --set run.name="train_$prec" \
			--set run.log_every=1000
	done
	awk '/^== train/ {p=$3; sub(":", "", p)} /^epoch [0-9]+:/ {e=$0}
		/^test accuracy/ {print "train", p, $3, e}' \
		"$out/train.log" | tee "$out/train_summary.txt"
	# every precision to the same bar: half precision must not cost
	# accuracy (a run that printed none fails too)
	for prec in fp32 bf16 fp16; do
		acc=$(awk -v p=$prec '$2 == p {sub("%", "", $3); print $3}' \
			"$out/train_summary.txt")
		if ! awk -v a="${acc:-0}" -v m="${MG_TRAIN_MIN_ACC:-92}" \
			'BEGIN { exit !(a >= m) }'; then
			echo "FAIL: $prec test accuracy ${acc:-none}% < ${MG_TRAIN_MIN_ACC:-92}%" |
				tee -a "$out/test_train.log"
			status=1
		fi
	done
fi
if [ "$what" = torch_check ] || [ "$what" = all ]; then
	# one fp64 training step of mgrun's MobileNetV2 against torchvision's
	run test_torch_check torch_check sh -c "'$build/tests/mobilenetv2/test_mobilenetv2' \
		'$build/plugins/libmg_mobilenetv2.so' dump $tmp/mgstep.txt &&
		python3 tests/mobilenetv2/torch_check.py $tmp/mgstep.txt"
	grep -E "^(FAIL|ok)|error" "$out/test_torch_check.log"
fi
if [ "$what" = compare ] || [ "$what" = all ]; then
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-500} run bench_compare compare \
		python3 bench/mbv2_vs_torch.py "$mgrun" $tmp/mgbench \
		${1:-28,100,224,500} ${2:-fp32,fp16,bf16}
	cp $tmp/mgbench/like4like.json "$out/bench_mbv2.json" 2>/dev/null
	sed -n '/^== like4like tables/,$p' "$out/bench_compare.log"
fi
if [ "$what" = like4like ]; then
	# bench/RESULTS.md's MobileNetV2 and LoRA tables, like for like
	# (MG_L4L_* in bench/like4like.py narrow or widen it)
	# The bf16 GEMM ceiling on random data first: the MFU columns'
	# yardstick, measured in the same call.
	run bench_gemm gemm "$bin/bench_gpu_ops" gemm
	ceiling=$(sed -n 's/^GEMM ceiling bf16: \([0-9.]*\) TFLOP.*/\1/p' \
		"$out/bench_gemm.log" | tail -1)
	export MG_L4L_CEILING=${ceiling:-0}
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-560} run bench_like4like like4like \
		python3 bench/like4like.py "$mgrun" $tmp/mgl4l "$@"
	cp $tmp/mgl4l/like4like.json "$out/" 2>/dev/null
	sed -n '/^== like4like tables/,$p' "$out/bench_like4like.log"
fi
if [ "$what" = llama ] || [ "$what" = all ]; then
	# The llama model: its ops against their CPU twins, its loss and
	# gradients against Hugging Face transformers on the same folders
	# (tests/llama/hf_check.py), and the tiny model learning on the GPU
	# in fp32 and bf16 (tests/llama/train.sh's bar).
	run test_gpu_ops llm "$bin/test_gpu_ops" llm
	run test_llama_hf hf_check python3 tests/llama/hf_check.py "$mgrun" \
		$tmp/mghf
	# MG_FAMILIES: a comma-separated subset (default: every family)
	run test_llama_hf family_check python3 tests/llama/family_check.py \
		"$mgrun" $tmp/mgfam ${MG_FAMILIES:+"$MG_FAMILIES"}
	for prec in fp32 bf16; do
		run test_llama_train "llama $prec" "$mgrun" -c conf/llama_tiny.ini \
			--set run.device=cuda --set run.precision=$prec \
			--set run.max_steps=${1:-120} --set run.out_dir=$tmp/mgllama \
			--set run.name=tiny_$prec --set run.log_every=40
		# the same run with the fused kernels: the same losses within
		# the precision's rounding
		run test_llama_train "llama $prec fused" "$mgrun" \
			-c conf/llama_tiny.ini --set run.device=cuda \
			--set run.precision=$prec --set model.kernels=fused \
			--set model.flce_chunk=500 \
			--set run.max_steps=${1:-120} --set run.out_dir=$tmp/mgllama \
			--set run.name=tiny_${prec}_fused --set run.log_every=40
	done
	# generation on the GPU from those checkpoints (mgrun generate,
	# decode with the key/value cache): 16 greedy ids each; in fp32 the
	# same ids as the CPU decoding the same checkpoint
	for prec in fp32 bf16; do
		gset="--set run.precision=$prec --set run.out_dir=$tmp/mgllama \
			--set run.name=tiny_$prec"
		run test_llama_generate "generate $prec cuda" sh -c \
			"'$mgrun' generate -c conf/llama_tiny.ini --set run.device=cuda \
			$gset --ids --prompt '5 17 42 99 3' --greedy --max-new-tokens 16 \
			>$tmp/mgllama/gen_$prec.cuda && cat $tmp/mgllama/gen_$prec.cuda"
	done
	run test_llama_generate "generate fp32 cpu" sh -c \
		"'$mgrun' generate -c conf/llama_tiny.ini --set run.device=cpu \
		--set run.precision=fp32 --set run.out_dir=$tmp/mgllama \
		--set run.name=tiny_fp32 --ids --prompt '5 17 42 99 3' --greedy \
		--max-new-tokens 16 >$tmp/mgllama/gen_fp32.cpu && \
		cat $tmp/mgllama/gen_fp32.cpu && \
		[ \$(wc -w <$tmp/mgllama/gen_bf16.cuda) -eq 16 ] && \
		cmp $tmp/mgllama/gen_fp32.cpu $tmp/mgllama/gen_fp32.cuda"
	grep -E "^(ok|FAIL)|hf_check" "$out/test_llama_hf.log"
	grep -E "^== llama|^epoch 1:|step time" "$out/test_llama_train.log"
	grep -E "^== generate|^[0-9 ]+$|tokens/s" "$out/test_llama_generate.log"
fi
if [ "$what" = families ]; then
	# the families against transformers first (MG_FAMILIES: a
	# comma-separated subset, default every family), then the ops they use
	run test_llama_hf family_check python3 tests/llama/family_check.py \
		"$mgrun" $tmp/mgfam ${MG_FAMILIES:+"$MG_FAMILIES"}
	run test_gpu_ops llm "$bin/test_gpu_ops" llm attention
	grep -E "^(ok|FAIL|PASS|SKIPPED)|family_check|failure" \
		"$out/test_llama_hf.log" "$out/test_gpu_ops.log" | tail -80
fi
if [ "$what" = text ] || [ "$what" = all ]; then
	# The text side against the libraries that define it: ids and decoded
	# text of both tokenizer files against HF tokenizers on the corpus
	# device-prepare.sh wrote; mgrun's PEFT adapters loaded by peft and
	# peft's by mgrun; an instruction dataset trained on the GPU.
	run test_text hf_tokenizers python3 tests/text/hf_tokenizers_check.py \
		"$mgrun" .deps/text_corpus.jsonl .deps/tokenizers/llama3 \
		.deps/tokenizers/llama2
	run test_text peft_check python3 tests/llama/peft_check.py "$mgrun" \
		$tmp/mgpeft
	run test_text export_check python3 tests/llama/export_check.py "$mgrun" \
		$tmp/mgexport
	run test_text "alpaca bf16" "$mgrun" -c conf/alpaca.ini \
		--set run.device=cuda --set run.precision=bf16 \
		--set run.max_steps=20 --set run.out_dir=$tmp/mgtext
	grep -E "^== |equal|FAIL|MISMATCH|^ok|^epoch|tokens/s" "$out/test_text.log" | tail -60
fi
if [ "$what" = dpo ]; then
	run test_dpo "pref ops" "$bin/test_gpu_ops" pref
	run test_dpo dpo_check python3 tests/llama/dpo_check.py "$mgrun" \
		$tmp/mgdpo_check
	for prec in fp32 bf16; do
		run test_dpo "dpo $prec" "$mgrun" -c conf/dpo.ini \
			--set run.device=cuda --set run.precision=$prec \
			--set run.epochs=1 --set run.max_steps=${1:-30} \
			--set run.out_dir=$tmp/mgdpo --set run.name=dpo_$prec
	done
	grep -E "^== |^ok|FAIL|^epoch 1:|step time|captured" "$out/test_dpo.log"
fi
if [ "$what" = qat ]; then
	run test_qat "qat ops" "$bin/test_gpu_ops" qat
	run test_qat "qat ops bench" "$bin/bench_gpu_ops" qat
	# MG_QAT_* as tests/llama/qat_vs_ptq.sh says
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-500} run test_qat qat_vs_ptq \
		tests/llama/qat_vs_ptq.sh "$mgrun" "$root/.deps/fortunes" \
		"$root/.deps/tokenizers/llama2" $tmp/mgqat cuda
	grep -E "^(==|\||int4|PASS|FAIL|fq_)|held-out|checks," "$out/test_qat.log"
fi
if [ "$what" = lora ]; then
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-500} run bench_lora lora \
		bench/lora_vs_torch.sh "$mgrun" "$@"
	sed -n '/^== like4like tables/,$p' "$out/bench_lora.log"
fi
if [ "$what" = qlora ]; then
	run test_qlora qlora_check tests/gpu/qlora_check.sh "$mgrun" $tmp/mgqlora
	grep -E "^(FAIL|SKIPPED|qlora|greedy|epoch 1:)|^  " "$out/test_qlora.log"
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-500} run bench_qlora qlora \
		bench/lora_vs_torch.sh "$mgrun" ${*:-llama3-8b,2,512,qv,nf4}
	sed -n '/^== like4like tables/,$p' "$out/bench_qlora.log"
fi
if [ "$what" = kernels ]; then
	for size in $(echo "${1:-100,224,500}" | tr , ' '); do
		for prec in $(echo "${2:-fp32,fp16}" | tr , ' '); do
			# tf32 is fp32 with run.tf32, as in bench/like4like.py;
			# a static device batch, as like4like's ratio cells run
			p=$prec tf=false
			[ "$prec" = tf32 ] && p=fp32 tf=true
			run kernels "kernels $size $prec" "$mgrun" \
				-c conf/fashion_mnist.ini --set run.device=cuda \
				--set dataset.dir="$fashion" --set run.batch_size=64 \
				--set run.precision=$p --set run.tf32=$tf \
				--set run.static_batch=true --set dataset.image_size=$size \
				--set run.max_steps=40 --set run.eval=false \
				--set run.checkpoint=false --set optimizer.warmup_steps=0 \
				--set run.out_dir=$tmp/mgkernels --set run.name=k_${size}_$prec \
				--set profile.enabled=true --set profile.first_step=20 \
				--set profile.steps=10 --set profile.top_kernels=40
		done
	done
	grep -E "^== kernels|step time|top compute|^ +[0-9]+\.[0-9]+ +[0-9]+ " "$out/kernels.log"
fi
if [ "$what" = llm_kernels ]; then
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-500} run llm_kernels llm_kernels \
		python3 bench/llm_kernels.py "$mgrun" $tmp/mgllmk "$@"
	cp $tmp/mgllmk/llm_kernels.json "$out/" 2>/dev/null
	sed -n '/^### /,$p' "$out/llm_kernels.log"
fi

if [ "$what" = attention ]; then
	adt=${1:-bf16}
	run test_gpu_ops attention "$bin/test_gpu_ops" attention
	run bench_attention "attention $adt" "$bin/bench_gpu_ops" attention "$adt"
	run bench_attention_torch "attention torch $adt" python3 \
		bench/attention_vs_torch.py "$out/bench_attention.log" "$adt"
	grep -E "FAIL|checks," "$out/test_gpu_ops.log" | tail -40
	grep -vE "^ATTN" "$out/bench_attention.log" | grep -E "^ *(shape|llama)|FAIL|checks,|error"
	sed -n '/^torch /,$p' "$out/bench_attention_torch.log"
fi
if [ "$what" = rmsnorm ]; then
	# seed 002's kernel swap: mgrun's add + RMSNorm fused and unfused,
	# then PyTorch's (the seed's unfused module, F.rms_norm, compiled)
	run bench_fused bench_fused "$bin/bench_gpu_ops" fused
	run bench_rmsnorm_torch "rmsnorm torch" python3 \
		bench/rmsnorm_vs_torch.py "$out/bench_fused.log"
	grep -E "^(unfused|fused)|FAIL|error" "$out/bench_fused.log"
	sed -n '/^torch /,$p' "$out/bench_rmsnorm_torch.log"
fi
if [ "$what" = profile ] || [ "$what" = all ]; then
	run test_profile profile tests/gpu/profile_check.sh "$mgrun" "$root" \
		$tmp/mgprofile "$fashion"
	grep -E "^(ok|FAIL|PASS|SKIPPED|RESULT|profile|  )" "$out/test_profile.log"
fi
if [ "$what" = dist ]; then
	run test_comm_nccl comm_nccl "$bin/test_comm_nccl"
	run test_comm_nccl comm_nccl_rendezvous "$bin/test_comm_nccl" rendezvous
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-500} run test_dist_equivalence \
		equivalence tests/strategies/gpu_equivalence.sh "$mgrun" \
		"$build/tests/strategies/ckpt_diff" tests/strategies "$fashion" \
		$tmp/mgdist ${1:-2}
	grep -E "^(PASS|FAIL)|failure" "$out/test_dist_equivalence.log"
fi
if [ "$what" = dist ] || [ "$what" = watchdog ]; then
	# the collective watchdog over NCCL: a stalled rank stops the job
	# within run.collective_timeout_s, named; slow steps and the default
	# leave training unchanged (tests/strategies/watchdog.sh)
	run test_watchdog watchdog tests/strategies/watchdog.sh \
		"cuda:${1:-2}" "$mgrun" "$build/tests/strategies/ckpt_diff" \
		conf/llama_tiny.ini $tmp/mgwatchdog
	grep -E "^(PASS|FAIL)|^stall:|^slow:" "$out/test_watchdog.log"
fi
if [ "$what" = dist ] || [ "$what" = dist_llm ]; then
	# the llama and LoRA scenarios (no data files needed)
	run test_dist_llm equivalence_llm tests/strategies/gpu_equivalence_llm.sh \
		"$mgrun" "$build/tests/strategies/ckpt_diff" tests/strategies \
		$tmp/mgdistllm ${1:-2}
	grep -E "^(PASS|FAIL)|failure" "$out/test_dist_llm.log"
fi
if [ "$what" = scale7b ]; then
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-3000} run test_scale7b scale7b \
		tests/gpu/scale_7b_check.sh "$mgrun" $tmp/mgscale7b \
		"${1:-$(nvidia-smi -L | wc -l)}"
	grep -E "^(PASS|FAIL)|losses|failure|: [0-9]+ s" "$out/test_scale7b.log"
fi
if [ "$what" = sharding ]; then
	[ -x "$build/bench/bench_host_optim" ] &&
		run bench_host_optim host_optim "$build/bench/bench_host_optim"
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-3000} run bench_sharding sharding \
		bench/sharding.sh "$mgrun" "$fashion" "$out/sharding" ${1:-4}
	sed -n '/^| precision/,$p' "$out/bench_sharding.log"
fi
if [ "$what" = fsdp_llm ]; then
	n=${1:-$(nvidia-smi -L | wc -l)}
	BENCH_GPU_OPS=$bin/bench_gpu_ops MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-3000} \
		run bench_fsdp_llm fsdp_llm bench/fsdp_llm.sh "$mgrun" \
		"$out/fsdp_llm" "$n"
	sed -n '/^| mode (PyTorch)/,$p' "$out/bench_fsdp_llm.log"
fi
if [ "$what" = lora_scaling ]; then
	n=$(nvidia-smi -L | wc -l)
	g="1 2 4"
	[ "$n" -lt 4 ] && g="1 2"
	# shellcheck disable=SC2086
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-3000} run bench_lora_scaling \
		lora_scaling bench/lora_scaling.sh "$mgrun" "$out/lora_scaling" \
		${*:-$g}
	sed -n '/^| strategy | GPUs/,$p' "$out/bench_lora_scaling.log"
fi
if [ "$what" = techniques ]; then
	# conf/sweep_techniques.ini's GPU arguments (its header), 1B shape
	rm -rf $tmp/mgtech
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-1500} run techniques techniques \
		scripts/techniques.sh "$mgrun" --set run.device=cuda \
		--set run.precision=bf16 --set model.preset=llama3.2-1b \
		--set model.intermediate_size=8192 \
		--set dataset.vocab_size=128256 --set dataset.seq_len=1024 \
		--set dataset.min_len=128 --set dataset.train_samples=4096 \
		--set dataset.test_samples=128 --set run.batch_size=8 \
		--set run.eval_batch_size=8 --set run.max_steps=200 \
		--set run.cuda_graph=true --set run.out_dir=$tmp/mgtech \
		${MG_TECH_ARGS:-}
	run techniques ratios python3 bench/techniques_ratios.py \
		$tmp/mgtech/sweep_techniques/sweep.json
	sed -n '/^== sweep results/,/^files:/p' "$out/techniques.log"
	sed -n '/^| technique | step median/,/^$/p' "$out/techniques.log"
	cat $tmp/mgtech/sweep_techniques/quant.md 2>/dev/null
	tar czf "$out/techniques.tgz" -C $tmp/mgtech --exclude='*.safetensors' \
		sweep_techniques 2>/dev/null
fi
if [ "$what" = sweeps ]; then
	# The seed paper's figures and tables as conf/sweep_NAME.ini (a path
	# ending in .ini is used as is); each sweep's table, JSON, charts and
	# points (no checkpoints) come back in one archive, sweeps.tgz: the
	# device tool returns only a few files. Locally, mgrun -c INI
	# --set run.out_dir=DIR --replot re-draws them (docs/SWEEPS.md).
	for n in ${*:-figure1 figure2 table2 table3 figure3 offload_io}; do
		ini=conf/sweep_$n.ini
		case $n in *.ini) ini=$n n=$(basename "$n" .ini) ;; *) n=sweep_$n ;; esac
		# the Fashion-MNIST folder for the image sweeps only (the
		# llama ones read tokens and would refuse the key)
		data=""
		grep -q "^name = mnist" "$ini" && data="--set dataset.dir=$fashion"
		# shellcheck disable=SC2086
		MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-550} run "$n" "sweep $n" \
			"$mgrun" -c "$ini" $data \
			--set run.out_dir=$tmp/mgsweeps ${MG_SWEEP_ARGS:-}
		mkdir -p "$out/$n"
		dir=$tmp/mgsweeps/$n
		cp "$dir"/*.* "$out/$n/" 2>/dev/null
		tar czf "$out/$n/points.tgz" -C "$dir" --exclude='*.safetensors' \
			points 2>/dev/null
		sed -n '/^== sweep results/,$p' "$out/$n.log"
	done
	(cd "$out" && tar czf sweeps.tgz --remove-files sweep_*)
fi
if [ "$what" = scaling ]; then
	n=$(nvidia-smi -L | wc -l)
	gpus=${*:-$(seq 1 "$n" | tr '\n' ' ')}
	# shellcheck disable=SC2086
	MG_GPU_TIMEOUT=${MG_GPU_TIMEOUT:-3000} run bench_scaling scaling \
		bench/ddp_scaling.sh "$mgrun" "$fashion" "$out/scaling" $gpus
	sed -n '/^| px/,$p' "$out/bench_scaling.log"
fi

echo "== summary"
for f in "$out"/test_*.log; do
	[ -e "$f" ] || continue
	grep -E "FAIL|SKIPPED|checks,|^== .*exit|rror" "$f" | head -80
done
for f in "$out"/bench_*.log; do
	[ -e "$f" ] || continue
	echo "-- $(basename "$f") (full table in the log)"
	grep -E "ceiling|TOTAL|FAIL|error" "$f"
	sed -n '/^memory-bound/,/^[0-9]* checks/p' "$f"
done
exit $status
