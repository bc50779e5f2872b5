#!/bin/sh
# Install mgrun into a fresh prefix, build the example third-party strategy
# out of tree against it (CMake package), and check the installed mgrun
# loads it from --plugin-path and describes its options.
set -eu
src=$1 build=$2 work=$3
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/examples/third_party_strategy" -B "$work/plugin" \
	-DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/plugin" >/dev/null
export LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}"
out=$("$work/prefix/bin/mgrun" --help-plugin local_avg \
	--plugin-path "$work/plugin")
echo "$out"
echo "$out" | grep -q "period .*int .*8 .*average parameters"
# The pkg-config file works for people who do not use CMake: build the
# same plugin with plain cc and load it.
mkdir -p "$work/pc"
flags=$(PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs mgrun)
cc -std=c11 -shared -fPIC -fvisibility=hidden -o "$work/pc/libmg_local_avg.so" \
	"$src/examples/third_party_strategy/local_avg.c" $flags
"$work/prefix/bin/mgrun" --help-plugin local_avg --plugin-path "$work/pc" |
	grep -q "$work/pc/libmg_local_avg.so"
