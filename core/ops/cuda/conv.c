/*
 * conv.c - 2-D convolution on CUDA through cuDNN (NCHW): forward,
 * backward data (dx =) and backward filter (dw +=, beta = 1).
 *
 * Descriptors and the chosen algorithms are cached per (shape, dtype) in
 * a small chained hash table in the device's ops state, so a steady-state
 * call is a lookup plus the cuDNN launch. Algorithms come from the
 * cudnnGet*_v7 heuristics (default) or cudnnFind* (MG_CUDNN_ALGO=find),
 * restricted to deterministic ones (the ops contract) and, for F32, to
 * exact FP32 arithmetic unless TF32 is allowed. Depthwise convolutions
 * (groups == C == K) go to the own kernels in depthwise.cu unless
 * MG_CUDA_DEPTHWISE=cudnn. Bias gradients use the deterministic channel
 * reduction of reduce.cu.
 */
#include <stdlib.h>
#include <string.h>

#include <cudnn.h>

#include "ops/cuda/cuda_ops.h"

/* Workspace any one algorithm may use. */
#define CONV_WS_LIMIT ((size_t)1 << 30)
#define CONV_ALGOS 16

enum { DIR_FWD = 0, DIR_BWD_DATA, DIR_BWD_FILTER, DIR_N };

struct mgc_conv_entry {
	struct mgc_conv_entry *next;
	int64_t key[14];
	cudnnTensorDescriptor_t xd, yd, bd;
	cudnnFilterDescriptor_t wd;
	cudnnConvolutionDescriptor_t cd;
	bool chosen[DIR_N];
	int algo[DIR_N];
	size_t ws[DIR_N];
	cudnnMathType_t math[DIR_N];
};

#define DNN(op, call)                                                          \
	do {                                                                   \
		cudnnStatus_t s_ = (call);                                     \
		if (s_ != CUDNN_STATUS_SUCCESS)                                \
			return mg_error("%s: %s failed: %s", op, #call,        \
					cudnnGetErrorString(s_));              \
	} while (0)

static cudnnDataType_t dnn_type(enum mg_dtype dt)
{
	switch (dt) {
	case MG_F64:
		return CUDNN_DATA_DOUBLE;
	case MG_F16:
		return CUDNN_DATA_HALF;
	case MG_BF16:
		return CUDNN_DATA_BFLOAT16;
	default:
		return CUDNN_DATA_FLOAT;
	}
}

static void entry_free(struct mgc_conv_entry *e)
{
	if (e->xd)
		cudnnDestroyTensorDescriptor(e->xd);
	if (e->yd)
		cudnnDestroyTensorDescriptor(e->yd);
	if (e->bd)
		cudnnDestroyTensorDescriptor(e->bd);
	if (e->wd)
		cudnnDestroyFilterDescriptor(e->wd);
	if (e->cd)
		cudnnDestroyConvolutionDescriptor(e->cd);
	free(e);
}

void mgc_conv_cache_clear(struct mgc_state *st)
{
	for (unsigned i = 0; st->table && i < st->table_size; i++) {
		struct mgc_conv_entry *e = st->table[i], *n;
		for (; e; e = n) {
			n = e->next;
			entry_free(e);
		}
		st->table[i] = NULL;
	}
	st->entries = 0;
}

static uint64_t key_hash(const int64_t *k, int n)
{
	uint64_t h = 1469598103934665603ull;
	for (int i = 0; i < n; i++)
		h = (h ^ (uint64_t)k[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

/* Double the bucket array and rehash (entries stay allocated). */
static int table_grow(struct mgc_state *st)
{
	unsigned ns = st->table_size ? st->table_size * 2 : 64;
	struct mgc_conv_entry **t = calloc(ns, sizeof *t);
	if (!t)
		return mg_error("conv2d: out of memory for the plan cache");
	for (unsigned i = 0; i < st->table_size; i++) {
		struct mgc_conv_entry *e = st->table[i], *n;
		for (; e; e = n) {
			n = e->next;
			unsigned b = (unsigned)(key_hash(e->key, 14) % ns);
			e->next = t[b];
			t[b] = e;
		}
	}
	free(st->table);
	st->table = t;
	st->table_size = ns;
	return 0;
}

/* Descriptors for geometry g and dtype dt. */
static int entry_init(const char *op, struct mgc_conv_entry *e,
		      const struct mgc_conv_geom *g, enum mg_dtype dt)
{
	const cudnnDataType_t t = dnn_type(dt);
	const cudnnDataType_t ct =
		dt == MG_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
	DNN(op, cudnnCreateTensorDescriptor(&e->xd));
	DNN(op, cudnnCreateTensorDescriptor(&e->yd));
	DNN(op, cudnnCreateTensorDescriptor(&e->bd));
	DNN(op, cudnnCreateFilterDescriptor(&e->wd));
	DNN(op, cudnnCreateConvolutionDescriptor(&e->cd));
	DNN(op,
	    cudnnSetTensor4dDescriptor(e->xd, CUDNN_TENSOR_NCHW, t, (int)g->N,
				       (int)g->C, (int)g->H, (int)g->W));
	DNN(op,
	    cudnnSetTensor4dDescriptor(e->yd, CUDNN_TENSOR_NCHW, t, (int)g->N,
				       (int)g->K, (int)g->OH, (int)g->OW));
	DNN(op, cudnnSetTensor4dDescriptor(e->bd, CUDNN_TENSOR_NCHW, t, 1,
					   (int)g->K, 1, 1));
	DNN(op, cudnnSetFilter4dDescriptor(e->wd, t, CUDNN_TENSOR_NCHW,
					   (int)g->K, (int)(g->C / g->groups),
					   (int)g->kh, (int)g->kw));
	DNN(op, cudnnSetConvolution2dDescriptor(e->cd, (int)g->ph, (int)g->pw,
						(int)g->sh, (int)g->sw, 1, 1,
						CUDNN_CROSS_CORRELATION, ct));
	DNN(op, cudnnSetConvolutionGroupCount(e->cd, (int)g->groups));
	return 0;
}

static struct mgc_conv_entry *plan_get(struct mg_ctx *ctx, const char *op,
				       const struct mgc_conv_geom *g,
				       enum mg_dtype dt)
{
	struct mgc_state *st = mgc_state(ctx);
	if (!st)
		return NULL;
	const int64_t key[14] = {g->N,	g->C,	   g->H,  g->W,	 g->K,
				 g->kh, g->kw,	   g->sh, g->sw, g->ph,
				 g->pw, g->groups, dt,	  0};
	if (!st->table && table_grow(st))
		return NULL;
	unsigned b = (unsigned)(key_hash(key, 14) % st->table_size);
	for (struct mgc_conv_entry *e = st->table[b]; e; e = e->next)
		if (memcmp(e->key, key, sizeof key) == 0)
			return e;
	struct mgc_conv_entry *e = calloc(1, sizeof *e);
	if (!e) {
		mg_error("%s: out of memory for the plan cache", op);
		return NULL;
	}
	memcpy(e->key, key, sizeof key);
	if (entry_init(op, e, g, dt)) {
		entry_free(e);
		return NULL;
	}
	if (st->entries >= 2 * st->table_size && table_grow(st)) {
		entry_free(e);
		return NULL;
	}
	b = (unsigned)(key_hash(key, 14) % st->table_size);
	e->next = st->table[b];
	st->table[b] = e;
	st->entries++;
	return e;
}

/* Math type the descriptor asks for before choosing an algorithm. */
static cudnnMathType_t base_math(const struct mgc_state *st, enum mg_dtype dt)
{
	if (dt == MG_F64)
		return CUDNN_DEFAULT_MATH;
	if (dt == MG_F32)
		return st->opt[MG_CUDA_OPT_TF32] ? CUDNN_TENSOR_OP_MATH
						 : CUDNN_FMA_MATH;
	return CUDNN_TENSOR_OP_MATH;
}

/* Is a candidate acceptable: succeeded, deterministic, modest workspace,
 * and no TF32 for F32 unless allowed. */
static bool algo_ok(const struct mgc_state *st, enum mg_dtype dt,
		    cudnnStatus_t s, cudnnDeterminism_t det, size_t mem,
		    cudnnMathType_t math)
{
	if (s != CUDNN_STATUS_SUCCESS || det != CUDNN_DETERMINISTIC ||
	    mem > CONV_WS_LIMIT)
		return false;
	if (dt == MG_F32 && !st->opt[MG_CUDA_OPT_TF32] &&
	    math != CUDNN_FMA_MATH && math != CUDNN_DEFAULT_MATH)
		return false;
	return true;
}

/* The math type to run a chosen algorithm with. */
static cudnnMathType_t run_math(const struct mgc_state *st, enum mg_dtype dt,
				cudnnMathType_t found)
{
	if (dt == MG_F32 && !st->opt[MG_CUDA_OPT_TF32])
		return CUDNN_FMA_MATH;
	return found;
}

/*
 * Ask cuDNN for direction-specific algorithm candidates (Find measures
 * them, the v7 heuristics rank them) and keep the first one algo_ok()
 * accepts. The three directions differ only in the perf type, the two
 * query functions and the descriptor order, hence a macro.
 */
#define PICK_ALGO(PERF, FIND, GET, D1, D2, D3)                                 \
	do {                                                                   \
		PERF p[CONV_ALGOS];                                            \
		cudnnStatus_t s =                                              \
			find ? FIND(h, D1, D2, e->cd, D3, CONV_ALGOS, &n, p)   \
			     : CUDNN_STATUS_NOT_SUPPORTED;                     \
		if (s != CUDNN_STATUS_SUCCESS)                                 \
			DNN(op, GET(h, D1, D2, e->cd, D3, CONV_ALGOS, &n, p)); \
		for (int i = 0; i < n && best < 0; i++)                        \
			if (algo_ok(st, dt, p[i].status, p[i].determinism,     \
				    p[i].memory, p[i].mathType))               \
				best = i;                                      \
		if (best >= 0) {                                               \
			e->algo[dir] = (int)p[best].algo;                      \
			e->ws[dir] = p[best].memory;                           \
			e->math[dir] = run_math(st, dt, p[best].mathType);     \
		}                                                              \
	} while (0)

/* Choose (once) the algorithm for direction dir of plan e. */
static int plan_choose(struct mg_ctx *ctx, const char *op,
		       struct mgc_conv_entry *e, enum mg_dtype dt, int dir)
{
	if (e->chosen[dir])
		return 0;
	struct mgc_state *st = mgc_state(ctx);
	cudnnHandle_t h = ctx->dev->cudnn;
	const bool find = st->opt[MG_CUDA_OPT_CONV_FIND];
	int n = 0, best = -1;
	DNN(op, cudnnSetConvolutionMathType(e->cd, base_math(st, dt)));
	if (dir == DIR_FWD)
		PICK_ALGO(cudnnConvolutionFwdAlgoPerf_t,
			  cudnnFindConvolutionForwardAlgorithm,
			  cudnnGetConvolutionForwardAlgorithm_v7, e->xd, e->wd,
			  e->yd);
	else if (dir == DIR_BWD_DATA)
		PICK_ALGO(cudnnConvolutionBwdDataAlgoPerf_t,
			  cudnnFindConvolutionBackwardDataAlgorithm,
			  cudnnGetConvolutionBackwardDataAlgorithm_v7, e->wd,
			  e->yd, e->xd);
	else
		PICK_ALGO(cudnnConvolutionBwdFilterAlgoPerf_t,
			  cudnnFindConvolutionBackwardFilterAlgorithm,
			  cudnnGetConvolutionBackwardFilterAlgorithm_v7, e->xd,
			  e->yd, e->wd);
	if (best < 0)
		return mg_error("%s: cuDNN offers no deterministic algorithm "
				"for this %s convolution (%d candidates)",
				op, mg_dtype_name(dt), n);
	e->chosen[dir] = true;
	return 0;
}

/* Workspace of bytes: the caller's ws when given, else the ops scratch. */
static void *conv_ws(struct mg_ctx *ctx, struct mg_buf *ws, size_t bytes)
{
	if (bytes == 0)
		return NULL;
	if (ws) {
		if (mg_buf_reserve(ctx, ws, bytes, MG_MEM_ACTIVATIONS))
			return NULL;
		return ws->ptr;
	}
	return mgc_scratch(ctx, bytes);
}

static void conv_geom(const struct mg_conv2d_args *a, const struct mg_tensor *x,
		      const struct mg_tensor *w, struct mgc_conv_geom *g)
{
	g->N = x->shape[0];
	g->C = x->shape[1];
	g->H = x->shape[2];
	g->W = x->shape[3];
	g->K = w->shape[0];
	g->kh = w->shape[2];
	g->kw = w->shape[3];
	g->sh = a->stride_h;
	g->sw = a->stride_w;
	g->ph = a->pad_h;
	g->pw = a->pad_w;
	g->groups = a->groups;
	g->OH = mg_conv_out_dim(g->H, g->kh, a->stride_h, a->pad_h);
	g->OW = mg_conv_out_dim(g->W, g->kw, a->stride_w, a->pad_w);
}

/* 1x1, stride 1, no padding, one group, and the GEMM path chosen. */
static bool gemm_pointwise(struct mg_ctx *ctx, const struct mgc_conv_geom *g)
{
	struct mgc_state *st = mgc_state(ctx);
	return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 &&
	       g->ph == 0 && g->pw == 0 && g->groups == 1 && st &&
	       st->opt[MG_CUDA_OPT_POINTWISE_GEMM] &&
	       g->N * g->H * g->W * (g->C > g->K ? g->C : g->K) < (1ll << 31);
}

/*
 * Own kernels for depthwise convolutions (groups == C == K), and for a
 * channel multiplier (groups == C, K = M * C: the 1-channel stem) where
 * the band kernels take every pass asked for (pass_mask: 1 << MGC_DW_*);
 * cuDNN does the rest.
 */
static bool own_depthwise(struct mg_ctx *ctx, const struct mgc_conv_geom *g,
			  enum mg_dtype dt, unsigned pass_mask)
{
	struct mgc_state *st = mgc_state(ctx);
	if (!st || st->opt[MG_CUDA_OPT_DEPTHWISE_CUDNN] || g->groups != g->C)
		return false;
	if (g->groups > 1 && g->K == g->C)
		return true;
	if (g->K % g->C != 0 || g->K == g->C)
		return false;
	for (int p = MGC_DW_FWD; p <= MGC_DW_BWD_FILTER; p++)
		if ((pass_mask >> p & 1) && !mgc_dw_band_rows(g, dt, p))
			return false;
	return true;
}

/* Scaling factors in the type cuDNN wants for dt. */
union scal {
	float f;
	double d;
};

static const void *scal(union scal *s, enum mg_dtype dt, double v)
{
	if (dt == MG_F64)
		s->d = v;
	else
		s->f = (float)v;
	return s;
}

int mg_cuda_conv2d(struct mg_ctx *ctx, const struct mg_conv2d_args *a,
		   const struct mg_tensor *x, const struct mg_tensor *w,
		   const struct mg_tensor *bias, struct mg_tensor *y,
		   struct mg_buf *ws)
{
	static const char op[] = "conv2d";
	struct mgc_conv_geom g;
	const enum mg_dtype dt = x->dtype;
	conv_geom(a, x, w, &g);
	if (g.N == 0 || g.K == 0 || g.OH * g.OW == 0)
		return 0;
	if (own_depthwise(ctx, &g, dt, 1u << MGC_DW_FWD))
		return mgc_depthwise_fwd(ctx, &g, dt, x->data, w->data,
					 bias ? bias->data : NULL, y->data);
	if (gemm_pointwise(ctx, &g)) {
		if (mgc_pointwise_fwd(ctx, &g, dt, x->data, w->data, y->data))
			return -1;
		if (bias) {
			struct mgc_conv_entry *e = plan_get(ctx, op, &g, dt);
			union scal one;
			if (!e)
				return -1;
			DNN(op,
			    cudnnAddTensor(ctx->dev->cudnn, scal(&one, dt, 1),
					   e->bd, bias->data, &one, e->yd,
					   y->data));
		}
		return 0;
	}
	struct mgc_conv_entry *e = plan_get(ctx, op, &g, dt);
	if (!e || plan_choose(ctx, op, e, dt, DIR_FWD))
		return -1;
	void *wsp = conv_ws(ctx, ws, e->ws[DIR_FWD]);
	if (e->ws[DIR_FWD] && !wsp)
		return -1;
	cudnnHandle_t h = ctx->dev->cudnn;
	union scal one, zero;
	DNN(op, cudnnSetConvolutionMathType(e->cd, e->math[DIR_FWD]));
	DNN(op, cudnnConvolutionForward(
			h, scal(&one, dt, 1), e->xd, x->data, e->wd, w->data,
			e->cd, (cudnnConvolutionFwdAlgo_t)e->algo[DIR_FWD], wsp,
			e->ws[DIR_FWD], scal(&zero, dt, 0), e->yd, y->data));
	if (bias)
		DNN(op, cudnnAddTensor(h, &one, e->bd, bias->data, &one, e->yd,
				       y->data));
	return 0;
}

int mg_cuda_conv2d_backward(struct mg_ctx *ctx, const struct mg_conv2d_args *a,
			    const struct mg_tensor *x,
			    const struct mg_tensor *w,
			    const struct mg_tensor *dy, struct mg_tensor *dx,
			    struct mg_tensor *dw, struct mg_tensor *dbias,
			    struct mg_buf *ws)
{
	static const char op[] = "conv2d_backward";
	struct mgc_conv_geom g;
	const enum mg_dtype dt = x->dtype;
	conv_geom(a, x, w, &g);
	if (dx && (g.K == 0 || g.OH * g.OW == 0) &&
	    mgc_zero(ctx, dx->data, dt, mg_tensor_numel(dx)))
		return -1;
	if (g.N == 0 || g.K == 0 || g.OH * g.OW == 0)
		return 0;
	if (dbias && mgc_channel_sum_acc(ctx, op, dt, dy->data, g.N, g.K,
					 g.OH * g.OW, dbias->data))
		return -1;
	if (own_depthwise(ctx, &g, dt,
			  (dx ? 1u << MGC_DW_BWD_DATA : 0) |
				  (dw ? 1u << MGC_DW_BWD_FILTER : 0))) {
		if (dx && mgc_depthwise_bwd_data(ctx, &g, dt, w->data, dy->data,
						 dx->data))
			return -1;
		if (dw && mgc_depthwise_bwd_filter(ctx, &g, dt, x->data,
						   dy->data, dw->data))
			return -1;
		return 0;
	}
	if (gemm_pointwise(ctx, &g)) {
		if (dx && mgc_pointwise_bwd_data(ctx, &g, dt, w->data, dy->data,
						 dx->data))
			return -1;
		if (dw && mgc_pointwise_bwd_filter(ctx, &g, dt, x->data,
						   dy->data, dw->data))
			return -1;
		return 0;
	}
	if (!dx && !dw)
		return 0;
	struct mgc_conv_entry *e = plan_get(ctx, op, &g, dt);
	if (!e)
		return -1;
	cudnnHandle_t h = ctx->dev->cudnn;
	union scal one, zero;
	scal(&one, dt, 1);
	scal(&zero, dt, 0);
	if (dx) {
		if (plan_choose(ctx, op, e, dt, DIR_BWD_DATA))
			return -1;
		void *wsp = conv_ws(ctx, ws, e->ws[DIR_BWD_DATA]);
		if (e->ws[DIR_BWD_DATA] && !wsp)
			return -1;
		DNN(op,
		    cudnnSetConvolutionMathType(e->cd, e->math[DIR_BWD_DATA]));
		DNN(op,
		    cudnnConvolutionBackwardData(
			    h, &one, e->wd, w->data, e->yd, dy->data, e->cd,
			    (cudnnConvolutionBwdDataAlgo_t)
				    e->algo[DIR_BWD_DATA],
			    wsp, e->ws[DIR_BWD_DATA], &zero, e->xd, dx->data));
	}
	if (dw) {
		if (plan_choose(ctx, op, e, dt, DIR_BWD_FILTER))
			return -1;
		void *wsp = conv_ws(ctx, ws, e->ws[DIR_BWD_FILTER]);
		if (e->ws[DIR_BWD_FILTER] && !wsp)
			return -1;
		DNN(op, cudnnSetConvolutionMathType(e->cd,
						    e->math[DIR_BWD_FILTER]));
		/* beta = 1: parameter gradients accumulate. */
		DNN(op,
		    cudnnConvolutionBackwardFilter(
			    h, &one, e->xd, x->data, e->yd, dy->data, e->cd,
			    (cudnnConvolutionBwdFilterAlgo_t)
				    e->algo[DIR_BWD_FILTER],
			    wsp, e->ws[DIR_BWD_FILTER], &one, e->wd, dw->data));
	}
	return 0;
}
