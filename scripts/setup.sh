#!/bin/sh
# setup.sh - install what mgrun needs to build, test and run on Debian
# (bookworm or later), then configure and build it in build/.
# Usage: scripts/setup.sh [extra cmake args...]
set -eu
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
pkgs="build-essential cmake pkg-config libinih-dev libcjson-dev \
libopenblas-dev zlib1g-dev libopenmpi-dev openmpi-bin dataset-fashion-mnist \
clang libclang-rt-dev \
python3-jsonschema libxml2-utils"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "setup: installing$missing"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j"$(nproc)"
