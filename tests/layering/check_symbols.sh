#!/bin/sh
# check_symbols.sh OBJECT... - the layering of core/ checked on what the
# compiled code calls, not only on what it includes: fail, naming the
# object and the symbol, when
#   core/runtime uses a symbol defined in ops/, engine/, dist/, config/
#                or text/ (data flows down: the runtime is the floor);
#   core/ops     uses a symbol defined in engine/, dist/, config/ or text/.
# The objects are libmg's ($<TARGET_OBJECTS:mg>); each is placed in its
# layer by its path (.../mg.dir/<layer>/...).
set -u
[ $# -gt 0 ] || { echo "usage: check_symbols.sh OBJECT..." >&2; exit 2; }
command -v nm >/dev/null || { echo "check_symbols: no nm" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for o in "$@"; do
	layer=$(printf '%s\n' "$o" | sed -n 's|.*/mg\.dir/\([a-z_]*\)/.*|\1|p')
	[ -n "$layer" ] || { echo "check_symbols: $o: no layer in its path" >&2; exit 2; }
	[ -f "$o" ] || { echo "check_symbols: $o is missing" >&2; exit 2; }
	nm --defined-only "$o" | awk '$2 ~ /^[TDBRV]$/ {print $3}' >>"$tmp/def_$layer"
	nm -u "$o" | awk -v o="$o" '{print $2, o}' >>"$tmp/use_$layer"
done
bad=0
# rule LAYER FORBIDDEN...: LAYER's objects must not use symbols the
# FORBIDDEN layers define.
rule() {
	user=$1
	shift
	[ -s "$tmp/use_$user" ] || { echo "check_symbols: no objects of $user" >&2; bad=1; return; }
	for f in "$@"; do
		[ -s "$tmp/def_$f" ] || continue
		hits=$(awk 'NR == FNR { d[$1] = 1; next } ($1 in d)' \
			"$tmp/def_$f" "$tmp/use_$user")
		if [ -n "$hits" ]; then
			printf '%s\n' "$hits" | awk -v u="$user" -v f="$f" '{
				o = $2; sub(/.*\/mg\.dir\//, "core/", o); sub(/\.o$/, "", o)
				print o ": uses " $1 ", defined in core/" f "/  <- " u " must not call up into " f }'
			bad=1
		fi
	done
}
rule runtime ops engine dist config text
rule ops engine dist config text
if [ $bad -ne 0 ]; then
	echo "FAIL: layering broken (docs/ARCHITECTURE.md, Ops as leaves)"
	exit 1
fi
echo "ok: the runtime calls nothing above it, the ops nothing above the runtime"
