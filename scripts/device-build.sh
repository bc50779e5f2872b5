#!/bin/bash
# device-build.sh - build mgrun ON the GPU machine (16 cores: a full CUDA
# build in minutes instead of the development machine's 2 cores) into
# build-dev/, then `MG_GPU_BUILD=build-dev scripts/gpu.sh ...` uses it.
#
# The GPU machine has CMake, nvcc, gcc and the CUDA libraries but none of
# mgrun's Debian dependencies: scripts/device-prepare.sh downloads their
# runtime (.deps/debs) and development (.deps/debs-dev) packages here;
# this script unpacks both with dpkg -x into /tmp/mgdeps and names every
# header and library to CMake explicitly (no alternatives symlinks or
# pkg-config search paths exist in an unpacked tree). cuDNN and NCCL are
# looked up where the toolkit or PyTorch's nvidia-* wheels keep them.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build-dev}
deps=/tmp/mgdeps
mkdir -p "$deps"
for f in .deps/debs/*.deb .deps/debs-dev/*.deb; do
	dpkg -x "$f" "$deps"
done
L=$deps/usr/lib/x86_64-linux-gnu
# first NAME-PATTERN: the first file of that name in the toolkit, the
# system or a Python wheel (an unversioned .so is not required).
sp=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
first() {
	find /usr/local/cuda/include /usr/local/cuda/lib64 \
		/usr/local/cuda/targets/x86_64-linux /usr/include \
		/usr/lib/x86_64-linux-gnu $sp -name "$1" 2>/dev/null | sort | head -1
}
cudnn_h=$(first cudnn.h)
cudnn_so=$(first 'libcudnn.so*')
nccl_h=$(first nccl.h)
nccl_so=$(first 'libnccl.so*')
echo "cuDNN: ${cudnn_h:-none} ${cudnn_so:-none}; NCCL: ${nccl_h:-none} ${nccl_so:-none}"
# pkg-config for PCRE2: the machine's, or the carried pkgconf.
pc=$(command -v pkg-config || true)
[ -n "$pc" ] || pc=$deps/usr/bin/pkgconf
export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$L/pkgconfig PKG_CONFIG_SYSROOT_DIR=$deps
export PKG_CONFIG_LIBDIR=$L/pkgconfig
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
	-DBUILD_TESTING=ON -DPKG_CONFIG_EXECUTABLE="$pc" \
	-DMG_INIH_ROOT="$deps" \
	-DCJSON_INCLUDE_DIR="$deps/usr/include" \
	-DCJSON_LIBRARY="$L/libcjson.so.1" \
	-DOPENBLAS_INCLUDE_DIR="$deps/usr/include/x86_64-linux-gnu/openblas-pthread" \
	-DOPENBLAS_LIBRARY="$L/openblas-pthread/libopenblas.so.0" \
	-DZLIB_INCLUDE_DIR="$deps/usr/include" \
	-DZLIB_LIBRARY="$deps/lib/x86_64-linux-gnu/libz.so.1" \
	${cudnn_h:+-DCUDNN_INCLUDE_DIR="$(dirname "$cudnn_h")"} \
	${cudnn_so:+-DCUDNN_LIBRARY="$cudnn_so"} \
	${nccl_h:+-DNCCL_INCLUDE_DIR="$(dirname "$nccl_h")"} \
	${nccl_so:+-DNCCL_LIBRARY="$nccl_so"}
[ -n "${MG_CONFIGURE_ONLY:-}" ] && exit 0

# A warm machine keeps $build between calls, and ninja trusts mtimes: a
# file edited here shortly before the previous call's build finished
# there (the copy keeps this machine's mtimes) looks older than its
# object and is not recompiled. So every source whose content changed
# since the last build here is touched first (md5 of each, kept in the
# build folder).
sums=$build/.mg_source_md5
new=$(mktemp)
find core plugins include tests bench examples -type f \
	\( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
	-o -name 'CMakeLists.txt' -o -name '*.cmake' \) 2>/dev/null |
	sort | xargs md5sum >"$new"
if [ -f "$sums" ]; then
	changed=$(diff "$sums" "$new" | sed -n 's/^> [0-9a-f]*  //p')
	[ -n "$changed" ] && echo "$changed" | xargs touch &&
		echo "device-build: $(echo "$changed" | wc -l) changed file(s) since the last build here"
fi
# MG_BUILD_TARGETS (blank-separated): only those targets and what they
# need (e.g. "mgrun mg_llama mg_random_tokens mg_single test_gpu_ops"),
# a shorter build for a call that runs only them.
cmake --build "$build" -j"$(nproc)" ${MG_BUILD_TARGETS:+--target $MG_BUILD_TARGETS}
mv "$new" "$sums"
