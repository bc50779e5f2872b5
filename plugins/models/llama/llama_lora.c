/*
 * llama_lora.c - low-rank adapters (LoRA, Hu et al. 2021, as Hugging
 * Face PEFT implements them) on the llama projections: the options, the
 * initialisation, and the adapter path y += s * B (A dropout(x)) forward
 * and backward through the core's public ops, kept in two functions so
 * training and incremental decoding apply adapters the same way.
 *
 * The scale s = alpha / r (alpha / sqrt(r) with rsLoRA) is applied as a
 * tiny [r, r] GEMM by s * I after A: R x r x r multiply-adds against the
 * R x in x r of A, so no element-wise scale op is needed and the scale
 * stays exact in every dtype.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

/* Short names accepted in lora_targets, by LT_*. */
static const char *const short_name[LT_COUNT] = {"q",	 "k",  "v",    "o",
						 "gate", "up", "down", "head"};

/* Key label of the adapters' dropout stream. */
#define LORA_DROP_LABEL 0x6c6f7261647270ull
/* Dropout counters advance this many tokens per sample, so a token's
 * mask does not depend on the padded row length of its micro-batch. */
#define ROW_STRIDE ((int64_t)1 << 20)

void llama_lora_dims(const struct llama_cfg *c, int t, int64_t *in,
		     int64_t *out)
{
	const int64_t D = c->dim, qd = c->heads * c->head_dim,
		      kvd = c->kv_heads * c->head_dim;
	const int64_t ins[LT_COUNT] = {D, D, D, qd, D, D, c->ffn, D};
	const int64_t outs[LT_COUNT] = {qd,	kvd,	kvd, D,
					c->ffn, c->ffn, D,   c->vocab};
	*in = ins[t];
	*out = outs[t];
}

/* Fused modules' names (Phi-3's, PEFT's and short) as target bits. */
static unsigned fused_bits(const char *p, size_t n)
{
	static const struct {
		const char *name;
		unsigned bits;
	} f[] = {
		{"qkv_proj", (1u << LT_Q) | (1u << LT_K) | (1u << LT_V)},
		{"qkv", (1u << LT_Q) | (1u << LT_K) | (1u << LT_V)},
		{"gate_up_proj", (1u << LT_GATE) | (1u << LT_UP)},
		{"gate_up", (1u << LT_GATE) | (1u << LT_UP)},
	};
	for (size_t i = 0; i < sizeof f / sizeof *f; i++)
		if (strlen(f[i].name) == n && !strncmp(p, f[i].name, n))
			return f[i].bits;
	return 0;
}

/* "q,k,v" (or PEFT's "q_proj", "qkv_proj", "all") into target bits. */
static int parse_targets(const char *s, unsigned *bits)
{
	*bits = 0;
	const char *p = s;
	while (*p) {
		size_t n = strcspn(p, ", ");
		if (n && fused_bits(p, n)) {
			*bits |= fused_bits(p, n);
		} else if (n) {
			int found = -1;
			for (int t = 0; t < LT_COUNT && found < 0; t++)
				if ((strlen(short_name[t]) == n &&
				     !strncmp(p, short_name[t], n)) ||
				    (strlen(llama_lora_module[t]) == n &&
				     !strncmp(p, llama_lora_module[t], n)))
					found = t;
			if (n == 3 && !strncmp(p, "all", 3)) {
				*bits |= (1u << LT_HEAD) - 1;
			} else if (found < 0) {
				return mg_error("llama: lora_targets: unknown "
						"target '%.*s' (q, k, v, o, "
						"gate, up, down, head, qkv, "
						"gate_up, all)",
						(int)n, p);
			} else {
				*bits |= 1u << found;
			}
		}
		p += n;
		p += strspn(p, ", ");
	}
	if (!*bits)
		return mg_error("llama: lora_targets names no projection");
	return 0;
}

static void peft_name(const struct llama *m, int layer, int t, char ab,
		      char *out, size_t cap);

/* The tensor names in safetensors file path's header (the file already
 * validated by mg_tensor_file_open), or NULL after an error. */
static cJSON *tensor_names(const char *path)
{
	FILE *f = fopen(path, "rb");
	unsigned char n8[8];
	uint64_t n = 0;
	char *h = NULL;
	if (f && fread(n8, 1, 8, f) == 8) {
		for (int i = 7; i >= 0; i--)
			n = n << 8 | n8[i];
		h = n <= (100u << 20) ? malloc((size_t)n) : NULL;
		if (h && fread(h, 1, (size_t)n, f) != n) {
			free(h);
			h = NULL;
		}
	}
	if (f)
		fclose(f);
	cJSON *j = h ? cJSON_ParseWithLength(h, (size_t)n) : NULL;
	free(h);
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		mg_error("llama: %s: cannot read its header", path);
		return NULL;
	}
	return j;
}

/* Every tensor of the adapter file must be one the model reads (a
 * target module of a layer it has), each of rank r: a tensor left out
 * would be an adapter silently not applied. */
static int check_tensors(const struct llama *m, const char *cfg_path)
{
	const struct llama_lora *L = &m->lora;
	const char *path = mg_tensor_file_path(L->from);
	cJSON *j = tensor_names(path);
	if (!j)
		return -1;
	int rc = 0;
	char name[256], mods[160];
	const cJSON *e;
	cJSON_ArrayForEach(e, j)
	{
		if (!strcmp(e->string, "__metadata__"))
			continue;
		bool known = false, is_a = false;
		for (int t = 0; t < LT_COUNT && !known; t++) {
			if (!(L->targets & (1u << t)))
				continue;
			int layers = t == LT_HEAD ? 1 : (int)m->c.layers;
			for (int l = 0; l < layers && !known; l++)
				for (int ab = 0; ab < 2 && !known; ab++) {
					peft_name(m,
						  t == LT_HEAD ? INT32_MAX : l,
						  t, ab ? 'B' : 'A', name,
						  sizeof name);
					known = !strcmp(name, e->string);
					is_a = !ab;
				}
		}
		if (!known) {
			llama_lora_modules_of(L->targets, mods, sizeof mods);
			rc = mg_error("llama: %s: tensor '%s' is for no module "
				      "the adapter targets (%s, in %lld "
				      "layers): it would not be applied",
				      path, e->string, mods,
				      (long long)m->c.layers);
			break;
		}
		struct mg_tensor v;
		if (mg_tensor_file_get(L->from, e->string, &v) == 1 &&
		    (v.ndim != 2 || v.shape[is_a ? 0 : 1] != L->rank)) {
			rc = mg_error("llama: %s: tensor '%s' has rank %lld "
				      "(%s of a %d-D tensor), %s says r %d",
				      path, e->string,
				      v.ndim == 2 ? (long long)v.shape[!is_a]
						  : -1LL,
				      is_a ? "rows" : "columns", v.ndim,
				      cfg_path, L->rank);
			break;
		}
	}
	cJSON_Delete(j);
	return rc;
}

/* Open a PEFT adapter folder and check its config against the options
 * (r, lora_alpha, use_rslora, target_modules) and its tensors against
 * the config: its tensors then replace the random initialisation. */
static int open_adapter(struct llama *m, const char *dir)
{
	struct llama_lora *L = &m->lora;
	char path[4200];
	snprintf(path, sizeof path, "%s/adapter_config.json", dir);
	if (llama_adapter_config(path, L->rank, L->alpha, L->rslora,
				 L->targets))
		return -1;
	char tpath[4200];
	snprintf(tpath, sizeof tpath, "%s/adapter_model.safetensors", dir);
	L->from = mg_tensor_file_open(tpath);
	if (!L->from)
		return mg_error_prefix("llama: lora_adapter");
	return check_tensors(m, path);
}

/*
 * PEFT adapts a fused module as one Linear: qkv_proj's adapter is
 * qkv += s B (A drop(x)) with one A [r, D] and one B [q + 2 kv, r], so
 * q, k and v share A and take their rows of B. own[] and brow[] say so;
 * a fused module is adapted whole or not at all (PEFT cannot target a
 * part of it, so a part could not be written as an adapter).
 */
static int fused_groups(struct llama *m)
{
	struct llama_lora *L = &m->lora;
	const struct llama_cfg *c = &m->c;
	static const int qkv[] = {LT_Q, LT_K, LT_V, -1},
			 gu[] = {LT_GATE, LT_UP, -1};
	const struct {
		unsigned flag;
		const int *ts;
		const char *name;
	} g[] = {{LLAMA_FUSE_QKV, qkv, "q, k, v (qkv_proj)"},
		 {LLAMA_FUSE_GU, gu, "gate, up (gate_up_proj)"}};
	for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
		if (!(c->fused & g[i].flag))
			continue;
		unsigned want = 0;
		for (const int *t = g[i].ts; *t >= 0; t++)
			want |= 1u << *t;
		if ((L->targets & want) && (L->targets & want) != want)
			return mg_error("llama: lora_targets: family %s fuses "
					"%s into one module, adapted whole: "
					"target all of them or none",
					llama_families[c->family].model_type,
					g[i].name);
		int64_t row = 0;
		for (const int *t = g[i].ts; *t >= 0; t++) {
			int64_t in, out;
			llama_lora_dims(c, *t, &in, &out);
			L->own[*t] = g[i].ts[0];
			L->brow[*t] = row;
			row += out;
		}
	}
	return 0;
}

struct mg_tensor llama_lora_b(const struct llama *m, const struct mg_tensor *T,
			      int t)
{
	struct mg_tensor b = T[m->lora.ib[t]];
	int64_t in, out;
	llama_lora_dims(&m->c, t, &in, &out);
	if (b.data)
		b.data = (char *)b.data +
			 (size_t)(m->lora.brow[t] * b.shape[1]) *
				 mg_dtype_size(b.dtype);
	b.shape[0] = out;
	return b;
}

int llama_lora_setup(struct llama *m, const struct mg_opts *o)
{
	struct llama_lora *L = &m->lora;
	for (int t = 0; t < LT_COUNT; t++) {
		L->own[t] = t;
		L->brow[t] = 0;
	}
	L->rank = (int)mg_opt_int(o, "lora_rank");
	L->alpha = mg_opt_float(o, "lora_alpha");
	L->dropout = mg_opt_float(o, "lora_dropout");
	L->rslora = mg_opt_bool(o, "rslora");
	for (int t = 0; t < LT_COUNT; t++)
		L->ia[t] = L->ib[t] = -1;
	L->layer_params = m->nlp;
	L->head_params = m->c.tie_embeddings ? 1 : 2;
	if (!L->rank) {
		const char *from = mg_opt_str(o, "lora_adapter");
		return from && from[0] ? mg_error("llama: lora_adapter needs "
						  "lora_rank > 0")
				       : 0;
	}
	if (parse_targets(mg_opt_str(o, "lora_targets"), &L->targets))
		return -1;
	if ((L->targets & (1u << LT_HEAD)) && m->c.tie_embeddings)
		return mg_error("llama: lora_targets 'head' needs an untied "
				"output head (the tied one is the frozen "
				"embedding)");
	L->scale = L->rslora ? L->alpha / sqrt((double)L->rank)
			     : L->alpha / L->rank;
	if (fused_groups(m))
		return -1;
	/* A's of a unit first, then B's: the q, k, v (and gate, up) A's
	 * lie side by side in replicated storage. A fused module's targets
	 * share its one A and B (fused_groups). */
	int na = 0;
	for (int t = 0; t < LT_HEAD; t++)
		na += (L->targets & (1u << t)) && L->own[t] == t;
	int k = 0;
	for (int t = 0; t < LT_HEAD; t++)
		if ((L->targets & (1u << t)) && L->own[t] == t) {
			L->ia[t] = m->nlp + k;
			L->ib[t] = m->nlp + na + k;
			k++;
		} else if (L->targets & (1u << t)) {
			L->ia[t] = L->ia[L->own[t]];
			L->ib[t] = L->ib[L->own[t]];
		}
	L->layer_params = m->nlp + 2 * na;
	if (L->targets & (1u << LT_HEAD)) {
		L->ia[LT_HEAD] = 2;
		L->ib[LT_HEAD] = 3;
		L->head_params = 4;
	}
	const char *from = mg_opt_str(o, "lora_adapter");
	return from && from[0] ? open_adapter(m, from) : 0;
}

void llama_lora_free(struct llama *m)
{
	mg_tensor_file_close(m->lora.from);
	m->lora.from = NULL;
	mg_buf_free(m->ctx, &m->lora.S);
}

/* PEFT's name of target t's lora_A or lora_B in layer `layer`. */
static void peft_name(const struct llama *m, int layer, int t, char ab,
		      char *out, size_t cap)
{
	if (t == LT_HEAD || layer >= m->c.layers)
		snprintf(out, cap, "base_model.model.lm_head.lora_%c.weight",
			 ab);
	else
		snprintf(out, cap,
			 "base_model.model.model.layers.%d.%s%s.lora_%c.weight",
			 layer, t <= LT_O ? "self_attn." : "mlp.",
			 llama_lora_mod(&m->c, t), ab);
}

/* dst from the adapter file's tensor of the same shape. */
static int load_one(const struct llama *m, const char *name,
		    struct mg_tensor *dst)
{
	struct mg_tensor v;
	const char *path = mg_tensor_file_path(m->lora.from);
	if (mg_tensor_file_get(m->lora.from, name, &v) != 1)
		return mg_error("llama: %s has no %s (lora_targets differ from "
				"its target_modules?)",
				path, name);
	if (v.ndim != dst->ndim || v.shape[0] != dst->shape[0] ||
	    v.shape[1] != dst->shape[1])
		return mg_error("llama: %s: %s is [%lld, %lld], the model "
				"needs [%lld, %lld]",
				path, name, (long long)v.shape[0],
				(long long)v.shape[1], (long long)dst->shape[0],
				(long long)dst->shape[1]);
	return mg_tensor_convert_host(dst, &v) ? mg_error_prefix("%s", path)
					       : 0;
}

int llama_lora_init(const struct llama *m, int layer, int t,
		    struct mg_tensor *A, struct mg_tensor *B, uint64_t key)
{
	if (m->lora.from) {
		char name[256];
		peft_name(m, layer, t, 'A', name, sizeof name);
		if (load_one(m, name, A))
			return -1;
		peft_name(m, layer, t, 'B', name, sizeof name);
		return load_one(m, name, B);
	}
	const double bound = 1.0 / sqrt((double)A->shape[1]);
	const int64_t na = mg_tensor_numel(A), nb = mg_tensor_numel(B);
	for (int64_t j = 0; j < na; j++) {
		double x = bound * (2 * mg_rng_uniform(key, (uint64_t)j) - 1);
		if (A->dtype == MG_F64)
			((double *)A->data)[j] = x;
		else
			((float *)A->data)[j] = (float)x;
	}
	memset(B->data, 0, (size_t)nb * mg_dtype_size(B->dtype));
	return 0;
}

/* Element offset in the scale buffer of the [r, n r] selection matrix
 * of member j of a fused group of n (n 2 or 3), after s * I. */
static int64_t sel_off(int64_t r, int n, int j)
{
	return r * r + (n == 2 ? 0 : 4 * r * r) + (int64_t)j * n * r * r;
}

/* h[k] = v in dtype dt. */
static void put_scale(unsigned char *h, int64_t k, enum mg_dtype dt, double v)
{
	void *e = h + (size_t)k * mg_dtype_size(dt);
	if (dt == MG_F64)
		memcpy(e, &v, 8);
	else if (dt == MG_F32)
		*(float *)e = (float)v;
	else if (dt == MG_BF16)
		*(uint16_t *)e = mg_float_to_bf16((float)v);
	else
		*(uint16_t *)e = mg_float_to_half((float)v);
}

/* The scale matrices in the compute dtype, built on first use (the dtype
 * is the context's at forward): S = s * I [r, r], then for fused groups
 * of n = 2, 3 the selections Sel(n, j) [r, n r] with s at (i, j r + i),
 * which take member j's s A x out of the group's [R, n r] product. */
static int scale_buffer(struct llama *m, struct mg_ctx *ctx)
{
	struct llama_lora *L = &m->lora;
	const enum mg_dtype dt = ctx->compute_dtype;
	const int64_t r = L->rank, n_el = sel_off(r, 3, 3);
	const size_t es = mg_dtype_size(dt), bytes = (size_t)n_el * es;
	if (L->S_built && L->S_dt == dt)
		return 0;
	unsigned char *h = calloc(1, bytes);
	if (!h || mg_buf_reserve(ctx, &L->S, bytes, MG_MEM_PARAMS)) {
		free(h);
		return mg_error_prefix("llama: LoRA scale");
	}
	for (int64_t i = 0; i < r; i++) {
		put_scale(h, i * r + i, dt, L->scale);
		for (int n = 2; n <= 3; n++)
			for (int j = 0; j < n; j++)
				put_scale(h,
					  sel_off(r, n, j) + i * n * r + j * r +
						  i,
					  dt, L->scale);
	}
	int rc = mg_copy_h2d(ctx, L->S.ptr, h, bytes);
	free(h);
	if (rc)
		return -1;
	L->S_dt = dt;
	L->S_built = true;
	return 0;
}

/* s * I [r, r]. */
static int scale_matrix(struct llama *m, struct mg_ctx *ctx,
			struct mg_tensor *S)
{
	int64_t r = m->lora.rank, shape[2] = {r, r};
	if (scale_buffer(m, ctx))
		return -1;
	*S = mg_tensor_make(m->lora.S.ptr, ctx->compute_dtype, ctx->dev->kind,
			    2, shape);
	return 0;
}

/* Sel(n, j) [r, n r]. */
static struct mg_tensor sel_matrix(const struct llama *m, struct mg_ctx *ctx,
				   int n, int j)
{
	const int64_t r = m->lora.rank, shape[2] = {r, n * r};
	return mg_tensor_make((char *)m->lora.S.ptr +
				      (size_t)sel_off(r, n, j) *
					      mg_dtype_size(ctx->compute_dtype),
			      ctx->compute_dtype, ctx->dev->kind, 2, shape);
}

static struct mg_tensor like(struct mg_ctx *ctx, void *p, int64_t R, int64_t w)
{
	int64_t shape[2] = {R, w};
	return mg_tensor_make(p, ctx->compute_dtype, ctx->dev->kind, 2, shape);
}

/* Dropout of x into xd (or, backward, of dxd in place), one call per
 * sample so each token's mask is a function of (sample, position). */
static int drop(struct llama *m, struct mg_ctx *ctx, int layer, int t,
		const struct mg_tensor *x, struct mg_tensor *y, bool bwd)
{
	const double p = m->lora.dropout;
	const int64_t T = m->T, w = x->shape[1];
	const size_t rb = (size_t)(T * w) * mg_dtype_size(x->dtype);
	/* a fused module's targets drop their one input once: one mask */
	const uint64_t key =
		mg_rng_key(mg_rng_key(ctx->seed, LORA_DROP_LABEL),
			   (uint64_t)(layer * LT_COUNT + m->lora.own[t]));
	if (T > ROW_STRIDE)
		return mg_error("llama: lora_dropout on rows over %lld tokens",
				(long long)ROW_STRIDE);
	for (int64_t s = 0; s < m->n; s++) {
		struct mg_tensor xs = like(ctx, (char *)x->data + rb * s, T, w),
				 ys = like(ctx, (char *)y->data + rb * s, T, w);
		int64_t off = (m->goff + s) * ROW_STRIDE * w;
		if (bwd ? mg_op_dropout_backward(ctx, &xs, &ys, p, key, off)
			: mg_op_dropout(ctx, &xs, &ys, p, key, off))
			return -1;
	}
	return 0;
}

int llama_lora_down(struct llama *m, struct mg_ctx *ctx, int layer, int t,
		    const struct mg_tensor *A, const struct mg_tensor *x,
		    struct mg_tensor *as, void *xd, void *tmp)
{
	const int64_t R = x->shape[0];
	struct mg_tensor S, a = *as, in = *x;
	if (scale_matrix(m, ctx, &S))
		return -1;
	if (ctx->training && m->lora.dropout > 0) {
		in = like(ctx, xd, R, x->shape[1]);
		if (drop(m, ctx, layer, t, x, &in, false))
			return -1;
	}
	/* a = A drop(x) into tmp, then as = a S. */
	a.data = tmp;
	return mg_op_linear(ctx, &in, A, NULL, &a) ||
	       mg_op_linear(ctx, &a, &S, NULL, as);
}

int llama_lora_forward(struct llama *m, struct mg_ctx *ctx, int layer, int t,
		       const struct mg_tensor *A, const struct mg_tensor *B,
		       const struct mg_tensor *x, struct mg_tensor *as,
		       void *xd, void *tmp, struct mg_tensor *y)
{
	/* y = B as, written: the frozen projection adds its product next
	 * (mg_op_linear_add) */
	return llama_lora_down(m, ctx, layer, t, A, x, as, xd, tmp) ||
	       mg_op_linear(ctx, as, B, NULL, y);
}

int llama_lora_backward(struct llama *m, struct mg_ctx *ctx, int layer, int t,
			const struct mg_tensor *A, const struct mg_tensor *B,
			struct mg_tensor *dA, struct mg_tensor *dB,
			const struct mg_tensor *x, const struct mg_tensor *as,
			const struct mg_tensor *dy, struct mg_tensor *dx,
			void *das, void *da, void *xd, void *dxd)
{
	/* dB += dy^T as, das = dy B */
	struct mg_tensor tdas = like(ctx, das, x->shape[0], m->lora.rank);
	return mg_op_linear_backward(ctx, as, B, dy, &tdas, dB, NULL) ||
	       llama_lora_down_backward(m, ctx, layer, t, A, dA, x, &tdas, dx,
					da, xd, dxd);
}

int llama_lora_down_backward(struct llama *m, struct mg_ctx *ctx, int layer,
			     int t, const struct mg_tensor *A,
			     struct mg_tensor *dA, const struct mg_tensor *x,
			     const struct mg_tensor *das, struct mg_tensor *dx,
			     void *da, void *xd, void *dxd)
{
	const int64_t R = x->shape[0], r = m->lora.rank, in = x->shape[1];
	struct mg_tensor S, tda = like(ctx, da, R, r),
			    txd = like(ctx, xd, R, in),
			    tdxd = like(ctx, dxd, R, in);
	const bool dropped = ctx->training && m->lora.dropout > 0;
	if (scale_matrix(m, ctx, &S))
		return -1;
	/* da = das S (S symmetric); the dropout mask is drawn again rather
	 * than kept. */
	if (mg_op_linear_backward(ctx, das, &S, das, &tda, NULL, NULL))
		return -1;
	/* Without dropout the GEMM adds its input gradient to dx itself
	 * (read and written once, not a [R, in] product then an add) */
	if (!dropped)
		return mg_op_linear_backward_add(ctx, x, A, &tda, dx, dA, NULL);
	return drop(m, ctx, layer, t, x, &txd, false) ||
	       mg_op_linear_backward(ctx, &txd, A, &tda, &tdxd, dA, NULL) ||
	       drop(m, ctx, layer, t, &tdxd, &tdxd, true) ||
	       mg_op_add(ctx, dx, &tdxd, dx);
}

/* Is tensor t[k] of each target in ts right after the one before it? */
static bool adjacent(const struct llama *m, const int *ts, int n,
		     const struct mg_tensor *T, bool b)
{
	for (int j = 1; j < n; j++) {
		const struct mg_tensor *p =
			&T[b ? m->lora.ib[ts[j - 1]] : m->lora.ia[ts[j - 1]]];
		const struct mg_tensor *q =
			&T[b ? m->lora.ib[ts[j]] : m->lora.ia[ts[j]]];
		if (!p->data || !q->data || p->dtype != q->dtype ||
		    (char *)p->data + mg_tensor_bytes(p) != (char *)q->data)
			return false;
	}
	return true;
}

bool llama_lora_fusable(const struct llama *m, const struct mg_ctx *ctx,
			const int *ts, int n, const struct mg_tensor *P,
			const struct mg_tensor *G)
{
	if (n < 2 || n > 3 || (ctx->training && m->lora.dropout > 0))
		return false;
	/* a fused module's targets share one A: no stack of A's */
	for (int j = 0; j < n; j++)
		if (m->lora.ia[ts[j]] < 0 || m->lora.own[ts[j]] != ts[j])
			return false;
	return adjacent(m, ts, n, P, false) &&
	       (!G || adjacent(m, ts, n, G, false));
}

/* Say once per group and direction that it runs fused (tests read it). */
static void announce(struct llama *m, const int *ts, int n, bool bwd)
{
	unsigned bit = 1u << (ts[0] + (bwd ? LT_COUNT : 0));
	if (m->lora.said_fused & bit)
		return;
	m->lora.said_fused |= bit;
	char names[64] = "";
	for (int j = 0; j < n; j++)
		snprintf(names + strlen(names), sizeof names - strlen(names),
			 "%s%s", j ? "," : "", llama_lora_module[ts[j]]);
	mg_info("llama: LoRA %s of %s fused (one GEMM reads the input)",
		bwd ? "backward" : "forward", names);
}

/* [n r, in]: the group's lora_A's as one matrix (adjacent in T). */
static struct mg_tensor a_cat(const struct llama *m, const int *ts, int n,
			      const struct mg_tensor *T)
{
	struct mg_tensor a = T[m->lora.ia[ts[0]]];
	a.shape[0] *= n;
	return a;
}

int llama_lora_forward_group(struct llama *m, struct mg_ctx *ctx, const int *ts,
			     int n, const struct mg_tensor *P,
			     const struct mg_tensor *x,
			     struct mg_tensor *const *as,
			     struct mg_tensor *const *y, void *tmp)
{
	const int64_t R = x->shape[0], r = m->lora.rank;
	struct mg_tensor A = a_cat(m, ts, n, P), a3 = like(ctx, tmp, R, n * r);
	announce(m, ts, n, false);
	if (scale_buffer(m, ctx) || mg_op_linear(ctx, x, &A, NULL, &a3))
		return -1;
	for (int j = 0; j < n; j++) {
		struct mg_tensor sel = sel_matrix(m, ctx, n, j);
		if (mg_op_linear(ctx, &a3, &sel, NULL, as[j]))
			return -1;
	}
	/* y[j] written: the frozen projections add theirs next */
	for (int j = 0; j < n; j++)
		if (mg_op_linear(ctx, as[j], &P[m->lora.ib[ts[j]]], NULL, y[j]))
			return -1;
	return 0;
}

int llama_lora_backward_group(struct llama *m, struct mg_ctx *ctx,
			      const int *ts, int n, const struct mg_tensor *P,
			      struct mg_tensor *G, const struct mg_tensor *x,
			      struct mg_tensor *const *as,
			      struct mg_tensor *const *dy, struct mg_tensor *dx,
			      void *das, void *da3, void *dt3)
{
	const int64_t R = x->shape[0], r = m->lora.rank;
	struct mg_tensor tdas = like(ctx, das, R, r),
			 tda3 = like(ctx, da3, R, n * r),
			 tdt3 = like(ctx, dt3, R, n * r);
	announce(m, ts, n, true);
	if (scale_buffer(m, ctx))
		return -1;
	/* da3 = sum_j (dy_j B_j) Sel(n, j); dB_j += dy_j^T as_j. The x
	 * given with a NULL weight gradient only carries the shape. */
	for (int j = 0; j < n; j++) {
		const int b = m->lora.ib[ts[j]];
		struct mg_tensor sel = sel_matrix(m, ctx, n, j);
		struct mg_tensor *dB = G[b].data ? &G[b] : NULL;
		if (mg_op_linear_backward(ctx, as[j], &P[b], dy[j], &tdas, dB,
					  NULL) ||
		    mg_op_linear_backward(ctx, j ? &tda3 : &tdt3, &sel, &tdas,
					  j ? &tdt3 : &tda3, NULL, NULL) ||
		    (j && mg_op_add(ctx, &tda3, &tdt3, &tda3)))
			return -1;
	}
	/* dx += da3 [A_0; ...] in the GEMM (no dropout in a fused group) */
	struct mg_tensor A = a_cat(m, ts, n, P), dA = a_cat(m, ts, n, G);
	return mg_op_linear_backward_add(ctx, x, &A, &tda3, dx,
					 dA.data ? &dA : NULL, NULL);
}
