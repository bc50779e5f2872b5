/*
 * fuzz_hfconfig.c - libFuzzer target for a Hugging Face config.json as the
 * llama plugin reads it (plugins/models/llama/llama_config.c):
 * llama_cfg_from_hf, whose last step is llama_cfg_check (the sizes, their
 * product, heads and head_dim, eps, theta and rope scaling). A config it
 * accepts must satisfy what the model then relies on (the bounds checked
 * here), and its rotary frequencies are computed (llama_inv_freq) and must
 * be finite, as the model computes them before any weight is read.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "llama.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[128];
	fuzz_write("config.json", data, size, path, sizeof path);
	struct llama_cfg c;
	if (llama_cfg_from_hf(&c, path))
		return 0;
	if (c.vocab < 2 || c.dim < 2 || c.ffn < 1 || c.layers < 1 ||
	    c.heads < 1 || c.kv_heads < 1 || c.heads % c.kv_heads ||
	    c.head_dim < 2 || c.head_dim % 2 || !(c.norm_eps > 0) ||
	    !isfinite(c.norm_eps) || !(c.rope_theta > 1) ||
	    !isfinite(c.rope_theta) || llama_max_proj(&c) <= 0)
		abort();
	float *f = malloc((size_t)c.head_dim / 2 * sizeof *f);
	if (!f)
		abort();
	llama_inv_freq(&c, f);
	for (int64_t j = 0; j < c.head_dim / 2; j++)
		if (!isfinite(f[j]))
			abort();
	free(f);
	return 0;
}
