/*
 * llm.cu - CUDA twins of the LLM ops (ops_llm.h, cuda_llm.h): token
 * embedding (backward: rows sorted by id with a stable radix sort, one
 * block per run of equal ids, so each table row sums its gradient rows in
 * row order), RMSNorm (a block per row; dw from fixed row segments summed
 * in order), rotary embedding and SwiGLU (element-wise, mirroring Hugging
 * Face's roundings on half types), and causal grouped-query attention
 * over packed documents: a tiled kernel with an online softmax (a block
 * per (query tile, query head, sequence), key/value tiles in shared
 * memory, F32 accumulation), backward by recomputation from the saved
 * log-sum-exp, dq per query tile and dk/dv per key tile over the group's
 * query heads and query tiles in a fixed order. Every result is
 * deterministic; no atomics. F16/BF16 with head dimension 64 or 128 go
 * to the tensor-core flash kernels of attention_flash.cu instead (knob
 * MG_CUDA_OPT_ATTN_FLASH); these tiled kernels stay the path for F32 and
 * other head dimensions, and the reference beside them.
 */
#include <cub/cub.cuh>

#include "ops/cuda/cuda_colsum.cuh"
#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_llm.h"
#include "ops/cuda/cuda_rms.cuh"

namespace
{
const int TH = 256;

#define GRID_LOOP(i, n)                                                        \
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;       \
	     i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* F32, F16, BF16 (the LLM ops do not run F64 on CUDA). */
#define LLM_DISPATCH(op, dt, FN, ...)                                          \
	do {                                                                   \
		switch (dt) {                                                  \
		case MG_F32:                                                   \
			FN<float>(__VA_ARGS__);                                \
			break;                                                 \
		case MG_F16:                                                   \
			FN<mgc_f16>(__VA_ARGS__);                              \
			break;                                                 \
		case MG_BF16:                                                  \
			FN<mgc_bf16>(__VA_ARGS__);                             \
			break;                                                 \
		default:                                                       \
			return mgc_bad_dtype(op, dt);                          \
		}                                                              \
	} while (0)

/* v rounded to T and back (identity for float). */
template <typename T> __device__ __forceinline__ float rnd(float v)
{
	return mgc_t<T>::load(mgc_t<T>::from(v));
}

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* ---- embedding ---------------------------------------------------- */

template <typename T>
__global__ void embed_fwd_k(const int32_t *ids, const T *table, T *y, int64_t R,
			    int64_t D, int64_t V)
{
	GRID_LOOP(i, R * D)
	{
		const int64_t r = i / D, d = i - r * D;
		const int32_t id = ids[r];
		y[i] = (id >= 0 && id < V) ? table[(int64_t)id * D + d]
					   : mgc_t<T>::from(0.0f);
	}
}

__global__ void iota_k(int32_t *p, int64_t n)
{
	GRID_LOOP(i, n)
	p[i] = (int32_t)i;
}

/* Block i: if sorted position i starts a run of equal ids, that table
 * row gets the run's gradient rows (in row order) added. */
template <typename T>
__global__ void embed_bwd_k(const int32_t *keys, const int32_t *rows,
			    const T *dy, T *dt, int64_t R, int64_t D, int64_t V)
{
	const int64_t i = blockIdx.x;
	const int32_t id = keys[i];
	if ((i > 0 && keys[i - 1] == id) || id < 0 || id >= V)
		return;
	int64_t end = i + 1;
	while (end < R && keys[end] == id)
		end++;
	for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
		float s = 0;
		for (int64_t j = i; j < end; j++)
			s += mgc_ld(dy, (int64_t)rows[j] * D + d);
		const int64_t at = (int64_t)id * D + d;
		dt[at] = mgc_t<T>::from(mgc_ld(dt, at) + s);
	}
}

template <typename T>
void embed_fwd(cudaStream_t st, const void *ids, const void *table, void *y,
	       int64_t R, int64_t D, int64_t V)
{
	embed_fwd_k<T><<<mgc_blocks(R * D, TH), TH, 0, st>>>(
		(const int32_t *)ids, (const T *)table, (T *)y, R, D, V);
}

template <typename T>
void embed_bwd(cudaStream_t st, const int32_t *keys, const int32_t *rows,
	       const void *dy, void *dt, int64_t R, int64_t D, int64_t V)
{
	embed_bwd_k<T><<<(unsigned)R, 128, 0, st>>>(keys, rows, (const T *)dy,
						    (T *)dt, R, D, V);
}

/* ---- rmsnorm ------------------------------------------------------ */
/* Each kernel has an element walk and a vector walk (cuda_rms.cuh); the
 * fused ones in llm_fused.cu walk a row the same way. */

/* y = w * T(x * rstd) (Hugging Face casts the normalised row to the
 * input dtype before the weight multiplies it). */
template <typename T, typename W>
__global__ void rms_fwd_k(const T *x, const W *w, float eps, T *y, float *rstd,
			  int64_t D)
{
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	const T *xr = x + r * D;
	float ss = 0;
	for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
		const float v = mgc_ld(xr, d);
		ss += v * v;
	}
	ss = mgc_block_sum(ss, sh);
	const float rs = 1.0f / sqrtf(ss / (float)D + eps);
	if (rstd && threadIdx.x == 0)
		rstd[r] = rs;
	T *yr = y + r * D;
	for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
		yr[d] = mgc_t<T>::from(mgc_ld(w, d) *
				       rnd<T>(mgc_ld(xr, d) * rs));
}

/* rms_fwd_k in 16-byte vectors of nv a row. */
template <typename T, typename W>
__global__ void rms_fwd_vk(const T *x, const W *w, float eps, T *y, float *rstd,
			   int64_t nv)
{
	constexpr int V = MGC_VEC(T);
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	const T *xr = x + r * nv * V;
	float ss = 0;
	for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
		float a[V];
		mgc_ldv(xr, v, a);
#pragma unroll
		for (int k = 0; k < V; k++)
			ss += a[k] * a[k];
	}
	rms_vec_scale(xr, w, y + r * nv * V, ss, eps, nv,
		      rstd ? rstd + r : NULL, sh);
}

template <typename T, typename W>
__global__ void rms_bwd_dx_k(const T *x, const W *w, const float *rstd,
			     const T *dy, T *dx, int64_t D)
{
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	const T *xr = x + r * D, *gr = dy + r * D;
	float s = 0;
	for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
		s += mgc_ld(w, d) * mgc_ld(gr, d) * mgc_ld(xr, d);
	s = mgc_block_sum(s, sh);
	const float rs = rstd[r], c = s * rs * rs * rs / (float)D;
	T *o = dx + r * D;
	for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
		o[d] = mgc_t<T>::from(rs * mgc_ld(w, d) * mgc_ld(gr, d) -
				      mgc_ld(xr, d) * c);
}

/* rms_bwd_dx_k in 16-byte vectors of nv a row. */
template <typename T, typename W>
__global__ void rms_bwd_dx_vk(const T *x, const W *w, const float *rstd,
			      const T *dy, T *dx, int64_t nv)
{
	constexpr int V = MGC_VEC(T);
	__shared__ float sh[32];
	const int64_t r = blockIdx.x;
	const T *xr = x + r * nv * V, *gr = dy + r * nv * V;
	const float s = mgc_block_sum(rms_vec_dot(xr, gr, w, nv), sh);
	const float rs = rstd[r], c = s * rs * rs * rs / (float)(nv * V);
	T *o = dx + r * nv * V;
	for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
		float a[V], g[V], wv[V];
		rms_vec_ld3(xr, gr, w, v, a, g, wv);
#pragma unroll
		for (int k = 0; k < V; k++)
			a[k] = rs * wv[k] * g[k] - a[k] * c;
		mgc_stv(o, v, a);
	}
}

/* Rows per dw partial sum: 32, more when the rows would need more than
 * 65535 segments (gridDim.y); a function of the shape alone. */
static int64_t rms_seg(int64_t R)
{
	int64_t seg = 32;
	while ((R + seg - 1) / seg > 65535)
		seg *= 2;
	return seg;
}

template <typename T>
__global__ void rms_dw_part_k(const T *x, const float *rstd, const T *dy,
			      float *part, int64_t R, int64_t D, int64_t seg)
{
	const int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (d >= D)
		return;
	const int64_t r0 = (int64_t)blockIdx.y * seg;
	const int64_t r1 = r0 + seg < R ? r0 + seg : R;
	float s = 0;
	for (int64_t r = r0; r < r1; r++)
		s += mgc_ld(dy, r * D + d) * (mgc_ld(x, r * D + d) * rstd[r]);
	part[blockIdx.y * D + d] = s;
}

template <typename T>
void rms_fwd(cudaStream_t st, const void *x, const void *w, bool wf32,
	     float eps, void *y, float *rstd, int64_t R, int64_t D)
{
	if (rms_vec_ok<T>(D, x, w, y, NULL, NULL)) {
		const int64_t nv = D / MGC_VEC(T);
		const int th = rms_vec_threads(nv);
		if (wf32)
			rms_fwd_vk<T, float><<<(unsigned)R, th, 0, st>>>(
				(const T *)x, (const float *)w, eps, (T *)y,
				rstd, nv);
		else
			rms_fwd_vk<T, T><<<(unsigned)R, th, 0, st>>>(
				(const T *)x, (const T *)w, eps, (T *)y, rstd,
				nv);
		return;
	}
	const int th = rms_row_threads(D);
	if (wf32)
		rms_fwd_k<T, float><<<(unsigned)R, th, 0, st>>>(
			(const T *)x, (const float *)w, eps, (T *)y, rstd, D);
	else
		rms_fwd_k<T, T><<<(unsigned)R, th, 0, st>>>(
			(const T *)x, (const T *)w, eps, (T *)y, rstd, D);
}

template <typename T>
void rms_bwd(cudaStream_t st, const void *x, const void *w, bool wf32,
	     const float *rstd, const void *dy, void *dx, void *dw, float *part,
	     int64_t R, int64_t D)
{
	const int th = rms_row_threads(D);
	const int64_t nv = D / MGC_VEC(T);
	if (dx && rms_vec_ok<T>(D, x, w, dy, dx, NULL)) {
		if (wf32)
			rms_bwd_dx_vk<T, float>
				<<<(unsigned)R, rms_vec_threads(nv), 0, st>>>(
					(const T *)x, (const float *)w, rstd,
					(const T *)dy, (T *)dx, nv);
		else
			rms_bwd_dx_vk<T, T>
				<<<(unsigned)R, rms_vec_threads(nv), 0, st>>>(
					(const T *)x, (const T *)w, rstd,
					(const T *)dy, (T *)dx, nv);
	} else if (dx && wf32)
		rms_bwd_dx_k<T, float><<<(unsigned)R, th, 0, st>>>(
			(const T *)x, (const float *)w, rstd, (const T *)dy,
			(T *)dx, D);
	else if (dx)
		rms_bwd_dx_k<T, T><<<(unsigned)R, th, 0, st>>>(
			(const T *)x, (const T *)w, rstd, (const T *)dy,
			(T *)dx, D);
	if (!dw)
		return;
	const int64_t seg = rms_seg(R), S = (R + seg - 1) / seg;
	const dim3 grid((unsigned)((D + 127) / 128), (unsigned)S);
	rms_dw_part_k<T><<<grid, 128, 0, st>>>((const T *)x, rstd,
					       (const T *)dy, part, R, D, seg);
	if (wf32)
		mgc_colsum_add(st, part, (float *)dw, S, D);
	else
		mgc_colsum_add(st, part, (T *)dw, S, D);
}

/* ---- rope --------------------------------------------------------- */

/* Pair j of each head: HF computes x * cos + rotate_half(x) * sin in x's
 * dtype with cos and sin cast to it; each product and the sum round. A
 * thread takes pair j of token r in every head: one angle, one cosine
 * and sine and one index division for H rotations (the angle is the
 * same for all heads of a token). */
template <typename T>
__global__ void rope_k(T *x, const int32_t *pos, const float *invf, float sign,
		       float scale, int64_t NT, int64_t H, int64_t hd,
		       int64_t h2)
{
	GRID_LOOP(i, NT * h2)
	{
		const int64_t j = i % h2, r = i / h2;
		const float a = (float)pos[r] * invf[j];
		const float c = rnd<T>(cosf(a) * scale),
			    s = sign * rnd<T>(sinf(a) * scale);
		T *p = x + r * H * hd;
		for (int64_t h = 0; h < H; h++, p += hd) {
			const float x1 = mgc_ld(p, j), x2 = mgc_ld(p, j + h2);
			p[j] = mgc_t<T>::from(rnd<T>(x1 * c) - rnd<T>(x2 * s));
			p[j + h2] =
				mgc_t<T>::from(rnd<T>(x2 * c) + rnd<T>(x1 * s));
		}
	}
}

/* Pairs (j, j + h2) of heads of hd (2 h2 < hd: partial rotary, the
 * dims past 2 h2 untouched). */
template <typename T>
void rope(cudaStream_t st, void *x, const void *pos, const void *invf,
	  float sign, float scale, int64_t NT, int64_t H, int64_t hd,
	  int64_t h2)
{
	rope_k<T><<<mgc_blocks(NT * h2, TH), TH, 0, st>>>(
		(T *)x, (const int32_t *)pos, (const float *)invf, sign, scale,
		NT, H, hd, h2);
}

/* ---- swiglu ------------------------------------------------------- */

/* One element of swiglu (the same arithmetic in the scalar and the
 * vector kernels, so both give the same bits). */
template <typename T>
__device__ __forceinline__ float swiglu1(float gv, float uv)
{
	return rnd<T>(gv / (1.0f + expf(-gv))) * uv;
}

template <typename T>
__device__ __forceinline__ void swiglu_bwd1(float gv, float uv, float d,
					    float *dg, float *du)
{
	const float sg = 1.0f / (1.0f + expf(-gv));
	*dg = d * uv * sg * (1.0f + gv * (1.0f - sg));
	*du = d * rnd<T>(gv * sg);
}

/* Elements [first, n) one at a time: the whole op when the buffers are
 * not 16-byte aligned, else the tail after the vectors. */
template <typename T>
__global__ void swiglu_k(const T *g, const T *u, T *h, int64_t first, int64_t n)
{
	GRID_LOOP(j, n - first)
	{
		const int64_t i = first + j;
		h[i] = mgc_t<T>::from(swiglu1<T>(mgc_ld(g, i), mgc_ld(u, i)));
	}
}

/* The first nv 16-byte vectors of every operand (memory-bound: one
 * 128-bit load per operand a thread, so enough bytes are in flight). */
template <typename T>
__global__ void swiglu_v_k(const T *g, const T *u, T *h, int64_t nv)
{
	const int V = MGC_VEC(T);
	GRID_LOOP(v, nv)
	{
		float gv[V], uv[V];
		mgc_ldv(g, v, gv);
		mgc_ldv(u, v, uv);
#pragma unroll
		for (int k = 0; k < V; k++)
			gv[k] = swiglu1<T>(gv[k], uv[k]);
		mgc_stv(h, v, gv);
	}
}

template <typename T>
__global__ void swiglu_bwd_k(const T *g, const T *u, const T *dh, T *dg, T *du,
			     int64_t first, int64_t n)
{
	GRID_LOOP(j, n - first)
	{
		const int64_t i = first + j;
		float a, b;
		swiglu_bwd1<T>(mgc_ld(g, i), mgc_ld(u, i), mgc_ld(dh, i), &a,
			       &b);
		if (dg)
			dg[i] = mgc_t<T>::from(a);
		if (du)
			du[i] = mgc_t<T>::from(b);
	}
}

/* dh may alias dg: each thread reads its vectors before writing them. */
template <typename T>
__global__ void swiglu_bwd_v_k(const T *g, const T *u, const T *dh, T *dg,
			       T *du, int64_t nv)
{
	const int V = MGC_VEC(T);
	GRID_LOOP(v, nv)
	{
		float gv[V], uv[V], d[V], a[V], b[V];
		mgc_ldv(g, v, gv);
		mgc_ldv(u, v, uv);
		mgc_ldv(dh, v, d);
#pragma unroll
		for (int k = 0; k < V; k++)
			swiglu_bwd1<T>(gv[k], uv[k], d[k], &a[k], &b[k]);
		if (dg)
			mgc_stv(dg, v, a);
		if (du)
			mgc_stv(du, v, b);
	}
}

/* Vectors when every operand is 16-byte aligned (F32 keeps the scalar
 * kernel's path too: its vectors are 4 wide). */
static bool vec_ok(const void *a, const void *b, const void *c, const void *d,
		   const void *e)
{
	return mgc_aligned16(a) && mgc_aligned16(b) && mgc_aligned16(c) &&
	       (!d || mgc_aligned16(d)) && (!e || mgc_aligned16(e));
}

template <typename T>
void swiglu(cudaStream_t st, const void *g, const void *u, void *h, int64_t n)
{
	const int64_t nv = vec_ok(g, u, h, NULL, NULL) ? n / MGC_VEC(T) : 0;
	if (nv)
		swiglu_v_k<T><<<mgc_blocks(nv, TH), TH, 0, st>>>(
			(const T *)g, (const T *)u, (T *)h, nv);
	const int64_t first = nv * MGC_VEC(T);
	if (first < n)
		swiglu_k<T><<<mgc_blocks(n - first, TH), TH, 0, st>>>(
			(const T *)g, (const T *)u, (T *)h, first, n);
}

template <typename T>
void swiglu_bwd(cudaStream_t st, const void *g, const void *u, const void *dh,
		void *dg, void *du, int64_t n)
{
	const int64_t nv = vec_ok(g, u, dh, dg, du) ? n / MGC_VEC(T) : 0;
	if (nv)
		swiglu_bwd_v_k<T><<<mgc_blocks(nv, TH), TH, 0, st>>>(
			(const T *)g, (const T *)u, (const T *)dh, (T *)dg,
			(T *)du, nv);
	const int64_t first = nv * MGC_VEC(T);
	if (first < n)
		swiglu_bwd_k<T><<<mgc_blocks(n - first, TH), TH, 0, st>>>(
			(const T *)g, (const T *)u, (const T *)dh, (T *)dg,
			(T *)du, first, n);
}

/* ---- attention ---------------------------------------------------- */

/*
 * Tiles: a block of AW warps; in the forward and dq kernels each warp
 * owns QW queries of the block's BQ, and lane j of a warp scores key j
 * of the current BK-key tile (a full dot product over hd from shared
 * memory, rows padded to hd + 1 against bank conflicts), then the lane
 * owning output element d = lane + 32 e accumulates over the 32 keys.
 * The dk/dv kernel is the mirror image: warps own keys, lanes score
 * queries. NDL = ceil(hd / 32) output elements per lane (hd <= 256).
 */
const int AW = 4, QW = 4, BQ = AW * QW, BK = 32;
const int KW = 4, BKV = AW * KW, BQ2 = 32;

struct attn_dims {
	int N, S, Hq, Hkv, hd;
	float scale;
	int window; /* sliding window, 0: none */
	float cap;  /* score soft-capping, 0: none */
};

/* A scaled score soft-capped when there is a cap (Gemma 2); *dc the
 * cap's derivative at s for the backward's dS. */
__device__ __forceinline__ float attn_cap(float s, float cap, float *dc)
{
	if (!(cap > 0)) {
		*dc = 1.0f;
		return s;
	}
	const float th = tanhf(s / cap);
	*dc = 1.0f - th * th;
	return cap * th;
}

/* First key query t attends: t - pos, clamped to [0, t], and within the
 * sliding window when there is one (as the CPU's llm_lo). */
__device__ __forceinline__ int attn_lo(int t, int32_t pos, int window)
{
	int lo = t - pos;
	lo = lo < 0 ? 0 : (lo > t ? t : lo);
	return window > 0 && t - window + 1 > lo ? t - window + 1 : lo;
}

template <typename T, int NDL>
__global__ void __launch_bounds__(AW * 32)
	attn_fwd_k(attn_dims a, const T *q, const T *k, const T *v,
		   const int32_t *pos, T *o, float *lse)
{
	extern __shared__ float sm[];
	const int hd = a.hd, hp = hd + 1;
	float *qs = sm, *ks = qs + BQ * hd, *vs = ks + BK * hp;
	__shared__ int lo_s[BQ];
	const int t0 = blockIdx.x * BQ, h = blockIdx.y, n = blockIdx.z;
	const int kh = h / (a.Hq / a.Hkv);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	for (int i = threadIdx.x; i < BQ * hd; i += blockDim.x) {
		const int r = i / hd, d = i - r * hd, t = t0 + r;
		qs[i] = t < a.S ? mgc_ld(q, (((int64_t)n * a.S + t) * a.Hq +
					     h) * hd +
						    d)
				: 0.0f;
	}
	if (threadIdx.x < BQ) {
		const int t = t0 + threadIdx.x;
		lo_s[threadIdx.x] =
			t < a.S ? attn_lo(t, pos[(int64_t)n * a.S + t],
					  a.window)
				: a.S;
	}
	__syncthreads();
	int kmin = a.S;
	for (int r = 0; r < BQ; r++)
		kmin = min(kmin, lo_s[r]);
	const int kend = min(t0 + BQ, a.S);
	float m[QW], l[QW], acc[QW][NDL];
#pragma unroll
	for (int qi = 0; qi < QW; qi++) {
		m[qi] = -INFINITY;
		l[qi] = 0;
#pragma unroll
		for (int e = 0; e < NDL; e++)
			acc[qi][e] = 0;
	}
	for (int kb = (kmin / BK) * BK; kb < kend; kb += BK) {
		__syncthreads();
		for (int i = threadIdx.x; i < BK * hd; i += blockDim.x) {
			const int j = i / hd, d = i - j * hd, s = kb + j;
			const int64_t at =
				(((int64_t)n * a.S + s) * a.Hkv + kh) * hd + d;
			ks[j * hp + d] = s < a.S ? mgc_ld(k, at) : 0.0f;
			vs[j * hd + d] = s < a.S ? mgc_ld(v, at) : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int qi = 0; qi < QW; qi++) {
			const int r = warp * QW + qi, t = t0 + r;
			const int lo = lo_s[r];
			if (t >= a.S || kb > t || kb + BK <= lo)
				continue; /* warp-uniform */
			const int s = kb + lane;
			const bool on = s >= lo && s <= t;
			float sc = -INFINITY;
			if (on) {
				float dt = 0;
				for (int d = 0; d < hd; d++)
					dt += qs[r * hd + d] *
					      ks[lane * hp + d];
				float dc;
				sc = attn_cap(dt * a.scale, a.cap, &dc);
			}
			const float mn = fmaxf(m[qi], warp_max(sc));
			const float p = on ? expf(sc - mn) : 0.0f;
			const float al = expf(m[qi] - mn);
			l[qi] = l[qi] * al + warp_sum(p);
			m[qi] = mn;
#pragma unroll
			for (int e = 0; e < NDL; e++)
				acc[qi][e] *= al;
			for (int j = 0; j < BK; j++) {
				const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
				for (int e = 0; e < NDL; e++) {
					const int d = lane + 32 * e;
					if (d < hd)
						acc[qi][e] +=
							pj * vs[j * hd + d];
				}
			}
		}
	}
#pragma unroll
	for (int qi = 0; qi < QW; qi++) {
		const int t = t0 + warp * QW + qi;
		if (t >= a.S)
			continue;
		const int64_t at = (((int64_t)n * a.S + t) * a.Hq + h) * hd;
#pragma unroll
		for (int e = 0; e < NDL; e++) {
			const int d = lane + 32 * e;
			if (d < hd)
				o[at + d] = mgc_t<T>::from(acc[qi][e] / l[qi]);
		}
		if (lse && lane == 0)
			lse[((int64_t)n * a.Hq + h) * a.S + t] =
				m[qi] + logf(l[qi]);
	}
}

/* Dt[n, h, t] = dout . o (a warp per row). */
template <typename T>
__global__ void attn_dt_k(attn_dims a, const T *o, const T *dout, float *Dt)
{
	const int64_t rows = (int64_t)a.N * a.Hq * a.S;
	const int lane = threadIdx.x & 31;
	for (int64_t w = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
	     w < rows; w += ((int64_t)gridDim.x * blockDim.x) >> 5) {
		const int64_t t = w % a.S, h = (w / a.S) % a.Hq,
			      n = w / ((int64_t)a.S * a.Hq);
		const int64_t at = ((n * a.S + t) * a.Hq + h) * a.hd;
		float s = 0;
		for (int d = lane; d < a.hd; d += 32)
			s += mgc_ld(dout, at + d) * mgc_ld(o, at + d);
		s = warp_sum(s);
		if (lane == 0)
			Dt[w] = s;
	}
}

/* dq = scale * sum_s ds k_s, ds = p (dout.v - Dt), p = exp(scale q.k -
 * lse), keys in increasing order. */
template <typename T, int NDL>
__global__ void __launch_bounds__(AW * 32)
	attn_dq_k(attn_dims a, const T *q, const T *k, const T *v,
		  const int32_t *pos, const float *lse, const float *Dt,
		  const T *dout, T *dq)
{
	extern __shared__ float sm[];
	const int hd = a.hd, hp = hd + 1;
	float *qs = sm, *gs = qs + BQ * hd, *ks = gs + BQ * hd,
	      *vs = ks + BK * hp;
	__shared__ int lo_s[BQ];
	__shared__ float lse_s[BQ], dt_s[BQ];
	const int t0 = blockIdx.x * BQ, h = blockIdx.y, n = blockIdx.z;
	const int kh = h / (a.Hq / a.Hkv);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	for (int i = threadIdx.x; i < BQ * hd; i += blockDim.x) {
		const int r = i / hd, d = i - r * hd, t = t0 + r;
		const int64_t at = (((int64_t)n * a.S + t) * a.Hq + h) * hd + d;
		qs[i] = t < a.S ? mgc_ld(q, at) : 0.0f;
		gs[i] = t < a.S ? mgc_ld(dout, at) : 0.0f;
	}
	if (threadIdx.x < BQ) {
		const int t = t0 + threadIdx.x;
		const int64_t il = ((int64_t)n * a.Hq + h) * a.S + t;
		lo_s[threadIdx.x] =
			t < a.S ? attn_lo(t, pos[(int64_t)n * a.S + t],
					  a.window)
				: a.S;
		lse_s[threadIdx.x] = t < a.S ? lse[il] : 0.0f;
		dt_s[threadIdx.x] = t < a.S ? Dt[il] : 0.0f;
	}
	__syncthreads();
	int kmin = a.S;
	for (int r = 0; r < BQ; r++)
		kmin = min(kmin, lo_s[r]);
	const int kend = min(t0 + BQ, a.S);
	float acc[QW][NDL];
#pragma unroll
	for (int qi = 0; qi < QW; qi++)
#pragma unroll
		for (int e = 0; e < NDL; e++)
			acc[qi][e] = 0;
	for (int kb = (kmin / BK) * BK; kb < kend; kb += BK) {
		__syncthreads();
		for (int i = threadIdx.x; i < BK * hd; i += blockDim.x) {
			const int j = i / hd, d = i - j * hd, s = kb + j;
			const int64_t at =
				(((int64_t)n * a.S + s) * a.Hkv + kh) * hd + d;
			ks[j * hp + d] = s < a.S ? mgc_ld(k, at) : 0.0f;
			vs[j * hp + d] = s < a.S ? mgc_ld(v, at) : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int qi = 0; qi < QW; qi++) {
			const int r = warp * QW + qi, t = t0 + r;
			const int lo = lo_s[r];
			if (t >= a.S || kb > t || kb + BK <= lo)
				continue;
			const int s = kb + lane;
			float ds = 0;
			if (s >= lo && s <= t) {
				float qk = 0, dp = 0;
				for (int d = 0; d < hd; d++) {
					qk += qs[r * hd + d] *
					      ks[lane * hp + d];
					dp += gs[r * hd + d] *
					      vs[lane * hp + d];
				}
				float dc;
				const float p = expf(
					attn_cap(qk * a.scale, a.cap, &dc) -
					lse_s[r]);
				ds = dc * p * (dp - dt_s[r]);
			}
			for (int j = 0; j < BK; j++) {
				const float dj =
					__shfl_sync(0xffffffffu, ds, j);
#pragma unroll
				for (int e = 0; e < NDL; e++) {
					const int d = lane + 32 * e;
					if (d < hd)
						acc[qi][e] +=
							dj * ks[j * hp + d];
				}
			}
		}
	}
#pragma unroll
	for (int qi = 0; qi < QW; qi++) {
		const int t = t0 + warp * QW + qi;
		if (t >= a.S)
			continue;
		const int64_t at = (((int64_t)n * a.S + t) * a.Hq + h) * hd;
#pragma unroll
		for (int e = 0; e < NDL; e++) {
			const int d = lane + 32 * e;
			if (d < hd)
				dq[at + d] =
					mgc_t<T>::from(a.scale * acc[qi][e]);
		}
	}
}

/* dk_s = scale * sum ds q_t, dv_s = sum p dout_t over the group's query
 * heads in order, then query tiles in order, then queries in order. */
template <typename T, int NDL>
__global__ void __launch_bounds__(AW * 32)
	attn_dkv_k(attn_dims a, const T *q, const T *k, const T *v,
		   const int32_t *pos, const float *lse, const float *Dt,
		   const T *dout, T *dk, T *dv)
{
	extern __shared__ float sm[];
	const int hd = a.hd, hp = hd + 1;
	float *ks = sm, *vs = ks + BKV * hd, *qs = vs + BKV * hd,
	      *gs = qs + BQ2 * hp;
	__shared__ int lo_s[BQ2];
	__shared__ float lse_s[BQ2], dt_s[BQ2];
	const int s0 = blockIdx.x * BKV, kh = blockIdx.y, n = blockIdx.z;
	const int G = a.Hq / a.Hkv;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int slast = min(s0 + BKV, a.S) - 1;
	for (int i = threadIdx.x; i < BKV * hd; i += blockDim.x) {
		const int j = i / hd, d = i - j * hd, s = s0 + j;
		const int64_t at =
			(((int64_t)n * a.S + s) * a.Hkv + kh) * hd + d;
		ks[i] = s < a.S ? mgc_ld(k, at) : 0.0f;
		vs[i] = s < a.S ? mgc_ld(v, at) : 0.0f;
	}
	float ak[KW][NDL], av[KW][NDL];
#pragma unroll
	for (int ki = 0; ki < KW; ki++)
#pragma unroll
		for (int e = 0; e < NDL; e++)
			ak[ki][e] = av[ki][e] = 0;
	for (int h = kh * G; h < (kh + 1) * G; h++)
		for (int tb = (s0 / BQ2) * BQ2; tb < a.S; tb += BQ2) {
			__syncthreads();
			bool any = false;
			if (threadIdx.x < BQ2) {
				const int t = tb + threadIdx.x;
				const int64_t il =
					((int64_t)n * a.Hq + h) * a.S + t;
				const int lo =
					t < a.S ? attn_lo(t,
							  pos[(int64_t)n * a.S +
							      t],
							  a.window)
						: a.S;
				lo_s[threadIdx.x] = lo;
				lse_s[threadIdx.x] = t < a.S ? lse[il] : 0.0f;
				dt_s[threadIdx.x] = t < a.S ? Dt[il] : 0.0f;
				any = t < a.S && lo <= slast && t >= s0;
			}
			if (!__syncthreads_or(any))
				continue; /* block-uniform */
			for (int i = threadIdx.x; i < BQ2 * hd;
			     i += blockDim.x) {
				const int r = i / hd, d = i - r * hd,
					  t = tb + r;
				const int64_t at =
					(((int64_t)n * a.S + t) * a.Hq + h) *
						hd +
					d;
				qs[r * hp + d] = t < a.S ? mgc_ld(q, at) : 0.0f;
				gs[r * hp + d] =
					t < a.S ? mgc_ld(dout, at) : 0.0f;
			}
			__syncthreads();
#pragma unroll
			for (int ki = 0; ki < KW; ki++) {
				const int j = warp * KW + ki, s = s0 + j;
				if (s >= a.S)
					continue;
				const int t = tb + lane;
				float p = 0, ds = 0;
				if (t < a.S && t >= s && lo_s[lane] <= s) {
					float qk = 0, dp = 0;
					for (int d = 0; d < hd; d++) {
						qk += qs[lane * hp + d] *
						      ks[j * hd + d];
						dp += gs[lane * hp + d] *
						      vs[j * hd + d];
					}
					float dc;
					p = expf(attn_cap(qk * a.scale, a.cap,
							  &dc) -
						 lse_s[lane]);
					ds = dc * p * (dp - dt_s[lane]);
				}
				for (int r = 0; r < BQ2; r++) {
					const float pr =
						__shfl_sync(0xffffffffu, p, r);
					const float dr =
						__shfl_sync(0xffffffffu, ds, r);
#pragma unroll
					for (int e = 0; e < NDL; e++) {
						const int d = lane + 32 * e;
						if (d < hd) {
							av[ki][e] +=
								pr *
								gs[r * hp + d];
							ak[ki][e] +=
								dr *
								qs[r * hp + d];
						}
					}
				}
			}
		}
#pragma unroll
	for (int ki = 0; ki < KW; ki++) {
		const int s = s0 + warp * KW + ki;
		if (s >= a.S)
			continue;
		const int64_t at = (((int64_t)n * a.S + s) * a.Hkv + kh) * hd;
#pragma unroll
		for (int e = 0; e < NDL; e++) {
			const int d = lane + 32 * e;
			if (d >= hd)
				continue;
			if (dk)
				dk[at + d] =
					mgc_t<T>::from(a.scale * ak[ki][e]);
			if (dv)
				dv[at + d] = mgc_t<T>::from(av[ki][e]);
		}
	}
}

/* Dynamic shared memory above the default 48 KiB needs an opt-in. */
template <typename K> static cudaError_t smem_optin(K kern, size_t bytes)
{
	if (bytes <= 48 * 1024)
		return cudaSuccess;
	return cudaFuncSetAttribute(
		kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

template <typename T, int NDL>
cudaError_t attn_fwd_run(cudaStream_t st, const attn_dims &a, const void *q,
			 const void *k, const void *v, const void *pos, void *o,
			 float *lse)
{
	const size_t sm = (size_t)(BQ * a.hd + BK * (a.hd + 1) + BK * a.hd) *
			  sizeof(float);
	cudaError_t e = smem_optin(attn_fwd_k<T, NDL>, sm);
	if (e != cudaSuccess)
		return e;
	const dim3 grid((unsigned)((a.S + BQ - 1) / BQ), (unsigned)a.Hq,
			(unsigned)a.N);
	attn_fwd_k<T, NDL><<<grid, AW * 32, sm, st>>>(
		a, (const T *)q, (const T *)k, (const T *)v,
		(const int32_t *)pos, (T *)o, lse);
	return cudaSuccess;
}

template <typename T, int NDL>
cudaError_t attn_bwd_run(cudaStream_t st, const attn_dims &a, const void *q,
			 const void *k, const void *v, const void *pos,
			 const void *o, const float *lse, const void *dout,
			 void *dq, void *dk, void *dv, float *Dt)
{
	const int64_t rows = (int64_t)a.N * a.Hq * a.S;
	attn_dt_k<T><<<mgc_blocks(rows * 32, TH), TH, 0, st>>>(
		a, (const T *)o, (const T *)dout, Dt);
	if (dq) {
		const size_t sm =
			(size_t)(2 * BQ * a.hd + 2 * BK * (a.hd + 1)) *
			sizeof(float);
		cudaError_t e = smem_optin(attn_dq_k<T, NDL>, sm);
		if (e != cudaSuccess)
			return e;
		const dim3 grid((unsigned)((a.S + BQ - 1) / BQ), (unsigned)a.Hq,
				(unsigned)a.N);
		attn_dq_k<T, NDL><<<grid, AW * 32, sm, st>>>(
			a, (const T *)q, (const T *)k, (const T *)v,
			(const int32_t *)pos, lse, Dt, (const T *)dout,
			(T *)dq);
	}
	if (dk || dv) {
		const size_t sm =
			(size_t)(2 * BKV * a.hd + 2 * BQ2 * (a.hd + 1)) *
			sizeof(float);
		cudaError_t e = smem_optin(attn_dkv_k<T, NDL>, sm);
		if (e != cudaSuccess)
			return e;
		const dim3 grid((unsigned)((a.S + BKV - 1) / BKV),
				(unsigned)a.Hkv, (unsigned)a.N);
		attn_dkv_k<T, NDL><<<grid, AW * 32, sm, st>>>(
			a, (const T *)q, (const T *)k, (const T *)v,
			(const int32_t *)pos, lse, Dt, (const T *)dout, (T *)dk,
			(T *)dv);
	}
	return cudaSuccess;
}

/* NDL for head dimension hd: 1, 2, 4 or 8 (hd <= 256); 0 if too big. */
static int attn_ndl(int hd)
{
	const int n = (hd + 31) / 32;
	return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 0;
}

#define ATTN_NDL(ndl, call, ...)                                               \
	(ndl == 1   ? call<T, 1>(__VA_ARGS__)                                  \
	 : ndl == 2 ? call<T, 2>(__VA_ARGS__)                                  \
	 : ndl == 4 ? call<T, 4>(__VA_ARGS__)                                  \
		    : call<T, 8>(__VA_ARGS__))

template <typename T>
void attn_fwd(cudaError_t *err, cudaStream_t st, const attn_dims &a,
	      const void *q, const void *k, const void *v, const void *pos,
	      void *o, float *lse)
{
	const int ndl = attn_ndl(a.hd);
	*err = ATTN_NDL(ndl, attn_fwd_run, st, a, q, k, v, pos, o, lse);
}

template <typename T>
void attn_bwd(cudaError_t *err, cudaStream_t st, const attn_dims &a,
	      const void *q, const void *k, const void *v, const void *pos,
	      const void *o, const float *lse, const void *dout, void *dq,
	      void *dk, void *dv, float *Dt)
{
	const int ndl = attn_ndl(a.hd);
	*err = ATTN_NDL(ndl, attn_bwd_run, st, a, q, k, v, pos, o, lse, dout,
			dq, dk, dv, Dt);
}

static int64_t rows_of(const struct mg_tensor *t)
{
	const int64_t D = t->shape[t->ndim - 1];
	return D ? mg_tensor_numel(t) / D : 0;
}

static int attn_setup(const char *op, const struct mg_tensor *q,
		      const struct mg_tensor *k,
		      const struct mg_attn_opts *opts, attn_dims *a)
{
	const double scale = opts->scale;
	a->N = (int)q->shape[0];
	a->S = (int)q->shape[1];
	a->Hq = (int)q->shape[2];
	a->Hkv = (int)k->shape[2];
	a->hd = (int)q->shape[3];
	a->scale = (float)scale;
	a->window = opts->window > q->shape[1] ? 0 : (int)opts->window;
	a->cap = (float)opts->softcap;
	if (!attn_ndl(a->hd))
		return mg_error("%s: head dimension %d > 256 is not supported "
				"on CUDA",
				op, a->hd);
	if (q->shape[0] > 65535 || q->shape[2] > 65535 ||
	    q->shape[1] > (1 << 30))
		return mg_error("%s: shape too large for the CUDA kernels", op);
	return 0;
}
/* The flash kernels are on (MG_CUDA_OPT_ATTN_FLASH); off when the ops
 * state cannot be had (the tiled path reports that error itself). */
static bool flash_on(struct mg_ctx *ctx)
{
	struct mgc_state *st = mgc_state(ctx);
	if (!st) {
		mg_clear_error();
		return false;
	}
	return st->opt[MG_CUDA_OPT_ATTN_FLASH] != 0;
}
} // namespace

/* ---- entry points --------------------------------------------------- */

extern "C" int mg_cuda_embedding(struct mg_ctx *ctx,
				 const struct mg_tensor *ids,
				 const struct mg_tensor *table,
				 struct mg_tensor *y)
{
	const int64_t R = mg_tensor_numel(ids), V = table->shape[0],
		      D = table->shape[1];
	if (R * D == 0)
		return 0;
	LLM_DISPATCH("embedding", table->dtype, embed_fwd, mgc_stream(ctx),
		     ids->data, table->data, y->data, R, D, V);
	return mgc_check_launch("embedding");
}

extern "C" int mg_cuda_embedding_backward(struct mg_ctx *ctx,
					  const struct mg_tensor *ids,
					  const struct mg_tensor *dy,
					  struct mg_tensor *dtable)
{
	static const char op[] = "embedding_backward";
	const int64_t R = mg_tensor_numel(ids), V = dtable->shape[0],
		      D = dtable->shape[1];
	if (R * D == 0)
		return 0;
	if (R > INT32_MAX)
		return mg_error("%s: too many rows for CUDA", op);
	const cudaStream_t st = mgc_stream(ctx);
	size_t tmp = 0;
	if (cub::DeviceRadixSort::SortPairs(
		    NULL, tmp, (const int32_t *)NULL, (int32_t *)NULL,
		    (const int32_t *)NULL, (int32_t *)NULL, (int)R, 0, 32,
		    st) != cudaSuccess)
		return mg_error("%s: cub sort size query failed", op);
	const size_t ib = ((size_t)R * sizeof(int32_t) + 255) & ~(size_t)255;
	char *base = (char *)mgc_scratch(ctx, 3 * ib + tmp);
	if (!base)
		return -1;
	int32_t *keys = (int32_t *)base, *rows_in = (int32_t *)(base + ib),
		*rows = (int32_t *)(base + 2 * ib);
	void *temp = base + 3 * ib;
	iota_k<<<mgc_blocks(R, TH), TH, 0, st>>>(rows_in, R);
	if (cub::DeviceRadixSort::SortPairs(temp, tmp,
					    (const int32_t *)ids->data, keys,
					    (const int32_t *)rows_in, rows,
					    (int)R, 0, 32, st) != cudaSuccess)
		return mgc_check_launch(op);
	LLM_DISPATCH(op, dy->dtype, embed_bwd, st, keys, rows, dy->data,
		     dtable->data, R, D, V);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_rmsnorm(struct mg_ctx *ctx, const struct mg_tensor *x,
			       const struct mg_tensor *w, double eps,
			       struct mg_tensor *y, struct mg_tensor *rstd)
{
	const int64_t R = rows_of(x), D = x->shape[x->ndim - 1];
	if (R == 0)
		return 0;
	const bool wf32 = w->dtype == MG_F32;
	LLM_DISPATCH("rmsnorm", x->dtype, rms_fwd, mgc_stream(ctx), x->data,
		     w->data, wf32, (float)eps, y->data,
		     rstd ? (float *)rstd->data : NULL, R, D);
	return mgc_check_launch("rmsnorm");
}

extern "C" int mg_cuda_rmsnorm_backward(
	struct mg_ctx *ctx, const struct mg_tensor *x,
	const struct mg_tensor *w, const struct mg_tensor *rstd,
	const struct mg_tensor *dy, struct mg_tensor *dx, struct mg_tensor *dw)
{
	static const char op[] = "rmsnorm_backward";
	const int64_t R = rows_of(x), D = x->shape[x->ndim - 1];
	if (R == 0 || (!dx && !dw))
		return 0;
	float *part = NULL;
	if (dw) {
		const int64_t S = (R + rms_seg(R) - 1) / rms_seg(R);
		part = (float *)mgc_scratch(ctx,
					    (size_t)(S * D) * sizeof(float));
		if (!part)
			return -1;
	}
	const bool wf32 = w->dtype == MG_F32;
	LLM_DISPATCH(op, x->dtype, rms_bwd, mgc_stream(ctx), x->data, w->data,
		     wf32, (const float *)rstd->data, dy->data,
		     dx ? dx->data : NULL, dw ? dw->data : NULL, part, R, D);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_rope(struct mg_ctx *ctx, struct mg_tensor *x,
			    const struct mg_tensor *positions,
			    const struct mg_tensor *inv_freq, int sign,
			    double scale)
{
	const int64_t NT = x->shape[0] * x->shape[1], H = x->shape[2],
		      hd = x->shape[3], h2 = inv_freq->shape[0];
	if (NT * H * h2 == 0)
		return 0;
	LLM_DISPATCH("rope", x->dtype, rope, mgc_stream(ctx), x->data,
		     positions->data, inv_freq->data, (float)sign, (float)scale,
		     NT, H, hd, h2);
	return mgc_check_launch(sign > 0 ? "rope" : "rope_backward");
}

extern "C" int mg_cuda_attention(struct mg_ctx *ctx, const struct mg_tensor *q,
				 const struct mg_tensor *k,
				 const struct mg_tensor *v,
				 const struct mg_tensor *positions,
				 const struct mg_attn_opts *opts,
				 struct mg_tensor *o, struct mg_tensor *lse)
{
	static const char op[] = "attention";
	attn_dims a;
	if (attn_setup(op, q, k, opts, &a))
		return -1;
	if (mg_tensor_numel(q) == 0)
		return 0;
	const struct mg_tensor *all[] = {q, k, v, o};
	if (flash_on(ctx) && mgc_flash_attention_fits(q, opts->scale, all, 4)) {
		if (mgc_flash_attention(ctx, q, k, v, positions, opts, o, lse))
			return -1;
		return mgc_check_launch(op);
	}
	cudaError_t err = cudaSuccess;
	LLM_DISPATCH(op, q->dtype, attn_fwd, &err, mgc_stream(ctx), a, q->data,
		     k->data, v->data, positions->data, o->data,
		     lse ? (float *)lse->data : NULL);
	if (err != cudaSuccess)
		return mg_error("%s: %s", op, cudaGetErrorString(err));
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_attention_backward(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k, const struct mg_tensor *v,
	const struct mg_tensor *positions, const struct mg_attn_opts *opts,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv)
{
	static const char op[] = "attention_backward";
	attn_dims a;
	if (attn_setup(op, q, k, opts, &a))
		return -1;
	if (mg_tensor_numel(q) == 0 || (!dq && !dk && !dv))
		return 0;
	const struct mg_tensor *all[] = {q, k, v, o, dout, dq, dk, dv};
	if (flash_on(ctx) && mgc_flash_attention_fits(q, opts->scale, all, 8)) {
		if (mgc_flash_attention_backward(ctx, q, k, v, positions, opts,
						 o, lse, dout, dq, dk, dv))
			return -1;
		return mgc_check_launch(op);
	}
	float *Dt = (float *)mgc_scratch(
		ctx, (size_t)((int64_t)a.N * a.Hq * a.S) * sizeof(float));
	if (!Dt)
		return -1;
	cudaError_t err = cudaSuccess;
	LLM_DISPATCH(op, q->dtype, attn_bwd, &err, mgc_stream(ctx), a, q->data,
		     k->data, v->data, positions->data, o->data,
		     (const float *)lse->data, dout->data, dq ? dq->data : NULL,
		     dk ? dk->data : NULL, dv ? dv->data : NULL, Dt);
	if (err != cudaSuccess)
		return mg_error("%s: %s", op, cudaGetErrorString(err));
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_swiglu(struct mg_ctx *ctx, const struct mg_tensor *g,
			      const struct mg_tensor *u, struct mg_tensor *h)
{
	const int64_t n = mg_tensor_numel(g);
	if (n == 0)
		return 0;
	LLM_DISPATCH("swiglu", g->dtype, swiglu, mgc_stream(ctx), g->data,
		     u->data, h->data, n);
	return mgc_check_launch("swiglu");
}

extern "C" int
mg_cuda_swiglu_backward(struct mg_ctx *ctx, const struct mg_tensor *g,
			const struct mg_tensor *u, const struct mg_tensor *dh,
			struct mg_tensor *dg, struct mg_tensor *du)
{
	const int64_t n = mg_tensor_numel(g);
	if (n == 0 || (!dg && !du))
		return 0;
	LLM_DISPATCH("swiglu_backward", g->dtype, swiglu_bwd, mgc_stream(ctx),
		     g->data, u->data, dh->data, dg ? dg->data : NULL,
		     du ? du->data : NULL, n);
	return mgc_check_launch("swiglu_backward");
}
