#!/bin/bash
# lora_vs_torch.sh - LoRA fine-tuning throughput and memory, mgrun against
# HF transformers + peft (scripts/gpu.sh lora): the LoRA part of
# bench/like4like.py on the given cells (its docstring says how both
# sides are measured: the same windows, the driver's process peak).
#
#   bench/lora_vs_torch.sh MGRUN [shape,batch,seq,targets[,nf4] ...]
#     default: llama3.2-1b,2,512,qv llama3.2-1b,8,512,tt
#     targets: qv (q_proj, v_proj) or tt (torchtune's: q, v, o, gate, up,
#     down)
#     nf4: QLoRA, the layers' projections stored as NF4 (model.quant =
#     nf4); mgrun only (no bitsandbytes baseline on the GPU machines): its
#     row shows n/a for PyTorch, e.g.
#       bench/lora_vs_torch.sh MGRUN llama3-8b,2,512,qv,nf4
set -u
mgrun=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
MG_L4L_LORA=${*:-"llama3.2-1b,2,512,qv llama3.2-1b,8,512,tt"} \
	exec python3 "$here/like4like.py" "$mgrun" "${OUT:-/tmp}/lora_bench" lora
