#!/bin/sh
# Install mgrun into a fresh prefix, build the example third-party
# strategies (examples/*/) out of tree against it alone (CMake package,
# strategy kit included), and check the installed mgrun loads them from
# --plugin-path and describes their options. Also checks what the
# installation itself promises: installed plugins find libmg through
# their own RUNPATH, and MgPlugin.cmake documents the function it defines.
set -eu
src=$1 build=$2 work=$3
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
prefix=$work/prefix
# Nothing from the source or build tree may leak in: copy the examples.
cp -r "$src/examples" "$work/examples"
for ex in third_party_strategy bf16_ddp zero; do
	cmake -S "$work/examples/$ex" -B "$work/build_$ex" \
		-DCMAKE_PREFIX_PATH="$prefix" >/dev/null
	cmake --build "$work/build_$ex" >/dev/null
done
if grep -rqIE "$src/(include|kit|core)|$build/(core|kit)" "$work"/build_*; then
	echo "FAIL: an example's build refers to the source or build tree"
	exit 1
fi
out=$("$prefix/bin/mgrun" --help-plugin local_avg \
	--plugin-path "$work/build_third_party_strategy")
echo "$out"
echo "$out" | grep -q "period .*int .*8 .*average parameters"
out=$("$prefix/bin/mgrun" --help-plugin bf16_ddp \
	--plugin-path "$work/build_bf16_ddp")
echo "$out"
echo "$out" | grep -q "compress .*bool .*true .*bf16"
out=$("$prefix/bin/mgrun" --help-plugin zero2_host \
	--plugin-path "$work/build_zero")
echo "$out"
echo "$out" | grep -q "threads .*int .*0 .*host optimizer threads"
# The pkg-config files work for people who do not use CMake: build the
# same plugins with plain cc and load them.
mkdir -p "$work/pc"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
for f in third_party_strategy/local_avg bf16_ddp/bf16_ddp zero/zero1 \
	zero/zero2_host; do
	cc -std=c11 -shared -fPIC -fvisibility=hidden -Werror -Wall -Wextra \
		-o "$work/pc/libmg_${f#*/}.so" "$work/examples/$f.c" \
		$(pkg-config --cflags --libs mgrun-kit)
done
"$prefix/bin/mgrun" --help-plugin local_avg --plugin-path "$work/pc" |
	grep -q "$work/pc/libmg_local_avg.so"
"$prefix/bin/mgrun" --help-plugin bf16_ddp --plugin-path "$work/pc" |
	grep -q "$work/pc/libmg_bf16_ddp.so"
# Installed plugins resolve libmg by their RUNPATH alone (no
# LD_LIBRARY_PATH, no libmg already loaded by mgrun).
n=0
want=$(realpath "$prefix/lib/libmg.so.1")
for p in "$prefix"/lib/mgrun/plugins/libmg_*.so; do
	got=$(env -u LD_LIBRARY_PATH ldd "$p" |
		awk '/libmg.so.1 => \// { print $3 }')
	if [ -z "$got" ] || [ "$(realpath "$got")" != "$want" ]; then
		echo "FAIL: $p does not find libmg through its RUNPATH:"
		readelf -d "$p" | grep -i path || true
		env -u LD_LIBRARY_PATH ldd "$p"
		exit 1
	fi
	n=$((n + 1))
done
test "$n" -gt 0
echo "$n installed plugins find $prefix/lib/libmg.so.1 by RUNPATH"
# MgPlugin.cmake documents the signature mg_add_plugin has (no KIND).
cm=$prefix/lib/cmake/mgrun/MgPlugin.cmake
grep -q "^# mg_add_plugin(name SOURCES src... \[LIBS lib...\])" "$cm"
grep -q 'cmake_parse_arguments(P "" "" "SOURCES;LIBS"' "$cm"
if grep -q "KIND" "$cm"; then
	echo "FAIL: $cm documents a KIND argument mg_add_plugin does not take"
	exit 1
fi
echo "PASS: install"
