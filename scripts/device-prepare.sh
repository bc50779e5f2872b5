#!/bin/sh
# device-prepare.sh - run HERE before a GPU-machine call: builds mgrun
# (CUDA on, sm_90) into build-gpu/ and gathers what the GPU machine lacks
# into .deps/ (runtime .debs of inih, cJSON, OpenBLAS, PCRE2; the
# Fashion-MNIST files; the tokenizer files). Both are git-ignored; pass them as `carry`.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .deps/debs .deps/fashion-mnist
(cd .deps/debs && [ -n "$(ls libpcre2-8-0_* 2>/dev/null)" ] ||
	apt-get download libinih1 libcjson1 libopenblas0-pthread \
		libgfortran5 libgomp1 libpcre2-8-0 >/dev/null)
# Their development packages, for scripts/device-build.sh (a build on the
# GPU machine itself).
mkdir -p .deps/debs-dev
(cd .deps/debs-dev && [ -n "$(ls libpcre2-dev_* 2>/dev/null)" ] ||
	apt-get download libinih-dev libcjson-dev libopenblas-dev \
		libopenblas-pthread-dev libpcre2-dev libpcre2-16-0 \
		libpcre2-32-0 libpcre2-posix3 zlib1g-dev zlib1g pkgconf \
		pkgconf-bin libpkgconf3 >/dev/null)
scripts/fetch-tokenizers.sh || true
# The varied texts tokenizers are checked on (the GPU machine has no
# fortunes files).
python3 tests/text/make_corpus.py 1500 >.deps/text_corpus.jsonl
# The fortune files themselves, for the QAT-against-PTQ check (gpu.sh qat).
mkdir -p .deps/fortunes
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' \
	! -name '*.u8' -exec cp -u {} .deps/fortunes/ \;
cp -u /usr/share/datasets/fashion-mnist/*.gz .deps/fashion-mnist/
# The PyTorch baseline the benchmarks compare against (project shared/).
mkdir -p .deps/baselines
cp -u ../shared/baselines/*.py .deps/baselines/ 2>/dev/null || true
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON >/dev/null
cmake --build build-gpu -j"$(nproc)"
du -sh .deps build-gpu
