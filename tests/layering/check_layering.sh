#!/bin/sh
# check_layering.sh SRC_DIR - fail with file:line for every #include that
# breaks the layering of core/ (docs/ARCHITECTURE.md, "Ops as leaves"):
#   core/ops/cpu   includes nothing from ops/cuda or the dispatch layer
#                  (ops/*.h other than ops/ops_geom.h);
#   core/ops/cuda  includes nothing from ops/cpu or the dispatch layer;
#   core/runtime   includes no ops/ header at all.
# Relative includes ("../x.h") are rejected too, so the rules cannot be
# sidestepped.
set -u
src=${1:?usage: check_layering.sh SRC_DIR}
core=$src/core
bad=0

# rule DIR REGEX WHY [ALLOW]: report every #include "..." line under DIR
# (or <...>) whose path starts with REGEX, except those matching ALLOW.
rule() {
	dir=$1 re=$2 why=$3 allow=${4:-^$}
	[ -d "$core/$dir" ] || {
		echo "check_layering: $core/$dir is missing" >&2
		bad=1
		return
	}
	hits=$(find "$core/$dir" -type f \( -name '*.c' -o -name '*.h' \
		-o -name '*.cu' -o -name '*.cuh' \) -print0 |
		xargs -0 grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($re)" \
			/dev/null | grep -vE "$allow")
	if [ -n "$hits" ]; then
		printf '%s\n' "$hits" | sed "s|^$src/||; s|\$|  <- $why|"
		bad=1
	fi
}

rule ops/cpu 'ops/cuda/' 'ops/cpu must not include the CUDA backend'
rule ops/cpu 'ops/[^/"<>]+[">]' \
	'ops/cpu must not include the dispatch layer (only ops/ops_geom.h)' \
	'ops/ops_geom\.h[">]'
rule ops/cpu '\.\./' 'no relative includes out of ops/cpu'
rule ops/cuda 'ops/cpu/' 'ops/cuda must not include the CPU backend'
rule ops/cuda 'ops/[^/"<>]+[">]' \
	'ops/cuda must not include the dispatch layer (only ops/ops_geom.h)' \
	'ops/ops_geom\.h[">]'
rule ops/cuda '\.\./|cpu_ops\.h' 'no relative includes out of ops/cuda'
rule runtime 'ops/|\.\./|cpu_ops\.h|cuda_ops\.h|cuda_optim\.h|ops_check\.h' \
	'the runtime must not include any ops header'

if [ $bad -ne 0 ]; then
	echo "FAIL: layering broken (see docs/ARCHITECTURE.md, Ops as leaves)"
	exit 1
fi
echo "ok: ops/cpu, ops/cuda and runtime include only what they may"
