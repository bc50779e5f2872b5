#!/bin/bash
# lora_vs_torch.sh - LoRA fine-tuning throughput, mgrun against HF
# transformers + peft (../shared/baselines/torch_lora.py, carried in
# .deps/baselines) in one GPU-machine call, same shapes: random weights,
# bf16, r = 8, alpha = 16, fixed rows of SEQ tokens, every label counted.
#
#   bench/lora_vs_torch.sh MGRUN [shape,batch,seq,targets[,nf4] ...]
#     default: llama3.2-1b,2,512,qv llama3.2-1b,8,512,tt
#     targets: qv (q_proj, v_proj) or tt (torchtune's: q, v, o, gate, up,
#     down), as torch_lora.py names them
#     nf4: QLoRA, the layers' projections stored as NF4 (model.quant =
#     nf4); mgrun only (torch_lora.py has no bitsandbytes cell): its row
#     shows mgrun's numbers and n/a for torch, e.g.
#       bench/lora_vs_torch.sh MGRUN llama3-8b,2,512,qv,nf4
#
# mgrun: the median step of the steady steps (report.json step_s, p10-p90
# spread) and its accounted peak device memory; PyTorch: torch_lora.py's
# mean of 10 steps after 3 warm-up steps and max_memory_allocated. The
# memory figures are each side's own accounting, not one method.
set -u
mgrun=$1
shift
cells=${*:-"llama3.2-1b,2,512,qv llama3.2-1b,8,512,tt"}
out=${OUT:-/tmp}/lora_bench
mkdir -p "$out"
for cell in $cells; do
	IFS=, read -r shape batch seq tg quant <<<"$cell"
	case ${quant:-none} in
	none | nf4) ;;
	*) echo "unknown quant $quant (none or nf4)" >&2; exit 2 ;;
	esac
	case $tg in
	qv) targets=q,v ;;
	tt) targets=q,v,o,gate,up,down ;;
	*) echo "unknown targets $tg" >&2; exit 2 ;;
	esac
	name="lora_${shape}_${batch}x${seq}_$tg${quant:+_$quant}"
	"$mgrun" -c conf/llama_tiny.ini --set model.preset="$shape" \
		--set dataset.vocab_size=128256 --set dataset.seq_len="$seq" \
		--set dataset.lengths=fixed --set dataset.prompt_frac=0 \
		--set dataset.train_samples=$((batch * 24)) \
		--set dataset.test_samples="$batch" \
		--set model.lora_rank=8 --set model.lora_alpha=16 \
		--set model.lora_targets="$targets" \
		--set model.quant="${quant:-none}" \
		--set run.batch_size="$batch" --set run.eval_batch_size="$batch" \
		--set run.device=cuda --set run.precision=bf16 \
		--set run.max_steps=20 --set run.checkpoint=false \
		--set run.out_dir="$out" --set run.name="$name" \
		--set run.log_every=10 >"$out/$name.log" 2>&1 ||
		{ echo "mgrun $cell failed:"; tail -5 "$out/$name.log"; exit 1; }
done
# The baseline on the same cells: torch_lora.py with its cell list
# replaced by ours (its code otherwise as shipped).
py=$out/torch_lora_cells.py
list=$(for cell in $cells; do
	IFS=, read -r shape batch seq tg quant <<<"$cell"
	[ -z "$quant" ] || continue # no bitsandbytes baseline
	printf '("%s", %s, %s, "%s"), ' "$shape" "$batch" "$seq" "$tg"
done)
if [ -n "$list" ]; then
	sed "s/^for args in \[.*\]:/for args in [$list]:/" \
		.deps/baselines/torch_lora.py >"$py"
	grep -q "for args in \[(\"" "$py" || { echo "cannot set torch_lora.py's cells"; exit 1; }
	RESULTS_DIR=$out python3 "$py" >"$out/torch_lora.log" 2>&1 ||
		{ echo "torch_lora.py failed:"; tail -5 "$out/torch_lora.log"; exit 1; }
else
	echo "[]" >"$out/torch_lora.json"
fi
python3 - "$out" $cells <<'PY'
import json, sys
out, cells = sys.argv[1], sys.argv[2:]
torch = {(r["shape"], r["batch"], r["seq"], r["targets"]): r
         for r in json.load(open(f"{out}/torch_lora.json"))}
print("| cell | mgrun step (median, p10-p90) | mgrun tok/s | mgrun peak (accounted) | torch tok/s | torch peak | ratio |")
print("| --- | --- | --- | --- | --- | --- | --- |")
bad = 0
for c in cells:
    shape, b, s, tg, *q = c.split(",")
    q = q[0] if q else ""
    r = json.load(open(f"{out}/lora_{shape}_{b}x{s}_{tg}{'_' + q if q else ''}"
                       "/report.json"))
    st = r["run"]["step_s"]
    tok = int(b) * int(s) / st["median"]
    mem = max(k["memory_peak_bytes"]["total"] for k in r["ranks"]) / 2**30
    if q:
        params = max(k["memory_peak_bytes"]["params"] for k in r["ranks"])
        print(f"| {shape} {b}x{s} {tg} {q} | {st['median']*1e3:.1f} ms "
              f"({st['p10']*1e3:.1f}-{st['p90']*1e3:.1f}, {st['n']} steps) | "
              f"{tok:,.0f} | {mem:.1f} GiB (params {params / 2**30:.2f}) | "
              f"n/a | n/a | n/a |")
        continue
    t = torch.get((shape, int(b), int(s), tg))
    if t is None:
        print(f"| {c} | no torch result |"); bad = 1; continue
    print(f"| {shape} {b}x{s} {tg} | {st['median']*1e3:.1f} ms "
          f"({st['p10']*1e3:.1f}-{st['p90']*1e3:.1f}, {st['n']} steps) | "
          f"{tok:,.0f} | {mem:.1f} GiB | {t['tok_s']:,} | {t['peak_gb']} GB | "
          f"**{tok / t['tok_s']:.2f}x** |")
sys.exit(bad)
PY
