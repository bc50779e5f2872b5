/*
 * llama_quant.c - QLoRA's 4-bit base (`quant = nf4`): the seven
 * projections of every decoder layer are declared MG_NF4, frozen, and
 * stored by the strategy as NF4 blobs (bitsandbytes' NormalFloat4,
 * blocks of 64 with double-quantised scales, mg/nf4.h); the embedding,
 * the norms and the output head stay in the run's float types, as
 * peft + bitsandbytes leave them.
 *
 * Why a helper rather than an NF4 GEMM: every op the model runs takes
 * compute-dtype weights, and the adapters' fused paths read the lent
 * pointers, so each base GEMM gets its weight dequantized just before it
 * (llama_weight) into one scratch sized for the largest projection of a
 * layer. Backward dequantizes again instead of keeping a copy, so the
 * only full-precision weight that ever exists on the device is the one
 * the current GEMM reads. The scratch is accounted as MG_MEM_GATHER: it
 * is a transient full copy of a parameter made for compute, the same
 * lifetime and meaning as an FSDP gather slot, and it does not grow
 * with the batch as activations do.
 */
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "mg/nf4.h"

int llama_quant_setup(struct llama *m, const struct mg_opts *o)
{
	m->nf4 = mg_opt_enum(o, "quant") == 1; /* none|nf4 */
	if (m->nf4 && m->lora.rank == 0)
		return mg_error("llama: quant = nf4 stores the base weights "
				"frozen in 4 bits, so only adapters can "
				"train: set lora_rank > 0 (QLoRA)");
	return 0;
}

bool llama_quant_param(const struct llama *m, int lp)
{
	return m->nf4 && llama_lp_proj(lp);
}

int llama_quant_fill(struct llama *m, struct mg_tensor *blob,
		     const char *hf_name, uint64_t key)
{
	if (blob->dtype != MG_NF4)
		return mg_error("llama: %s: NF4 parameter handed as %s",
				hf_name, mg_dtype_name(blob->dtype));
	/* A bitsandbytes folder's NF4 bytes go in as they are. */
	if (m->hf) {
		int rc = llama_hf_load_nf4(m, hf_name, blob);
		if (rc)
			return rc < 0 ? -1 : 0;
	}
	/* One tensor's f32 values at a time (an 8B model never holds a
	 * full f32 copy), then into the blob. */
	const int64_t n = mg_tensor_numel(blob);
	struct mg_tensor f = mg_tensor_make(NULL, MG_F32, MG_DEV_CPU,
					    blob->ndim, blob->shape);
	f.data = malloc((size_t)n * sizeof(float));
	if (!f.data)
		return mg_error("llama: out of memory for %s", hf_name);
	int rc = 0;
	if (m->hf) {
		rc = llama_hf_load(m, hf_name, &f);
	} else {
		float *x = f.data;
#pragma omp parallel for schedule(static) if (n > 65536)
		for (int64_t j = 0; j < n; j++)
			x[j] = (float)(m->c.init_std *
				       mg_rng_normal(key, (uint64_t)j));
	}
	if (!rc && mg_nf4_quantize_host(blob->data, f.data, n))
		rc = mg_error_prefix("llama: NF4 of %s", hf_name);
	free(f.data);
	return rc;
}

const struct mg_tensor *llama_weight(struct llama *m, struct mg_ctx *ctx,
				     const struct mg_tensor *w)
{
	if (w->dtype != MG_NF4)
		return w;
	const enum mg_dtype dt = ctx->compute_dtype;
	/* fp64 runs: dequantized to F32, then widened. */
	const bool wide = dt == MG_F64;
	const int64_t cap = llama_max_proj(&m->c), n = mg_tensor_numel(w);
	const size_t main = llama_al((size_t)cap * mg_dtype_size(dt));
	if (n > cap) {
		mg_error("llama: NF4 weight of %lld elements exceeds the "
			 "largest projection (%lld)",
			 (long long)n, (long long)cap);
		return NULL;
	}
	if (!m->qbuf.ptr &&
	    mg_buf_alloc(ctx, &m->qbuf,
			 main + (wide ? (size_t)cap * sizeof(float) : 0),
			 MG_MEM_GATHER)) {
		mg_error_prefix("llama: NF4 dequantization buffer");
		return NULL;
	}
	struct mg_tensor out = mg_tensor_make(m->qbuf.ptr, dt, ctx->dev->kind,
					      w->ndim, w->shape);
	if (wide) {
		struct mg_tensor f32 = out;
		f32.dtype = MG_F32;
		f32.data = (char *)m->qbuf.ptr + main;
		if (mg_op_nf4_dequantize(ctx, w, &f32) ||
		    mg_op_convert(ctx, out.data, dt, f32.data, MG_F32, n)) {
			mg_error_prefix("llama: NF4 dequantization");
			return NULL;
		}
	} else if (mg_op_nf4_dequantize(ctx, w, &out)) {
		mg_error_prefix("llama: NF4 dequantization");
		return NULL;
	}
	m->qw = out;
	return &m->qw;
}

void llama_quant_describe(const struct llama *m)
{
	if (!m->nf4)
		return;
	const struct llama_cfg *c = &m->c;
	const int64_t qd = c->heads * c->head_dim,
		      kvd = c->kv_heads * c->head_dim;
	const int64_t shapes[7][2] = {{qd, c->dim},	{kvd, c->dim},
				      {kvd, c->dim},	{c->dim, qd},
				      {c->ffn, c->dim}, {c->ffn, c->dim},
				      {c->dim, c->ffn}};
	size_t bytes = 0;
	int64_t n = 0;
	for (int k = 0; k < 7; k++) {
		struct mg_tensor t =
			mg_tensor_make(NULL, MG_NF4, MG_DEV_CPU, 2, shapes[k]);
		bytes += mg_tensor_bytes(&t);
		n += shapes[k][0] * shapes[k][1];
	}
	mg_info("llama: quant = nf4: the %lld layers' q, k, v, o, gate, up, "
		"down (%lld parameters) stored frozen as NF4 (blocks of %d, "
		"double-quantized scales), %.4g MiB instead of %.4g MiB in "
		"bf16; embedding, norms and head in %s",
		(long long)c->layers, (long long)(n * c->layers), MG_NF4_BLOCK,
		(double)bytes * (double)c->layers / 1048576.0,
		(double)n * 2.0 * (double)c->layers / 1048576.0,
		mg_dtype_name(m->ctx->compute_dtype));
}

void llama_quant_free(struct llama *m)
{
	mg_buf_free(m->ctx, &m->qbuf);
}
