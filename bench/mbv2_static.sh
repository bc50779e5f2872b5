#!/bin/bash
# mbv2_static.sh SIZES PRECS - mgrun's MobileNetV2 alone, on the GPU
# machine, with bench/like4like.py's mgrun settings (static device batch,
# batch 64, 15 warm-up steps then 5 windows of 20; tf32 = fp32 with
# run.tf32), two processes a cell, each one's img/s summarised by
# bench_stats.py. Why: a before/after figure of mgrun's own step in a few
# seconds a cell, where like4like's PyTorch processes take 8-15 s each.
# Needs a build from scripts/device-build.sh (MG_GPU_BUILD, default
# build-dev) and .deps/fashion-mnist.
cd "$(dirname "$0")/.."
b=${MG_GPU_BUILD:-build-dev}
export LD_LIBRARY_PATH=$PWD/$b/core:/tmp/mgdeps/usr/lib/x86_64-linux-gnu:/tmp/mgdeps/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
for lib in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libcudart.so.13 libnvrtc.so.13 libcupti.so.13; do
 h=$(find /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/extras/CUPTI/lib64 /usr/lib/x86_64-linux-gnu /opt/torch/.venv/lib/python3*/site-packages/nvidia -name $lib 2>/dev/null | head -1)
 [ -n "$h" ] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname $h)
done
export MG_PLUGIN_PATH=$PWD/$b/plugins
for size in $(echo $1 | tr , ' '); do for prec in $(echo $2 | tr , ' '); do
 p=$prec; tf=false; [ $prec = tf32 ] && p=fp32 tf=true
 for r in 1 2; do
 $b/core/mgrun -c conf/fashion_mnist.ini --set run.device=cuda --set run.precision=$p --set run.tf32=$tf \
  --set run.static_batch=true --set dataset.image_size=$size --set run.max_steps=115 --set run.eval=false \
  --set run.checkpoint=false --set run.batch_size=64 --set run.log_every=1000 --set optimizer.warmup_steps=0 \
  --set dataset.dir=$PWD/.deps/fashion-mnist --set run.out_dir=/tmp/mgo --set run.name=o_${size}_${prec}_$r > /tmp/mgo_${size}_${prec}.log 2>&1 || { echo "FAIL $size $prec"; tail -5 /tmp/mgo_${size}_${prec}.log; }
 python3 -c "
import sys; sys.path.insert(0,'bench'); import bench_stats as bs
r=bs.mgrun_run('/tmp/mgo/o_${size}_${prec}_$r',15,5); q=bs.per_second(r,64)
print('MGONLY $size $prec run $r img/s median %.0f (%.0f-%.0f)'%(q['median'],q['min'],q['max']))"
 done
done; done
