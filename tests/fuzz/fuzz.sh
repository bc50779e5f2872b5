#!/bin/sh
# fuzz.sh - build one libFuzzer target with clang and fuzz it for a fixed
# time, starting from the checked-in seeds (tests/fuzz/corpus/TARGET/,
# made by make_corpus.py, including every past finding as a regression).
# Fails on any crash, sanitizer report, leak, timeout or out-of-memory;
# the input at fault is left as WORK/crash-* (copy it into the corpus when
# fixed). Without clang and libFuzzer (Debian: clang, libclang-rt-dev) the
# test is skipped (exit 77).
# Usage: fuzz.sh SRC WORK TARGET SECONDS
#	TARGET: ini | idx | safetensors | report | chat | tokenizer |
#		tokconfig | hfconfig | adapter | prompts | instruct |
#		token_jsonl | text
set -eu
src=$1 work=$2 target=$3 secs=$4
cc=${MG_FUZZ_CC:-clang}
command -v "$cc" >/dev/null 2>&1 || {
	echo "SKIPPED: no $cc (apt-get install clang libclang-rt-dev)"
	exit 77
}
rm -rf "$work"
mkdir -p "$work/found"
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)\n{ (void)d; (void)n; return 0; }\n' \
	>"$work/probe.c"
"$cc" -fsanitize=fuzzer,address,undefined "$work/probe.c" -o "$work/probe" \
	>"$work/probe.log" 2>&1 || {
	cat "$work/probe.log"
	echo "SKIPPED: $cc cannot link -fsanitize=fuzzer (apt-get install libclang-rt-dev)"
	exit 77
}

# The tokenizer (core/text) and what it reads files with: every target
# that loads a tokenizer.json links these.
tok_srcs="core/text/tok_util.c core/text/tok_bytelevel.c core/text/tok_normalize.c
core/text/tok_pretok.c core/text/tok_bpe.c core/text/tok_added.c core/text/tok_post.c
core/text/tok_decode.c core/text/tok_components.c core/text/tok_load.c
core/text/tok_encode.c core/text/jinja_value.c core/text/jinja_lex.c
core/text/jinja_parse.c core/text/jinja_eval.c core/text/chat_template.c
core/text/utf8_put.c core/runtime/log.c core/runtime/file_read.c
core/runtime/input_files.c"
tok_libs="-lcjson -lpcre2-8 -lm -lz -lpthread"
cflags=
# The text datasets' shared code (plugins/datasets/common).
td_srcs="plugins/datasets/common/td_files.c plugins/datasets/common/td_render.c
plugins/datasets/common/td_render_model.c plugins/datasets/common/td_pairs.c plugins/datasets/common/td_corpus.c
plugins/datasets/common/td_tok_hf.c core/runtime/tensor_file.c
core/runtime/safetensors.c core/runtime/tensor.c core/runtime/nf4.c
core/runtime/half.c"
# The options of plugins (mg_opt_*), for targets that link a plugin file.
opt_srcs="core/config/config.c core/config/diag.c core/config/options.c
core/config/util.c"
case $target in
ini)
	srcs="core/config/config.c core/config/diag.c core/config/options.c core/config/util.c"
	libs="-linih" ;;
idx)
	srcs="plugins/datasets/mnist/idx.c core/runtime/log.c"
	libs="-lz" ;;
safetensors)
	# nf4.c: mg_tensor_bytes sizes NF4 tensors by their blob layout
	# input_files.c: mg_st_open notes the files a run reads
	srcs="core/runtime/safetensors.c core/runtime/log.c core/runtime/tensor.c
core/runtime/nf4.c core/runtime/input_files.c"
	libs="-lcjson -lm -lpthread" ;;
report)
	# file_read.c: the artefacts are read with mg_file_read
	srcs="core/analysis/run_load.c core/runtime/series.c core/runtime/log.c
core/runtime/file_read.c core/runtime/input_files.c"
	libs="-lcjson -lm -lz" ;;
chat)
	srcs="core/text/jinja_value.c core/text/jinja_lex.c core/text/jinja_parse.c
core/text/jinja_eval.c core/text/utf8_put.c"
	libs="-lm" ;;
tokenizer | tokconfig)
	srcs="$tok_srcs"
	libs="$tok_libs" ;;
prompts)
	srcs="core/cli/prompts.c $tok_srcs"
	libs="$tok_libs" ;;
adapter)
	# generate's reader and the llama plugin's (llama_adapter.c; its
	# llama_read_file is in llama_config.c, which reads the options)
	srcs="core/cli/adapter.c core/cli/read_all.c core/runtime/log.c
core/runtime/file_read.c core/runtime/input_files.c
plugins/models/llama/llama_adapter.c plugins/models/llama/llama_config.c
plugins/models/llama/llama_family.c $opt_srcs"
	cflags="-I$src/plugins/models/llama"
	libs="-lcjson -linih -lm -lz" ;;
instruct | token_jsonl | text)
	# the plugin's own source and what it links (plugins/datasets), run
	# through its mg_plugin_entry with options built from an INI;
	# tensor_file.c: the token cache's mg_mkdir_p (and what it links)
	srcs="plugins/datasets/$target/$target.c $td_srcs $tok_srcs $opt_srcs"
	cflags="-fopenmp -I$src/plugins/datasets/common"
	libs="$tok_libs -linih" ;;
hfconfig)
	# options.c and its helpers: llama_cfg_from_opts, in the same file,
	# reads the plugin options
	srcs="plugins/models/llama/llama_config.c plugins/models/llama/llama_family.c
core/runtime/log.c core/runtime/file_read.c core/runtime/input_files.c
$opt_srcs"
	cflags="-I$src/plugins/models/llama"
	libs="-lcjson -linih -lm -lz" ;;
*)
	echo "fuzz.sh: unknown target '$target'" >&2
	exit 2 ;;
esac
# The dataset code runs OpenMP loops: clang needs its own runtime
# (Debian: libomp-dev), which the gcc build does not.
case $cflags in
*-fopenmp*)
	printf '#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n' \
		>"$work/omp.c"
	"$cc" -fopenmp "$work/omp.c" -o "$work/omp" >"$work/omp.log" 2>&1 || {
		cat "$work/omp.log"
		echo "SKIPPED: $cc cannot build OpenMP code (apt-get install libomp-dev)"
		exit 77
	} ;;
esac
set --
for s in $srcs; do set -- "$@" "$src/$s"; done
"$cc" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-DMG_FUZZ_DATA="\"$src/tests/text/data\"" \
	-DMG_FUZZ_DEPS="\"$src/.deps\"" $cflags \
	-I"$src/include" -I"$src/core" -I"$src/plugins/datasets/mnist" \
	-o "$work/fuzz_$target" "$src/tests/fuzz/fuzz_$target.c" "$@" $libs

# Fuzz: new inputs go to WORK/found, the seeds are only read.
echo "fuzz_$target: ${secs}s from $(ls "$src/tests/fuzz/corpus/$target" | wc -l) seeds"
# Scratch files in memory where there is /dev/shm (the readers take paths).
tmp=$work
[ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm
rc=0
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
TMPDIR="$tmp" \
	"$work/fuzz_$target" -max_total_time="$secs" -timeout=10 \
	-rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
	-artifact_prefix="$work/" "$work/found" \
	"$src/tests/fuzz/corpus/$target" >"$work/fuzz.log" 2>&1 || rc=$?
if [ $rc -ne 0 ]; then
	tail -n 60 "$work/fuzz.log"
	echo "FAIL: fuzz_$target exited $rc; input(s): $(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null | tr '\n' ' ')"
	exit 1
fi
grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|INITED' "$work/fuzz.log" || true
echo "fuzz_$target: no finding; $(ls "$work/found" | wc -l) new corpus inputs in $work/found"
