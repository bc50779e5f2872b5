#!/bin/bash
# ddp_scaling.sh MGRUN FASHION_DIR OUT [gpus...] - the seed paper's Figure 1
# on this machine: MobileNetV2 fp32, batch 64 per GPU, reading the real
# Fashion-MNIST files through the real input pipeline, for ddp, ddp_rr and
# ddp_ds on 1..N GPUs at 224 and 500 px; beside PyTorch DDP
# (bench/torch_fsdp_mbv2.py ddp fp32: synthetic data already on the GPU)
# in the same run.
#
# Throughput is dataset samples per second: what an epoch costs. ddp
# trains every GPU on the whole dataset, so its N GPUs cover the data
# no faster than one; ddp_rr and ddp_ds split each global batch.
# Step time: bench/bench_stats.py's median window (5 windows of
# (STEPS - 10) / 5 steps after 10 warm-up steps: CUDA-graph capture
# excluded), on both sides; PyTorch's fastest window is in the table too.
# Exit status 1 when a run failed.
set -u
mgrun=$1 fashion=$2 out=$3
shift 3
gpus=${*:-1 2}
steps=${MG_BENCH_STEPS:-60}
sizes=${MG_BENCH_SIZES:-224 500}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
status=0
table=$out/ddp_scaling.md
: >"$out/ddp_scaling.tsv"

# seconds per step of a run's median, fastest and slowest window
# (bench/bench_stats.py), space-separated
window_steps() {
	python3 "$here/bench_stats.py" run "$1" --warm 10 --windows 5 |
		python3 -c 'import json,sys; r = json.load(sys.stdin); print(r["median"], r["min"], r["max"])'
}

# rank-summed counter from report.json (format $3, default integer)
counter() {
	grep "\"$2\":" "$1" | awk -F: -v fmt="${3:-%.0f}" \
		'{ gsub(/[ \t,]/, "", $2); s += $2 } END { printf fmt, s }'
}

for size in $sizes; do
	for g in $gpus; do
		strategies="ddp ddp_rr ddp_ds"
		# One GPU: ddp_ds as a world of one (the three coincide).
		[ "$g" -eq 1 ] && strategies=ddp_ds
		for s in $strategies; do
			name=scale_${s}_${g}_$size
			timeout 400 "$mgrun" -c conf/fashion_mnist_ddp.ini \
				--set dataset.dir="$fashion" --set run.gpus="$g" \
				--set strategy.name="$s" \
				--set dataset.image_size="$size" \
				--set run.epochs=1 --set run.max_steps="$steps" \
				--set run.eval=false --set run.checkpoint=false \
				--set run.out_dir=/tmp/mgscale --set run.name="$name" \
				--set run.log_every=1000 >"$out/$name.log" 2>&1
			rc=$?
			dir=/tmp/mgscale/$name
			if [ $rc -ne 0 ] || [ ! -f "$dir/report.json" ]; then
				echo "$size $g $s FAILED (exit $rc)" |
					tee -a "$out/ddp_scaling.tsv"
				status=1
				tail -5 "$out/$name.log"
				continue
			fi
			cp "$dir/report.json" "$out/$name.json"
			w=$(window_steps "$dir") || { status=1; continue; }
			# unique dataset samples one step covers
			per=64
			[ "$s" = ddp_rr ] || [ "$s" = ddp_ds ] && per=$((64 * g))
			h2d=$(counter "$dir/report.json" h2d_bytes)
			busy=$(counter "$dir/report.json" busy_s %.3f)
			exposed=$(counter "$dir/report.json" exposed_s %.3f)
			# columns: px, GPUs, strategy, ms/step, samples/s (median
			# window), counters, samples/s of the slowest-fastest window
			echo "$size $g $s $w $per $h2d $busy $exposed" |
				awk '{ printf "%s\t%s\t%s\t%.2f\t%.0f\t%s\t%s\t%s\t%.0f-%.0f\n", $1, $2, $3, 1000 * $4, $7 / $4, $8, $9, $10, $7 / $6, $7 / $5 }' |
				tee -a "$out/ddp_scaling.tsv"
		done
		# PyTorch DDP on the same GPUs, same call.
		NCCL_NVLS_ENABLE=0 timeout 300 python3 -m torch.distributed.run \
			--standalone --nproc_per_node="$g" \
			"$here/torch_fsdp_mbv2.py" ddp "$size" fp32 5 \
			$(((steps - 10) / 5)) >"$out/torch_ddp_${g}_$size.log" 2>&1
		r=$(grep '^{' "$out/torch_ddp_${g}_$size.log" | tail -1 |
			python3 -c 'import json,sys; r = json.load(sys.stdin)["img_s_total"]; print("%.1f\t%.1f" % (r["median"], r["max"]))') ||
			{ r="FAILED	-"; status=1; }
		echo "$size	$g	torch_ddp	-	$r	-	-" |
			tee -a "$out/ddp_scaling.tsv"
	done
done

# Table: samples/s, efficiency against N x the 1-GPU mgrun figure, ratio
# to PyTorch DDP on the same GPU count.
awk -F'\t' '
$2 == 1 && $3 == "ddp_ds" { one[$1] = $5 }
$3 == "torch_ddp" { torch[$1 " " $2] = $5; fastest[$1 " " $2] = $6 }
{ row[NR] = $0 }
END {
	print "| px | GPUs | strategy | ms/step | samples/s (slowest-fastest window) | efficiency | vs PyTorch DDP median | vs its fastest window | h2d bytes | comm busy s | comm exposed s |"
	print "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	for (i = 1; i <= NR; i++) {
		split(row[i], f, "\t")
		if (f[3] == "torch_ddp") {
			printf "| %s | %s | PyTorch DDP | - | %s (fastest window %s) | %s | 1 | - | - | - | - |\n", f[1], f[2], f[5], f[6], (one[f[1]] && f[5] + 0 > 0) ? sprintf("%.0f%% of mgrun 1-GPU x N", 100 * f[5] / (f[2] * one[f[1]])) : "-"
			continue
		}
		eff = one[f[1]] ? sprintf("%.1f%%", 100 * f[5] / (f[2] * one[f[1]])) : "-"
		t = torch[f[1] " " f[2]]
		vs = (t + 0 > 0) ? sprintf("%.2fx", f[5] / t) : "-"
		ft = fastest[f[1] " " f[2]]
		vf = (ft + 0 > 0) ? sprintf("%.2fx", f[5] / ft) : "-"
		printf "| %s | %s | %s | %s | %s (%s) | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], f[9], eff, vs, vf, f[6], f[7], f[8]
	}
}' "$out/ddp_scaling.tsv" | tee "$table"
exit $status
