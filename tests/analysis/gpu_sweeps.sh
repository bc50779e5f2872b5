#!/bin/bash
# gpu_sweeps.sh - run conf/sweep_*.ini on a GPU machine (the device
# tool's `run`, from the repository root) with a CUDA build made HERE:
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF
#   cmake --build build-gpu; scripts/device-prepare.sh gathers .deps/
# then run with carry [build-gpu, .deps]:
#   tests/analysis/gpu_sweeps.sh figure1 table2 table3 [-- ARGS...]
# (a name is conf/sweep_NAME.ini; a path ending in .ini is used as is;
# ARGS, such as --set or --sweep, go to every sweep). Each sweep's
# results (table, JSON, charts; not the points' run folders) are copied
# to $OUT/<name>/. MG_GPU_BUILD picks the build
# folder (default build-gpu). Not a ctest: CI has no GPU.
set -u
cd "$(dirname "$0")/../.."
root=$PWD
out=${OUT:-$root/gpu-out}
build=${MG_GPU_BUILD:-build-gpu}
names=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	names+=("$1")
	shift
done
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"

# The runtime libraries the machine lacks (.debs gathered by
# scripts/device-prepare.sh), and CUDA's, wherever they are.
deps=/tmp/mgdeps
mkdir -p "$deps"
for f in .deps/debs/*.deb; do
	[ -e "$f" ] && dpkg -x "$f" "$deps"
done
libpath="$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openblas-pthread"
for lib in libcudnn.so.9 libcublas.so.13 libcudart.so.13 libcupti.so.13; do
	hit=$(find /usr/local/cuda/ /usr/lib/x86_64-linux-gnu /opt \
		/usr/local/lib -name "$lib" 2>/dev/null | head -1)
	[ -n "$hit" ] && libpath="$libpath:$(dirname "$hit")"
done
export LD_LIBRARY_PATH="$root/$build/core:$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MG_PLUGIN_PATH="$root/$build/plugins"
export NCCL_NVLS_ENABLE=0
fashion=/usr/share/datasets/fashion-mnist
[ -d "$fashion" ] || fashion=$root/.deps/fashion-mnist
nvidia-smi -L

status=0
for n in "${names[@]}"; do
	ini=conf/sweep_$n.ini
	case $n in *.ini) ini=$n n=$(basename "$n" .ini) ;; *) n=sweep_$n ;; esac
	echo "== sweep $n"
	t0=$SECONDS
	"$build/core/mgrun" -c "$ini" --set dataset.dir="$fashion" \
		--set run.out_dir=/tmp/mgsweeps "$@" >"$out/$n.log" 2>&1
	rc=$?
	echo "== sweep $n: exit $rc in $((SECONDS - t0)) s"
	[ $rc -ne 0 ] && status=1
	mkdir -p "$out/$n"
	dir=$(sed -n 's/^mgrun: sweep of .* in //p' "$out/$n.log" | head -1)
	[ -n "$dir" ] && cp "$dir"/*.* "$out/$n/" 2>/dev/null
	# The points' run folders too (no checkpoints), for mgrun compare
	# and --replot where the archive lands.
	[ -n "$dir" ] && tar czf "$out/$n/points.tgz" -C "$dir" \
		--exclude='*.safetensors' points 2>/dev/null
	grep -v '^\[p' "$out/$n.log" | tail -40
done
# One archive: the device tool brings back only a few files.
(cd "$out" && tar czf sweeps.tgz --remove-files -- *) 2>/dev/null
exit $status
