/*
 * abi.h - the versioned plugin descriptor every mgrun plugin exports.
 *
 * A plugin is a shared object with one exported function, mg_plugin_entry(),
 * returning a pointer to a static struct mg_plugin. The core checks the ABI
 * major (must match), the minor (must not exceed the core's) and struct_size
 * before touching anything else, so an old core refuses a newer plugin with a
 * message instead of crashing on a layout it does not know.
 */
#ifndef MG_ABI_H
#define MG_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Minor versions add fields at the end of structs and optional callbacks;
 * the core reads an addition only from plugins built for that minor or
 * later, so older plugins keep loading unchanged.
 *   1.1  strategy max_read
 *   1.2  ctx local_world, mg_copy_async / mg_host_call
 *   1.3  sequence models: token batches (ids, labels with MG_IGNORE_INDEX,
 *        positions, lengths), dataset read_tokens, model-declared metrics,
 *        gradient accumulation (ctx micro / micro_count, strategy caps)
 *   1.4  text and the kit: ctx cache_dir (where datasets keep tokenized
 *        data), model decode (incremental next-token logits for `mgrun
 *        generate`), comm supports() (which dtypes and reductions a
 *        backend takes), model save_hf (`mgrun export`: the model
 *        writes its Hugging Face folder, adapters merged) with the
 *        safetensors writer and F16/BF16 host conversion of
 *        mg/tensor_file.h; the strategy kit (mg/kit.h) is versioned
 *        apart, MG_KIT_VERSION_*
 *   1.5  NF4 format and mg_op_nf4_dequantize: mg/nf4.h (bitsandbytes'
 *        4-bit NormalFloat blobs of MG_NF4 tensors, host quantize /
 *        dequantize; mg_tensor_bytes of an MG_NF4 tensor is its blob
 *        size) and mg/ops_quant.h (mg_op_nf4_dequantize,
 *        mg_op_nf4_quantize)
 *        and fused kernels (ops_llm.h): mg_op_add_rmsnorm,
 *        mg_op_rmsnorm_backward_add, mg_op_linear_xent and
 *        mg_op_linear_lora_xent (chunked linear + cross-entropy),
 *        mg_op_linear_backward_add (ops_nn.h: dx += dy w, the input
 *        gradients of projections sharing an input summed by the GEMM)
 *        and the memory category MG_MEM_LIBRARY (the core's cuBLAS
 *        workspace and NCCL buffers; appended, the others keep their
 *        values), mg_comm_stats device_bytes (core-only)
 *   1.6  quantization-aware training (torchao's 8da4w): mg/int4.h (the
 *        int4 / int8 formulas, host pack / unpack of int4 weights) and
 *        the fake-quantization ops of mg/ops_quant.h (mg_op_fq_int4_weight,
 *        mg_op_fq_int8_token and their straight-through backward ops):
 *        new functions only, no struct or callback changes, so plugins
 *        built for 1.0-1.5 load unchanged; and MG_INT4 appended to
 *        enum mg_dtype (before MG_DTYPE_COUNT, the others keep their
 *        values) for `mgrun export --dtype int4` (save_hf's dt)
 *        and sharded Hugging Face export: model save_hf_sharded (save_hf
 *        with a shard size, `mgrun export --max-shard-size`) and the
 *        sharded safetensors writer of mg/tensor_file.h
 *        (mg_shard_writer_*: model-0000k-of-0000N.safetensors and
 *        model.safetensors.index.json), and the counter
 *        MG_C_TOKENS_COMPUTED appended to enum mg_counter (the core
 *        counts it; struct mg_stats stays the core's own, so plugins
 *        are unaffected)
 *   1.7  model init_unit_part (a unit's initial values for element
 *        ranges only) and mg_init_unit_part: an fsdp rank draws only
 *        its shard's random values (every rank drew a 7B model's 6.7e9
 *        normals whole at startup); optional, so models and strategies
 *        built for 1.0-1.6 load unchanged
 *   1.8  all-gathers on the GPU's copy engines: struct mg_comm's
 *        window_alloc / window_free (appended; NCCL 2.28's symmetric
 *        windows on a zero-CTA communicator) and mg_buf_alloc_comm
 *        (device memory in such a window where the communicator has
 *        one, ordinary memory otherwise). FSDP's all-gathers take SMs
 *        from the GEMMs they overlap at 7B; only new entry points, so
 *        plugins built for 1.0-1.7 load unchanged
 *   1.9  mg_host_call_side: host work on the side copy stream, which
 *        the compute stream does not wait for until mg_copy_join (a
 *        host call on the compute stream stalls it): offload's
 *        update_in_backward runs each unit's host optimizer while
 *        backward computes the next units; one new function, so
 *        plugins built for 1.0-1.8 load unchanged
 *   1.10 mg_file_read (mg/tensor_file.h): whole user files read with
 *        FIFOs and devices refused, a size cap and truncated gzip
 *        streams refused, for the text datasets and llama's configs;
 *        and mg_json_nul_string (mg/tokenizer.h): strings with a NUL
 *        that C strings would cut; new functions only, so plugins
 *        built for 1.0-1.9 load unchanged
 *   1.11 chat templates (mg/chat.h): mg_chat_template_parse / render /
 *        free and mg_tokenizer_apply_chat_template, a Jinja interpreter
 *        for tokenizer_config.json's chat_template, and mg_utf8_put
 *        (mg/tokenizer.h); new functions only,
 *        so plugins built for 1.0-1.10 load unchanged
 *   1.12 attention options (mg/ops_llm.h): struct mg_attn_opts (the
 *        score scale and a sliding window, sized by its caller) and
 *        mg_op_attention_opts, _opts_backward and
 *        mg_op_attention_decode_opts for the decoder families; new
 *        functions only, the scale-only ops stay, so plugins built for
 *        1.0-1.11 load unchanged
 *   1.13 partial rotary (Phi-3): mg_op_rope and _backward take an
 *        inv_freq of h <= hd/2 frequencies and turn the first 2h dims
 *        of each head only (an older core refuses such a table), and
 *        mg_op_rope_scaled / _scaled_backward scale cos and sin
 *        (longrope's attention factor); the same calls as before
 *        otherwise, so plugins built for 1.0-1.12 load unchanged
 */
#define MG_ABI_MAJOR 1
#define MG_ABI_MINOR 13

/* Symbols the core exports to plugins (libmg.so) and plugins export to it. */
#if defined(__GNUC__)
#define MG_EXPORT __attribute__((visibility("default")))
#else
#define MG_EXPORT
#endif

#define MG_PLUGIN_ENTRY_SYMBOL "mg_plugin_entry"

enum mg_plugin_kind {
	MG_PLUGIN_STRATEGY = 1,
	MG_PLUGIN_MODEL = 2,
	MG_PLUGIN_DATASET = 3,
};

struct mg_ctx;
struct mg_opts;
struct mg_option;

struct mg_plugin {
	uint32_t abi_major;   /* MG_ABI_MAJOR the plugin was built against */
	uint32_t abi_minor;   /* MG_ABI_MINOR the plugin was built against */
	uint32_t struct_size; /* sizeof(struct mg_plugin) at build time */
	enum mg_plugin_kind kind;
	const char
		*name; /* the name used in INI files: [strategy] name = ... */
	const char *version;		 /* the plugin's own version string */
	const char *description;	 /* one line for --list-plugins */
	const struct mg_option *options; /* schema, terminated by {0} */

	/*
	 * create: build an instance from validated options. ctx is the run
	 * context; it stays valid until destroy. Valid already in create():
	 * rank, world, local ranks, dev, comm (collectives work), dtypes,
	 * seed, optim, cache_dir; optim_vals, grad_scale and the
	 * model/strategy binding come later (docs/PLUGINS.md).
	 * Returns 0, or a negative value after mg_error() said why.
	 */
	int (*create)(const struct mg_opts *opts, struct mg_ctx *ctx,
		      void **self);
	void (*destroy)(void *self);

	/* The kind's callback table: struct mg_strategy_ops, mg_model_ops or
	 * mg_dataset_ops. */
	const void *ops;
};

typedef const struct mg_plugin *(*mg_plugin_entry_fn)(void);

/* Fill the three version fields; use as the first line of a descriptor. */
#define MG_PLUGIN_HEADER                                                       \
	.abi_major = MG_ABI_MAJOR, .abi_minor = MG_ABI_MINOR,                  \
	.struct_size = sizeof(struct mg_plugin)

/* Define the exported entry point returning desc. */
#define MG_PLUGIN_DEFINE(desc)                                                 \
	MG_EXPORT const struct mg_plugin *mg_plugin_entry(void);               \
	MG_EXPORT const struct mg_plugin *mg_plugin_entry(void)                \
	{                                                                      \
		return &(desc);                                                \
	}

#ifdef __cplusplus
}
#endif
#endif
