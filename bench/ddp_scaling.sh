#!/bin/bash
# ddp_scaling.sh MGRUN FASHION_DIR OUT [gpus...] - the seed paper's Figure 1
# on this machine: MobileNetV2 fp32, batch 64 per GPU, reading the real
# Fashion-MNIST files through the real input pipeline, for ddp, ddp_rr and
# ddp_ds on 1..N GPUs at 224 and 500 px; beside PyTorch DDP
# (torch_ddp_mbv2.py: synthetic data already on the GPU) in the same run.
#
# Throughput is dataset samples per second: what an epoch costs. ddp
# trains every GPU on the whole dataset, so its N GPUs cover the data
# no faster than one; ddp_rr and ddp_ds split each global batch.
# Step time is the median over steps 11..STEPS (warm-up and CUDA-graph
# capture excluded).
set -u
mgrun=$1 fashion=$2 out=$3
shift 3
gpus=${*:-1 2}
steps=${MG_BENCH_STEPS:-60}
sizes=${MG_BENCH_SIZES:-224 500}
baselines=${MG_BASELINES:-.deps/baselines}
mkdir -p "$out"
table=$out/ddp_scaling.md
: >"$out/ddp_scaling.tsv"

# median step seconds of a run's steps.csv (column 8), steps > 10
median_step() {
	awk -F, 'NR > 11 { print $8 }' "$1" | sort -g |
		awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : 0) }'
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
				tail -5 "$out/$name.log"
				continue
			fi
			cp "$dir/report.json" "$out/$name.json"
			t=$(median_step "$dir/steps.csv")
			# unique dataset samples one step covers
			per=64
			[ "$s" = ddp_rr ] || [ "$s" = ddp_ds ] && per=$((64 * g))
			h2d=$(counter "$dir/report.json" h2d_bytes)
			busy=$(counter "$dir/report.json" busy_s %.3f)
			exposed=$(counter "$dir/report.json" exposed_s %.3f)
			echo "$size $g $s $t $per $h2d $busy $exposed" |
				awk '{ printf "%s\t%s\t%s\t%.2f\t%.0f\t%s\t%s\t%s\n", $1, $2, $3, 1000 * $4, $5 / $4, $6, $7, $8 }' |
				tee -a "$out/ddp_scaling.tsv"
		done
		# PyTorch DDP on the same GPUs, same call.
		NCCL_NVLS_ENABLE=0 timeout 300 python3 -m torch.distributed.run \
			--standalone --nproc_per_node="$g" \
			"$baselines/torch_ddp_mbv2.py" "$size" fp32 \
			>"$out/torch_ddp_${g}_$size.log" 2>&1
		r=$(grep -o '"img_s_total": [0-9.]*' "$out/torch_ddp_${g}_$size.log" |
			awk '{ print $2 }')
		echo "$size	$g	torch_ddp	-	${r:-FAILED}	-	-	-" |
			tee -a "$out/ddp_scaling.tsv"
	done
done

# Table: samples/s, efficiency against N x the 1-GPU mgrun figure, ratio
# to PyTorch DDP on the same GPU count.
awk -F'\t' '
$2 == 1 && $3 == "ddp_ds" { one[$1] = $5 }
$3 == "torch_ddp" { torch[$1 " " $2] = $5 }
{ row[NR] = $0 }
END {
	print "| px | GPUs | strategy | ms/step | samples/s | efficiency | vs PyTorch DDP | h2d bytes | comm busy s | comm exposed s |"
	print "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	for (i = 1; i <= NR; i++) {
		split(row[i], f, "\t")
		if (f[3] == "torch_ddp") {
			printf "| %s | %s | PyTorch DDP | - | %s | %s | 1 | - | - | - |\n", f[1], f[2], f[5], (one[f[1]] && f[5] + 0 > 0) ? sprintf("%.0f%% of mgrun 1-GPU x N", 100 * f[5] / (f[2] * one[f[1]])) : "-"
			continue
		}
		eff = one[f[1]] ? sprintf("%.1f%%", 100 * f[5] / (f[2] * one[f[1]])) : "-"
		t = torch[f[1] " " f[2]]
		vs = (t + 0 > 0) ? sprintf("%.2fx", f[5] / t) : "-"
		printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], eff, vs, f[6], f[7], f[8]
	}
}' "$out/ddp_scaling.tsv" | tee "$table"
