#!/bin/sh
# fortunes_tree.sh MGRUN REPO TREE - the layout conf/fortunes_lora.ini and
# fortunes_qlora.ini expect (../runs/fortunes/hf beside conf/), built in
# TREE rather than in the checkout (whose runs/ may hold a user's model):
# the confs copied byte for byte with the data they name, .deps linked,
# conf/fortunes.ini trained 3 steps and exported to runs/fortunes/hf as
# the README's chain does. The ctest fixture the two confs' runs need;
# skipped (77) without the fortunes package or the tokenizers.
set -eu
mgrun=$1 repo=$2 tree=$3
for n in /usr/share/games/fortunes "$repo/.deps/tokenizers/llama2"; do
	[ -e "$n" ] || { echo "skipped: no $n"; exit 77; }
done
rm -rf "$tree"
mkdir -p "$tree/conf"
cp "$repo"/conf/fortunes*.ini "$tree/conf/"
cp -r "$repo/conf/data" "$tree/conf/"
ln -s "$repo/.deps" "$tree/.deps"
S="--set run.out_dir=$tree/runs --set run.max_steps=3"
# shellcheck disable=SC2086
"$mgrun" -c "$tree/conf/fortunes.ini" $S >"$tree/train.log" 2>&1 ||
	{ tail -20 "$tree/train.log"; exit 1; }
# shellcheck disable=SC2086
"$mgrun" export -c "$tree/conf/fortunes.ini" $S --out "$tree/runs/fortunes/hf" \
	>"$tree/export.log" 2>&1 || { tail -20 "$tree/export.log"; exit 1; }
echo "fortunes tree: $tree/runs/fortunes/hf"
