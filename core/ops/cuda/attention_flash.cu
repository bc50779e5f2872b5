/*
 * attention_flash.cu - tensor-core flash attention for F16/BF16 with head
 * dimension 64 or 128 (the LLaMA shapes), behind mg_cuda_attention and
 * mg_cuda_attention_backward (llm.cu dispatches here; everything else,
 * F32 included, keeps the tiled CUDA-core kernels of llm.cu, which are
 * also the reference this path is tested beside). Same op as there:
 * causal grouped-query attention over packed documents, query t attends
 * keys [t - positions[t], t] (and no more than the sliding window's);
 * q [N, S, Hq, hd], k/v [N, S, Hkv, hd],
 * lse [N, Hq, S] in natural-log units of the scaled scores; scores
 * soft-capped (cap tanh(s / cap), Gemma 2) when the options say.
 *
 * Why: the tiled kernels run the products on CUDA cores in F32; here
 * every product is mma.sync m16n8k16 (F16/BF16 operands, F32
 * accumulation), operands fed by ldmatrix from shared memory.
 *
 * Algorithm (FlashAttention-2, written from the algorithm):
 *  - forward: a block of 4 warps per (query tile, query head, sequence),
 *    16 query rows per warp at hd 128, 32 (two m-tiles) at hd 64.
 *    Key/value tiles of 64 rows stream through shared memory with
 *    cp.async double buffering; tiles wholly outside every row's [lo, t]
 *    range are never loaded, only tiles that straddle a boundary are
 *    masked. Online softmax in base 2 (scores times scale * log2 e, folded
 *    into the exponent's FFMA): running max m and sum l per row, the
 *    output accumulator rescaled when m grows, P rounded to the input
 *    type for the P V product. lse = (m + log2 l) ln 2.
 *  - backward: two kernels, so that every gradient is a fixed-order sum
 *    (the project's ops are deterministic, no float atomics): dq per
 *    query tile looping over key tiles (recomputes S and dP; it also
 *    computes D = rowsum(dO * O) in F32 for its rows first and stores it),
 *    then dk/dv per 64-key tile looping over the group's query heads and
 *    the query tiles that can see the keys, dk/dv accumulated in
 *    registers. P = exp(S - lse) is recomputed from the saved lse,
 *    dS = P (dP - D). Without dq, a small kernel computes D.
 *
 * Shared-memory tiles are row-major [rows][hd] with the 16-byte chunks of
 * row r XOR-swizzled by (r & 7), so both the cp.async stores and the
 * 8-row ldmatrix reads hit 8 distinct bank groups.
 */
#include <math.h>
#include <stdlib.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_llm.h"

namespace
{
const int FW = 4;	/* warps per block */
const int FT = FW * 32; /* threads per block */
const int BC = 64;	/* keys per tile (forward, dq) and per dk/dv block */
const float LOG2E = 1.4426950408889634f;
const float LN2 = 0.6931471805599453f;

struct fa_dims {
	int N, S, Hq, Hkv;
	float scale; /* softmax scale */
	float sl2;   /* scale * log2(e) */
	int window;  /* sliding window, 0: none */
	/* score soft-capping (Gemma 2), 0: none. Raw scores r become
	 * cap_out tanh(r cap_in) (cap_in = scale / cap, cap_out = cap /
	 * scale): the capped scaled score over scale, so the base-2
	 * exponent's FFMA stays as it is */
	float cap, cap_in, cap_out;
};

/* Raw score r soft-capped in place when there is a cap (before the
 * mask: a masked score is -inf whatever it was). */
__device__ __forceinline__ float fa_cap(const fa_dims &a, float r)
{
	return a.cap > 0 ? a.cap_out * tanhf(r * a.cap_in) : r;
}

/* A warp's whole tile of raw scores soft-capped in place (forward and
 * backward recompute the same scores, so both cap them alike). */
template <int MW, int NB>
__device__ __forceinline__ void fa_cap_tile(const fa_dims &a,
					    float (&s)[MW][NB][4])
{
	if (!(a.cap > 0))
		return;
#pragma unroll
	for (int m = 0; m < MW; m++)
#pragma unroll
		for (int nb = 0; nb < NB; nb++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				s[m][nb][e] = fa_cap(a, s[m][nb][e]);
}

/* The cap's derivative at a capped raw score c: 1 - tanh^2 (0 where c
 * is -inf, a masked score, whose P is 0 anyway). */
__device__ __forceinline__ float fa_dcap(const fa_dims &a, float c)
{
	if (!(a.cap > 0))
		return 1.0f;
	const float th = c / a.cap_out;
	return fmaxf(1.0f - th * th, 0.0f);
}

/* First key query t attends: t - pos, clamped to [0, t], and within the
 * sliding window when there is one (as llm.cu). */
__device__ __forceinline__ int fa_lo(int t, int32_t pos, int window)
{
	int lo = t - pos;
	lo = lo < 0 ? 0 : (lo > t ? t : lo);
	return window > 0 && t - window + 1 > lo ? t - window + 1 : lo;
}

/* ---- PTX wrappers -------------------------------------------------- */

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16-byte global -> shared copy; ok == false writes zeros (src unread). */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool ok)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
			     smem_u32(dst)),
		     "l"(src), "r"(ok ? 16 : 0)
		     : "memory");
}

__device__ __forceinline__ void cp_commit()
{
	asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void cp_wait()
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of
 * matrix i, register i receives it (row lane / 4, columns 2 (lane % 4)
 * and +1). The _t form transposes each matrix. */
__device__ __forceinline__ void ldsm4(uint32_t *r, const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, "
		     "%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldsm4t(uint32_t *r, const void *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, "
		     "%2, %3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p)));
}

/* 2^x by the SFU alone (ex2.approx.ftz: exp2f adds a rescaling around
 * it for results below 2^-126, which only flush probabilities that round
 * to nothing anyway); 2^-inf = 0. */
__device__ __forceinline__ float ex2(float x)
{
	float y;
	asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
	return y;
}

/* c += a b, m16n8k16, F32 accumulators. */
template <typename T>
__device__ __forceinline__ void mma(float *c, const uint32_t *a,
				    const uint32_t *b);

template <>
__device__ __forceinline__ void mma<mgc_f16>(float *c, const uint32_t *a,
					     const uint32_t *b)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
		     "{%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
		       "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma<mgc_bf16>(float *c, const uint32_t *a,
					      const uint32_t *b)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
		     "{%0, %1, %2, %3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
		       "r"(b[1]));
}

/* Two floats rounded to T, lo in the low half (the lower column). */
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<mgc_f16>(float lo, float hi)
{
	__half2 h = __floats2half2_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&h);
}

template <>
__device__ __forceinline__ uint32_t pack2<mgc_bf16>(float lo, float hi)
{
	__nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
	return *reinterpret_cast<uint32_t *>(&h);
}

/* ---- tiles in shared memory ----------------------------------------- */

/* Element offset of (row r, column c) in a swizzled [rows][HD] tile; c a
 * multiple of 8 (one 16-byte chunk), or within the chunk of c & ~7. */
template <int HD> __device__ __forceinline__ int swz(int r, int c)
{
	return r * HD + ((((c >> 3) ^ (r & 7))) << 3) + (c & 7);
}

/* Rows [0, ROWS) of a tile from g (row stride `stride` elements) into
 * shared memory by cp.async; rows >= valid are zero-filled. */
template <typename T, int HD, int ROWS>
__device__ __forceinline__ void load_tile(T *sm, const T *g, int64_t stride,
					  int valid)
{
	const int CH = HD / 8;
	static_assert(ROWS * CH % FT == 0, "tile not a multiple of the block");
#pragma unroll
	for (int it = 0; it < ROWS * CH / FT; it++) {
		const int i = it * FT + threadIdx.x;
		const int r = i / CH, ch = i % CH;
		const bool ok = r < valid;
		cp16(sm + r * HD + ((ch ^ (r & 7)) << 3),
		     ok ? g + (int64_t)r * stride + ch * 8 : g, ok);
	}
}

/* Rows [0, valid) of a shared tile to global memory, 16 bytes a thread. */
template <typename T, int HD, int ROWS>
__device__ __forceinline__ void store_tile(T *g, const T *sm, int64_t stride,
					   int valid)
{
	const int CH = HD / 8;
#pragma unroll
	for (int it = 0; it < ROWS * CH / FT; it++) {
		const int i = it * FT + threadIdx.x;
		const int r = i / CH, ch = i % CH;
		if (r < valid)
			*reinterpret_cast<uint4 *>(g + (int64_t)r * stride +
						   ch * 8) =
				*reinterpret_cast<const uint4 *>(
					sm + r * HD + ((ch ^ (r & 7)) << 3));
	}
}

/* A warp's 16 x HD accumulator (C fragments, [HD / 8][4]) times mul,
 * rounded to T, into rows r0..r0+15 of a swizzled tile. Row g of the
 * fragment holds c[0], c[1]; row g + 8 holds c[2], c[3]. */
template <typename T, int HD>
__device__ __forceinline__ void
frag_to_smem(T *sm, int r0, const float (*acc)[4], float mul0, float mul1)
{
	const int lane = threadIdx.x & 31, g = lane >> 2, tg = lane & 3;
#pragma unroll
	for (int nb = 0; nb < HD / 8; nb++) {
		const int c = nb * 8 + 2 * tg;
		*reinterpret_cast<uint32_t *>(sm + swz<HD>(r0 + g, c)) =
			pack2<T>(acc[nb][0] * mul0, acc[nb][1] * mul0);
		*reinterpret_cast<uint32_t *>(sm + swz<HD>(r0 + g + 8, c)) =
			pack2<T>(acc[nb][2] * mul1, acc[nb][3] * mul1);
	}
}

/*
 * Fragment addressing (lane l):
 *  A (16x16 at rows r0, cols k0) from a row-major tile:
 *     row r0 + (l & 7) + ((l >> 3) & 1) * 8, col k0 + (l >> 4) * 8
 *  B pair (n-blocks n0, n0 + 8; k-step k0) from a tile stored [n][k]:
 *     row n0 + (l & 7) + (l >> 4) * 8, col k0 + ((l >> 3) & 1) * 8
 *     -> regs 0,1 for n-block n0, regs 2,3 for n0 + 8
 *  B pair from a tile stored [k][n] (transposed load, ldsm4t):
 *     row k0 + (l & 7) + ((l >> 3) & 1) * 8, col n0 + (l >> 4) * 8
 */
__device__ __forceinline__ int a_row(int l)
{
	return (l & 7) + ((l >> 3) & 1) * 8;
}
__device__ __forceinline__ int a_col(int l)
{
	return (l >> 4) * 8;
}
__device__ __forceinline__ int bn_row(int l)
{
	return (l & 7) + (l >> 4) * 8;
}
__device__ __forceinline__ int bn_col(int l)
{
	return ((l >> 3) & 1) * 8;
}

__device__ __forceinline__ float quad_max(float v)
{
	v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
	return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v)
{
	v += __shfl_xor_sync(0xffffffffu, v, 1);
	return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

__device__ __forceinline__ int warp_min_i(int v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

__device__ __forceinline__ int warp_max_i(int v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/*
 * The block's tile rank and (head, sequence) pair. The grids are
 * [heads x sequences, tiles]: x, the fastest-varying index, runs over the
 * pairs, so blocks start tile rank by tile rank across every pair, rank
 * 0 (each pair's heaviest causal tile) first, and the last wave holds the
 * lightest. With tiles as x, each pair's tiles ran heavy to light but the
 * last pairs' heavy tiles started last and ran on alone.
 */
__device__ __forceinline__ void heavy_first(int heads, int *rank, int *head,
					    int *seq)
{
	*rank = blockIdx.y;
	*head = (int)(blockIdx.x % (unsigned)heads);
	*seq = (int)(blockIdx.x / (unsigned)heads);
}

/*
 * Per query tile of R rows (forward and dq): lo of each row into lo_s
 * (rows past S get S: they attend nothing), and over the valid rows the
 * smallest lo (first key tile) and the largest (from there on a key tile
 * before t0 needs no mask). Ends with a barrier.
 */
template <int R>
__device__ __forceinline__ void
tile_bounds(const fa_dims &a, const int32_t *pos, int n, int t0, int *lo_s,
	    int *red_s, int *kmin, int *lomax)
{
	const int tid = threadIdx.x;
	for (int r = tid; r < R; r += FT) {
		const int t = t0 + r;
		lo_s[r] =
			t < a.S ? fa_lo(t, pos[(int64_t)n * a.S + t], a.window)
				: a.S;
	}
	__syncthreads();
	if (tid < 32) {
		int mn = a.S, mx = 0;
		for (int r = tid; r < R; r += 32)
			if (t0 + r < a.S) {
				mn = min(mn, lo_s[r]);
				mx = max(mx, lo_s[r]);
			}
		mn = warp_min_i(mn);
		mx = warp_max_i(mx);
		if (tid == 0) {
			red_s[0] = mn;
			red_s[1] = mx;
		}
	}
	__syncthreads();
	*kmin = red_s[0];
	*lomax = red_s[1];
}

/*
 * acc[m] += A B for each of a warp's MW m-tiles (the forward's O += P V,
 * dq's dq += dS K): A is key step kk of the m-tile's F32 score
 * fragments s[m] (n-blocks 2kk and 2kk + 1 packed as one A fragment), B
 * rows kk * 16.. of the [BC, HD] key-major tile in shared memory, read
 * transposed, so each B fragment feeds all MW m-tiles.
 */
template <typename T, int HD, int MW>
__device__ __forceinline__ void
scores_times_tile(float (*acc)[HD / 8][4], const float (*s)[BC / 8][4], int kk,
		  const T *tile, int lane)
{
	uint32_t pa[MW][4];
#pragma unroll
	for (int m = 0; m < MW; m++) {
		const float(*s2)[4] = s[m] + 2 * kk;
		pa[m][0] = pack2<T>(s2[0][0], s2[0][1]);
		pa[m][1] = pack2<T>(s2[0][2], s2[0][3]);
		pa[m][2] = pack2<T>(s2[1][0], s2[1][1]);
		pa[m][3] = pack2<T>(s2[1][2], s2[1][3]);
	}
#pragma unroll
	for (int d2 = 0; d2 < HD / 16; d2++) {
		uint32_t b[4];
		ldsm4t(b, tile + swz<HD>(kk * 16 + a_row(lane),
					 d2 * 16 + a_col(lane)));
#pragma unroll
		for (int m = 0; m < MW; m++) {
			mma<T>(acc[m][2 * d2], pa[m], b);
			mma<T>(acc[m][2 * d2 + 1], pa[m], b + 2);
		}
	}
}

/* ---- forward -------------------------------------------------------- */

/*
 * MW m-tiles of 16 query rows per warp (block: FW * 16 * MW rows): with
 * MW = 2 every K/V fragment read from shared memory feeds two products,
 * halving the ldmatrix traffic per mma (shared-memory bandwidth is what
 * bounds mma.sync kernels), at twice the accumulator registers (so only
 * at hd 64).
 */
template <typename T, int HD, int MW>
__global__ void __launch_bounds__(FT)
	fa_fwd_k(fa_dims a, const T *__restrict__ q, const T *__restrict__ k,
		 const T *__restrict__ v, const int32_t *__restrict__ pos,
		 T *__restrict__ o, float *__restrict__ lse)
{
	const int R = FW * 16 * MW; /* query rows per block */
	extern __shared__ __align__(128) unsigned char fa_sm[];
	T *qs = reinterpret_cast<T *>(fa_sm);
	T *ks = qs + R * HD, *vs = ks + 2 * BC * HD;
	__shared__ int lo_s[R], red_s[2];
	/* heavy (late) query tiles first: causal work grows with t0 */
	int rank, h, n;
	heavy_first(a.Hq, &rank, &h, &n);
	const int t0 = (gridDim.y - 1 - rank) * R;
	const int kh = h / (a.Hq / a.Hkv);
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int64_t qst = (int64_t)a.Hq * HD, kst = (int64_t)a.Hkv * HD;
	const int rows = min(R, a.S - t0);
	const T *qg = q + ((int64_t)n * a.S + t0) * qst + (int64_t)h * HD;
	const T *kg = k + (int64_t)n * a.S * kst + (int64_t)kh * HD;
	const T *vg = v + (int64_t)n * a.S * kst + (int64_t)kh * HD;

	load_tile<T, HD, R>(qs, qg, qst, rows);
	int kmin, lomax;
	tile_bounds<R>(a, pos, n, t0, lo_s, red_s, &kmin, &lomax);
	const int kb0 = (kmin / BC) * BC;
	const int nkt = (t0 + rows - 1 - kb0) / BC + 1;
	load_tile<T, HD, BC>(ks, kg + (int64_t)kb0 * kst, kst, a.S - kb0);
	load_tile<T, HD, BC>(vs, vg + (int64_t)kb0 * kst, kst, a.S - kb0);
	cp_commit();

	/* this thread's rows: g and g + 8 of each of the warp's m-tiles
	 * (row index i = 2 mi + half) */
	const int wr = warp * 16 * MW;
	int lo[2 * MW], hi[2 * MW];
	int wlo = a.S;
#pragma unroll
	for (int i = 0; i < 2 * MW; i++) {
		const int r = wr + (i >> 1) * 16 + (i & 1) * 8 + g;
		lo[i] = lo_s[r];
		hi[i] = t0 + r < a.S ? t0 + r : -1;
		wlo = min(wlo, lo[i]);
	}
	wlo = warp_min_i(wlo);
	const int whi = min(t0 + wr + 16 * MW - 1, a.S - 1); /* < t0 + wr:
							       no rows */
	float m[2 * MW], l[2 * MW];
	float acc[MW][HD / 8][4];
#pragma unroll
	for (int i = 0; i < 2 * MW; i++) {
		m[i] = -INFINITY;
		l[i] = 0;
	}
#pragma unroll
	for (int mi = 0; mi < MW; mi++)
#pragma unroll
		for (int x = 0; x < HD / 8; x++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mi][x][e] = 0;
	uint32_t qf[MW][HD / 16][4];

	for (int j = 0; j < nkt; j++) {
		const int kb = kb0 + j * BC;
		if (j + 1 < nkt) {
			const int nb = kb + BC, buf = (j + 1) & 1;
			load_tile<T, HD, BC>(ks + buf * BC * HD,
					     kg + (int64_t)nb * kst, kst,
					     a.S - nb);
			load_tile<T, HD, BC>(vs + buf * BC * HD,
					     vg + (int64_t)nb * kst, kst,
					     a.S - nb);
			cp_commit();
			cp_wait<1>();
		} else {
			cp_wait<0>();
		}
		__syncthreads();
		if (j == 0) {
#pragma unroll
			for (int mi = 0; mi < MW; mi++)
#pragma unroll
				for (int kk = 0; kk < HD / 16; kk++)
					ldsm4(qf[mi][kk],
					      qs + swz<HD>(wr + mi * 16 +
								   a_row(lane),
							   kk * 16 +
								   a_col(lane)));
		}
		const T *kt = ks + (j & 1) * BC * HD;
		const T *vt = vs + (j & 1) * BC * HD;
		/* warp-uniform: skip tiles none of the warp's rows sees */
		if (whi >= t0 + wr && kb <= whi && kb + BC - 1 >= wlo) {
			float s[MW][BC / 8][4];
#pragma unroll
			for (int mi = 0; mi < MW; mi++)
#pragma unroll
				for (int x = 0; x < BC / 8; x++)
#pragma unroll
					for (int e = 0; e < 4; e++)
						s[mi][x][e] = 0;
#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
				for (int p = 0; p < BC / 16; p++) {
					uint32_t b[4];
					ldsm4(b,
					      kt + swz<HD>(p * 16 +
								   bn_row(lane),
							   kk * 16 +
								   bn_col(lane)));
#pragma unroll
					for (int mi = 0; mi < MW; mi++) {
						mma<T>(s[mi][2 * p], qf[mi][kk],
						       b);
						mma<T>(s[mi][2 * p + 1],
						       qf[mi][kk], b + 2);
					}
				}
			fa_cap_tile(a, s);
			/* mask only boundary tiles (raw scores; scale > 0, so
			 * the row max of the raw scores gives the scaled one) */
			if (!(kb >= lomax && kb + BC - 1 <= t0)) {
#pragma unroll
				for (int mi = 0; mi < MW; mi++)
#pragma unroll
					for (int x = 0; x < BC / 8; x++)
#pragma unroll
						for (int e = 0; e < 4; e++) {
							const int c = kb +
								      x * 8 +
								      2 * tg +
								      (e & 1);
							const int i = 2 * mi +
								      (e >> 1);
							if (c < lo[i] ||
							    c > hi[i])
								s[mi][x]
								 [e] = -INFINITY;
						}
			}
			/* online softmax per row (e 0,1: row g; e 2,3: g + 8)
			 * in base 2: p = 2^(s sl2 - m), one FFMA and one EX2 */
#pragma unroll
			for (int i = 0; i < 2 * MW; i++) {
				const int mi = i >> 1, e0 = (i & 1) * 2;
				float mx = -INFINITY;
#pragma unroll
				for (int x = 0; x < BC / 8; x++)
					mx = fmaxf(mx, fmaxf(s[mi][x][e0],
							     s[mi][x][e0 + 1]));
				const float mn =
					fmaxf(m[i], quad_max(mx) * a.sl2);
				/* a row with nothing seen yet keeps m = -inf:
				 * base 0 so exp2 gives 0, not NaN */
				const float bs = mn == -INFINITY ? 0.0f : mn;
				const float al = ex2(m[i] - bs);
				m[i] = mn;
				float ps = 0;
#pragma unroll
				for (int x = 0; x < BC / 8; x++) {
					s[mi][x][e0] = ex2(
						fmaf(s[mi][x][e0], a.sl2, -bs));
					s[mi][x][e0 + 1] = ex2(fmaf(
						s[mi][x][e0 + 1], a.sl2, -bs));
					ps += s[mi][x][e0] + s[mi][x][e0 + 1];
				}
				/* l stays a per-thread partial sum (the quad
				 * shares m); summed over the quad at the end */
				l[i] = l[i] * al + ps;
				/* the running max settles as keys accumulate:
				 * skip the HD / 4 multiplies by 1 when no row
				 * of the warp moved (al == 1 exactly then) */
				if (__any_sync(0xffffffffu, al != 1.0f)) {
#pragma unroll
					for (int x = 0; x < HD / 8; x++) {
						acc[mi][x][e0] *= al;
						acc[mi][x][e0 + 1] *= al;
					}
				}
			}
			/* O += P V: the S accumulators of n-blocks 2kk and
			 * 2kk + 1 are the A fragment of key step kk */
#pragma unroll
			for (int kk = 0; kk < BC / 16; kk++)
				scores_times_tile<T, HD, MW>(acc, s, kk, vt,
							     lane);
		}
		__syncthreads(); /* the buffer is refilled next iteration */
	}
	/* the output goes out through qs (free: Q is in registers) */
#pragma unroll
	for (int mi = 0; mi < MW; mi++) {
		const float l0 = quad_sum(l[2 * mi]);
		const float l1 = quad_sum(l[2 * mi + 1]);
		frag_to_smem<T, HD>(qs, wr + mi * 16, acc[mi],
				    l0 > 0 ? 1.0f / l0 : 0.0f,
				    l1 > 0 ? 1.0f / l1 : 0.0f);
		if (lse && tg == 0) {
			float *lr = lse + ((int64_t)n * a.Hq + h) * a.S + t0;
			const int r0 = wr + mi * 16 + g;
			if (hi[2 * mi] >= 0)
				lr[r0] = m[2 * mi] * LN2 + logf(l0);
			if (hi[2 * mi + 1] >= 0)
				lr[r0 + 8] = m[2 * mi + 1] * LN2 + logf(l1);
		}
	}
	__syncthreads();
	store_tile<T, HD, R>(o + ((int64_t)n * a.S + t0) * qst +
				     (int64_t)h * HD,
			     qs, qst, rows);
}

/* ---- backward ------------------------------------------------------- */

/* Dt[n, h, t] = sum_d dout * o in F32; HD / 8 lanes per row, 16 bytes
 * each. */
template <typename T, int HD>
__global__ void __launch_bounds__(256)
	fa_dt_k(fa_dims a, const T *__restrict__ o, const T *__restrict__ dout,
		float *__restrict__ Dt)
{
	const int CPR = HD / 8, RPB = 256 / CPR; /* rows per block pass */
	const int64_t rows = (int64_t)a.N * a.S * a.Hq;
	const int ch = threadIdx.x % CPR;
	/* every thread runs the same number of passes (whole-warp shuffles) */
	for (int64_t base = (int64_t)blockIdx.x * RPB; base < rows;
	     base += (int64_t)gridDim.x * RPB) {
		const int64_t w = base + threadIdx.x / CPR;
		float s = 0;
		if (w < rows) {
			const uint4 ov =
				reinterpret_cast<const uint4 *>(o + w * HD)[ch];
			const uint4 gv = reinterpret_cast<const uint4 *>(
				dout + w * HD)[ch];
			const T *oe = reinterpret_cast<const T *>(&ov);
			const T *ge = reinterpret_cast<const T *>(&gv);
#pragma unroll
			for (int i = 0; i < 8; i++)
				s += mgc_t<T>::load(oe[i]) *
				     mgc_t<T>::load(ge[i]);
		}
		/* sum over the row's CPR lanes (aligned groups of a warp) */
#pragma unroll
		for (int off = CPR / 2; off > 0; off >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, off);
		if (w < rows && ch == 0) {
			const int64_t h = w % a.Hq, nt = w / a.Hq;
			const int64_t t = nt % a.S, n = nt / a.S;
			Dt[(n * a.Hq + h) * a.S + t] = s;
		}
	}
}

/* dq = scale sum_s dS k_s over key tiles in order; dS = P (dP - D),
 * P = exp2(S sl2 - lse log2 e), dP = dout v^T. MW m-tiles of 16 query
 * rows a warp, as the forward: with MW = 2 (hd 64) every K / V fragment
 * read from shared memory feeds two products. */
template <typename T, int HD, int MW>
__global__ void __launch_bounds__(FT)
	fa_dq_k(fa_dims a, const T *__restrict__ q, const T *__restrict__ k,
		const T *__restrict__ v, const int32_t *__restrict__ pos,
		const float *__restrict__ lse, const T *__restrict__ o,
		float *__restrict__ Dt, const T *__restrict__ dout,
		T *__restrict__ dq)
{
	const int R = FW * 16 * MW; /* query rows per block */
	extern __shared__ __align__(128) unsigned char fa_sm[];
	T *qs = reinterpret_cast<T *>(fa_sm);
	T *gs = qs + R * HD, *ks = gs + R * HD, *vs = ks + 2 * BC * HD;
	__shared__ int lo_s[R], red_s[2];
	__shared__ float d_s[R];
	int rank, h, n; /* heavy (late) query tiles first */
	heavy_first(a.Hq, &rank, &h, &n);
	const int t0 = (gridDim.y - 1 - rank) * R;
	const int kh = h / (a.Hq / a.Hkv);
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int64_t qst = (int64_t)a.Hq * HD, kst = (int64_t)a.Hkv * HD;
	const int rows = min(R, a.S - t0);
	const int64_t qoff = ((int64_t)n * a.S + t0) * qst + (int64_t)h * HD;
	const T *kg = k + (int64_t)n * a.S * kst + (int64_t)kh * HD;
	const T *vg = v + (int64_t)n * a.S * kst + (int64_t)kh * HD;

	load_tile<T, HD, R>(qs, q + qoff, qst, rows);
	load_tile<T, HD, R>(gs, dout + qoff, qst, rows);
	int kmin, lomax;
	tile_bounds<R>(a, pos, n, t0, lo_s, red_s, &kmin, &lomax);
	const int kb0 = (kmin / BC) * BC;
	const int nkt = (t0 + rows - 1 - kb0) / BC + 1;
	load_tile<T, HD, BC>(ks, kg + (int64_t)kb0 * kst, kst, a.S - kb0);
	load_tile<T, HD, BC>(vs, vg + (int64_t)kb0 * kst, kst, a.S - kb0);
	cp_commit();
	/* D = rowsum(dout * o) in F32, FT / R threads a row (o read from
	 * global memory while the tiles land), kept here and written out
	 * for the dk/dv kernel */
	float *dr = Dt + ((int64_t)n * a.Hq + h) * a.S + t0;
	{
		const int TPR = FT / R, W = HD / TPR;
		static_assert(FT % R == 0 && TPR <= 2, "threads a row");
		const int r = tid / TPR, c0 = (tid % TPR) * W;
		uint4 ov[W / 8];
#pragma unroll
		for (int i = 0; i < W / 8; i++)
			ov[i] = r < rows ? *reinterpret_cast<const uint4 *>(
						   o + qoff + r * qst + c0 +
						   8 * i)
					 : make_uint4(0, 0, 0, 0);
		cp_wait<0>();
		__syncthreads();
		float sum = 0;
#pragma unroll
		for (int i = 0; i < W / 8; i++) {
			const uint4 gv = *reinterpret_cast<const uint4 *>(
				gs + swz<HD>(r, c0 + 8 * i));
			const T *oe = reinterpret_cast<const T *>(&ov[i]);
			const T *ge = reinterpret_cast<const T *>(&gv);
#pragma unroll
			for (int e = 0; e < 8; e++)
				sum += mgc_t<T>::load(oe[e]) *
				       mgc_t<T>::load(ge[e]);
		}
		if (TPR == 2)
			sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		if (tid % TPR == 0) {
			d_s[r] = sum;
			if (r < rows)
				dr[r] = sum;
		}
	}
	__syncthreads(); /* d_s ready */

	/* this thread's rows: wr + 16 m + g (x = 0) and + 8 (x = 1); their
	 * first keys stay in lo_s (read only where a tile needs a mask) */
	const int wr = warp * 16 * MW;
	float ls[MW][2], dd[MW][2];
	const float *lr = lse + ((int64_t)n * a.Hq + h) * a.S + t0;
	int wlo = a.S;
#pragma unroll
	for (int m = 0; m < MW; m++)
#pragma unroll
		for (int x = 0; x < 2; x++) {
			const int r = wr + 16 * m + g + 8 * x;
			ls[m][x] = t0 + r < a.S ? lr[r] * LOG2E : 0.0f;
			dd[m][x] = d_s[r];
			wlo = min(wlo, lo_s[r]);
		}
	wlo = warp_min_i(wlo);
	const int whi = min(t0 + wr + 16 * MW - 1, a.S - 1);

	float acc[MW][HD / 8][4];
#pragma unroll
	for (int m = 0; m < MW; m++)
#pragma unroll
		for (int i = 0; i < HD / 8; i++)
			acc[m][i][0] = acc[m][i][1] = acc[m][i][2] =
				acc[m][i][3] = 0;

	for (int j = 0; j < nkt; j++) {
		const int kb = kb0 + j * BC;
		if (j + 1 < nkt) {
			const int nb = kb + BC, buf = (j + 1) & 1;
			load_tile<T, HD, BC>(ks + buf * BC * HD,
					     kg + (int64_t)nb * kst, kst,
					     a.S - nb);
			load_tile<T, HD, BC>(vs + buf * BC * HD,
					     vg + (int64_t)nb * kst, kst,
					     a.S - nb);
			cp_commit();
			cp_wait<1>();
		} else {
			cp_wait<0>();
		}
		__syncthreads();
		const T *kt = ks + (j & 1) * BC * HD;
		const T *vt = vs + (j & 1) * BC * HD;
		if (whi >= t0 + wr && kb <= whi && kb + BC - 1 >= wlo) {
			float s[MW][BC / 8][4], dp[MW][BC / 8][4];
#pragma unroll
			for (int m = 0; m < MW; m++)
#pragma unroll
				for (int i = 0; i < BC / 8; i++)
#pragma unroll
					for (int e = 0; e < 4; e++)
						s[m][i][e] = dp[m][i][e] = 0;
#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++) {
				uint32_t qa[MW][4], ga[MW][4];
#pragma unroll
				for (int m = 0; m < MW; m++) {
					const int ar = wr + 16 * m +
						       a_row(lane),
						  ac = kk * 16 + a_col(lane);
					ldsm4(qa[m], qs + swz<HD>(ar, ac));
					ldsm4(ga[m], gs + swz<HD>(ar, ac));
				}
#pragma unroll
				for (int p = 0; p < BC / 16; p++) {
					uint32_t b[4];
					const int br = p * 16 + bn_row(lane),
						  bc = kk * 16 + bn_col(lane);
					ldsm4(b, kt + swz<HD>(br, bc));
#pragma unroll
					for (int m = 0; m < MW; m++) {
						mma<T>(s[m][2 * p], qa[m], b);
						mma<T>(s[m][2 * p + 1], qa[m],
						       b + 2);
					}
					ldsm4(b, vt + swz<HD>(br, bc));
#pragma unroll
					for (int m = 0; m < MW; m++) {
						mma<T>(dp[m][2 * p], ga[m], b);
						mma<T>(dp[m][2 * p + 1], ga[m],
						       b + 2);
					}
				}
			}
			fa_cap_tile(a, s);
			if (!(kb >= lomax && kb + BC - 1 <= t0)) {
				/* keys outside [lo, t] of the row (rows past S
				 * have zero q and dout, so dS = 0, and are
				 * never stored) */
#pragma unroll
				for (int m = 0; m < MW; m++)
#pragma unroll
					for (int x = 0; x < 2; x++) {
						const int r =
							wr + 16 * m + g + 8 * x;
						const int lo = lo_s[r],
							  hi = t0 + r;
#pragma unroll
						for (int nb = 0; nb < BC / 8;
						     nb++)
#pragma unroll
							for (int c2 = 0; c2 < 2;
							     c2++) {
								const int c =
									kb +
									nb * 8 +
									2 * tg +
									c2;
								if (c < lo ||
								    c > hi)
									s[m][nb]
									 [2 * x +
									  c2] = -INFINITY;
							}
					}
			}
			/* dS = P (dP - D) in s, then dq += dS K (K read
			 * transposed: keys are k) */
#pragma unroll
			for (int m = 0; m < MW; m++)
#pragma unroll
				for (int nb = 0; nb < BC / 8; nb++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const int x = e >> 1;
						const float c = s[m][nb][e];
						const float p = ex2(fmaf(
							c, a.sl2, -ls[m][x]));
						s[m][nb][e] = fa_dcap(a, c) *
							      p *
							      (dp[m][nb][e] -
							       dd[m][x]);
					}
#pragma unroll
			for (int kk = 0; kk < BC / 16; kk++)
				scores_times_tile<T, HD, MW>(acc, s, kk, kt,
							     lane);
		}
		__syncthreads();
	}
#pragma unroll
	for (int m = 0; m < MW; m++)
		frag_to_smem<T, HD>(qs, wr + 16 * m, acc[m], a.scale, a.scale);
	__syncthreads();
	store_tile<T, HD, R>(dq + qoff, qs, qst, rows);
}

/*
 * dk = scale sum dS^T q, dv = sum P^T dout for the 64 keys s0.. of one
 * key/value head: the group's query heads in order, for each the query
 * tiles of BQ rows from the one holding s0 to the last that sees a key of
 * the tile, in order. Warp w owns keys s0 + 16 w ..; S^T and dP^T are
 * computed transposed (keys as rows) so their accumulators are directly
 * the A fragments of the dv and dk products.
 */
template <typename T, int HD, int BQ>
__global__ void __launch_bounds__(FT)
	fa_dkv_k(fa_dims a, const T *__restrict__ q, const T *__restrict__ k,
		 const T *__restrict__ v, const int32_t *__restrict__ pos,
		 const float *__restrict__ lse, const float *__restrict__ Dt,
		 const T *__restrict__ dout, T *__restrict__ dk,
		 T *__restrict__ dv)
{
	extern __shared__ __align__(128) unsigned char fa_sm[];
	T *ks = reinterpret_cast<T *>(fa_sm);
	T *vs = ks + BC * HD, *qs = vs + BC * HD, *gs = qs + 2 * BQ * HD;
	__shared__ __align__(16) float lse_s[2][BQ], d_s[2][BQ];
	__shared__ int lo_s[2][BQ], last_s;
	int rank, kh, n; /* heavy (early) key tiles first */
	heavy_first(a.Hkv, &rank, &kh, &n);
	const int s0 = rank * BC;
	const int G = a.Hq / a.Hkv;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int64_t qst = (int64_t)a.Hq * HD, kst = (int64_t)a.Hkv * HD;
	const int krows = min(BC, a.S - s0), slast = s0 + krows - 1;
	const int64_t koff = ((int64_t)n * a.S + s0) * kst + (int64_t)kh * HD;
	const int32_t *pn = pos + (int64_t)n * a.S;

	load_tile<T, HD, BC>(ks, k + koff, kst, krows);
	load_tile<T, HD, BC>(vs, v + koff, kst, krows);
	cp_commit();
	/* the last query that sees a key of this tile (s0 itself does) */
	if (tid == 0)
		last_s = s0;
	__syncthreads();
	int last = s0;
	for (int t = s0 + tid; t < a.S; t += FT)
		if (fa_lo(t, pn[t], a.window) <= slast)
			last = t;
	last = warp_max_i(last);
	if (lane == 0)
		atomicMax(&last_s, last); /* integer: order-independent */
	__syncthreads();
	last = last_s;
	const int qt0 = s0 / BQ, nqt = last / BQ - qt0 + 1;
	const int total = G * nqt;

	/* query tile i (head kh G + i / nqt) into buffer b */
	auto load_q = [&](int i, int b) {
		const int h = kh * G + i / nqt;
		const int tq0 = (qt0 + i % nqt) * BQ;
		const int64_t off =
			((int64_t)n * a.S + tq0) * qst + (int64_t)h * HD;
		load_tile<T, HD, BQ>(qs + b * BQ * HD, q + off, qst, a.S - tq0);
		load_tile<T, HD, BQ>(gs + b * BQ * HD, dout + off, qst,
				     a.S - tq0);
		if (tid < BQ) {
			const int t = tq0 + tid;
			const int64_t il = ((int64_t)n * a.Hq + h) * a.S + t;
			const bool ok = t < a.S;
			lse_s[b][tid] = ok ? lse[il] * LOG2E : INFINITY;
			d_s[b][tid] = ok ? Dt[il] : 0.0f;
			lo_s[b][tid] =
				ok ? fa_lo(t, pn[t], a.window) : 0x7fffffff;
		}
	};
	load_q(0, 0);
	cp_commit();

	const int wk = warp * 16; /* warp's first key in the tile */
	const int k0 = s0 + wk + g, k1 = k0 + 8; /* this thread's keys */
	float ak[HD / 8][4], av[HD / 8][4];
#pragma unroll
	for (int i = 0; i < HD / 8; i++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			ak[i][e] = av[i][e] = 0;

	for (int i = 0; i < total; i++) {
		const int b = i & 1;
		const int tq0 = (qt0 + i % nqt) * BQ;
		if (i + 1 < total) {
			load_q(i + 1, b ^ 1);
			cp_commit();
			cp_wait<1>();
		} else {
			cp_wait<0>();
		}
		__syncthreads();
		const T *qt = qs + b * BQ * HD, *gt = gs + b * BQ * HD;
		/* warp-uniform: keys past S or past every query of the tile
		 * see nothing */
		if (s0 + wk < a.S && s0 + wk <= tq0 + BQ - 1) {
			float st[BQ / 8][4], pt[BQ / 8][4];
#pragma unroll
			for (int x = 0; x < BQ / 8; x++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					st[x][e] = pt[x][e] = 0;
#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++) {
				uint32_t ka[4], va[4];
				const int ar = wk + a_row(lane),
					  ac = kk * 16 + a_col(lane);
				ldsm4(ka, ks + swz<HD>(ar, ac));
				ldsm4(va, vs + swz<HD>(ar, ac));
#pragma unroll
				for (int p = 0; p < BQ / 16; p++) {
					uint32_t bb[4];
					const int br = p * 16 + bn_row(lane),
						  bc = kk * 16 + bn_col(lane);
					ldsm4(bb, qt + swz<HD>(br, bc));
					mma<T>(st[2 * p], ka, bb);
					mma<T>(st[2 * p + 1], ka, bb + 2);
					ldsm4(bb, gt + swz<HD>(br, bc));
					mma<T>(pt[2 * p], va, bb);
					mma<T>(pt[2 * p + 1], va, bb + 2);
				}
			}
			if (a.cap > 0) {
#pragma unroll
				for (int x = 0; x < BQ / 8; x++)
#pragma unroll
					for (int e = 0; e < 4; e++)
						st[x][e] = fa_cap(a, st[x][e]);
			}
			/* element (key k0 / k1, query tq0 + c): masked unless
			 * every query of the tile sees every key of the warp */
			int lq = lo_s[b][lane];
			if (BQ > 32)
				lq = max(lq, lo_s[b][lane + 32]);
			lq = warp_max_i(lq);
			if (!(tq0 + BQ <= a.S && lq <= s0 + wk &&
			      tq0 >= s0 + wk + 15)) {
#pragma unroll
				for (int x = 0; x < BQ / 8; x++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						const int c = x * 8 + 2 * tg +
							      (e & 1);
						const int key = e < 2 ? k0 : k1;
						if (key > tq0 + c ||
						    lo_s[b][c] > key)
							st[x][e] = -INFINITY;
					}
			}
#pragma unroll
			for (int x = 0; x < BQ / 8; x++) {
				const int c = x * 8 + 2 * tg;
				const float2 ls =
					*reinterpret_cast<const float2 *>(
						&lse_s[b][c]);
				const float2 dd =
					*reinterpret_cast<const float2 *>(
						&d_s[b][c]);
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const float c = st[x][e];
					const float p = ex2(
						fmaf(c, a.sl2,
						     -(e & 1 ? ls.y : ls.x)));
					st[x][e] = p;
					pt[x][e] = fa_dcap(a, c) * p *
						   (pt[x][e] -
						    (e & 1 ? dd.y : dd.x));
				}
			}
			/* dv += P^T dout, dk += dS^T q (query steps of 16) */
#pragma unroll
			for (int kq = 0; kq < BQ / 16; kq++) {
				uint32_t pa[4], sa[4];
				pa[0] = pack2<T>(st[2 * kq][0], st[2 * kq][1]);
				pa[1] = pack2<T>(st[2 * kq][2], st[2 * kq][3]);
				pa[2] = pack2<T>(st[2 * kq + 1][0],
						 st[2 * kq + 1][1]);
				pa[3] = pack2<T>(st[2 * kq + 1][2],
						 st[2 * kq + 1][3]);
				sa[0] = pack2<T>(pt[2 * kq][0], pt[2 * kq][1]);
				sa[1] = pack2<T>(pt[2 * kq][2], pt[2 * kq][3]);
				sa[2] = pack2<T>(pt[2 * kq + 1][0],
						 pt[2 * kq + 1][1]);
				sa[3] = pack2<T>(pt[2 * kq + 1][2],
						 pt[2 * kq + 1][3]);
#pragma unroll
				for (int dd = 0; dd < HD / 16; dd++) {
					uint32_t bb[4];
					const int br = kq * 16 + a_row(lane),
						  bc = dd * 16 + a_col(lane);
					ldsm4t(bb, gt + swz<HD>(br, bc));
					mma<T>(av[2 * dd], pa, bb);
					mma<T>(av[2 * dd + 1], pa, bb + 2);
					ldsm4t(bb, qt + swz<HD>(br, bc));
					mma<T>(ak[2 * dd], sa, bb);
					mma<T>(ak[2 * dd + 1], sa, bb + 2);
				}
			}
		}
		__syncthreads();
	}
	/* out through ks / vs (no longer read) */
	frag_to_smem<T, HD>(ks, wk, ak, a.scale, a.scale);
	frag_to_smem<T, HD>(vs, wk, av, 1.0f, 1.0f);
	__syncthreads();
	if (dk)
		store_tile<T, HD, BC>(dk + koff, ks, kst, krows);
	if (dv)
		store_tile<T, HD, BC>(dv + koff, vs, kst, krows);
}

/* ---- launchers ------------------------------------------------------ */

/* Dynamic shared memory beyond 48 KiB less the kernel's static shared
 * memory needs an opt-in: always set (the kernels have static arrays, so
 * even 48 KiB of dynamic memory exceeds the default). */
template <typename K> cudaError_t smem_optin(K kern, size_t bytes)
{
	return cudaFuncSetAttribute(
		kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* Query rows per dk/dv iteration: 32 for hd 128 keeps the two 16 x 128
 * F32 accumulators (dk, dv) and S^T, dP^T within the registers. */
template <int HD> struct fa_bq {
	static const int v = HD > 64 ? 32 : 64;
};

/* m-tiles per warp in the forward and dq: 2 at hd 64 (registers allow
 * it; one measured 9% slower in the forward and 8% in dq at Llama 3.2
 * 1B, T 2048), 1 at hd 128. */
template <int HD> struct fa_mw {
	static const int v = HD > 64 ? 1 : 2;
};

template <typename T, int HD, int MW>
cudaError_t fa_fwd_launch(cudaStream_t st, const fa_dims &a, const void *q,
			  const void *k, const void *v, const void *pos,
			  void *o, float *lse)
{
	const int R = FW * 16 * MW;
	const size_t sm = (size_t)(R + 4 * BC) * HD * sizeof(T);
	cudaError_t e = smem_optin(fa_fwd_k<T, HD, MW>, sm);
	if (e != cudaSuccess)
		return e;
	const dim3 grid((unsigned)(a.Hq * a.N), (unsigned)((a.S + R - 1) / R));
	fa_fwd_k<T, HD, MW><<<grid, FT, sm, st>>>(
		a, (const T *)q, (const T *)k, (const T *)v,
		(const int32_t *)pos, (T *)o, lse);
	return cudaGetLastError();
}

template <typename T, int HD>
cudaError_t fa_fwd_run(cudaStream_t st, const fa_dims &a, const void *q,
		       const void *k, const void *v, const void *pos, void *o,
		       float *lse)
{
	return fa_fwd_launch<T, HD, fa_mw<HD>::v>(st, a, q, k, v, pos, o, lse);
}

/* dk and dv for every key tile of 64, BQ query rows an iteration. */
template <typename T, int HD, int BQ>
cudaError_t fa_dkv_launch(cudaStream_t st, const fa_dims &a, const void *q,
			  const void *k, const void *v, const void *pos,
			  const float *lse, const float *Dt, const void *dout,
			  void *dk, void *dv)
{
	const size_t sm = (size_t)(2 * BC + 4 * BQ) * HD * sizeof(T);
	cudaError_t e = smem_optin(fa_dkv_k<T, HD, BQ>, sm);
	if (e != cudaSuccess)
		return e;
	const dim3 grid((unsigned)(a.Hkv * a.N),
			(unsigned)((a.S + BC - 1) / BC));
	fa_dkv_k<T, HD, BQ>
		<<<grid, FT, sm, st>>>(a, (const T *)q, (const T *)k,
				       (const T *)v, (const int32_t *)pos, lse,
				       Dt, (const T *)dout, (T *)dk, (T *)dv);
	return cudaGetLastError();
}

/* dq (and D) for every query tile of FW * 16 * MW rows. */
template <typename T, int HD, int MW>
cudaError_t fa_dq_launch(cudaStream_t st, const fa_dims &a, const void *q,
			 const void *k, const void *v, const void *pos,
			 const float *lse, const void *o, const void *dout,
			 void *dq, float *Dt)
{
	const int R = FW * 16 * MW;
	const size_t sm = (size_t)(2 * R + 4 * BC) * HD * sizeof(T);
	cudaError_t e = smem_optin(fa_dq_k<T, HD, MW>, sm);
	if (e != cudaSuccess)
		return e;
	const dim3 grid((unsigned)(a.Hq * a.N), (unsigned)((a.S + R - 1) / R));
	fa_dq_k<T, HD, MW><<<grid, FT, sm, st>>>(
		a, (const T *)q, (const T *)k, (const T *)v,
		(const int32_t *)pos, lse, (const T *)o, Dt, (const T *)dout,
		(T *)dq);
	return cudaGetLastError();
}

template <typename T, int HD>
cudaError_t fa_bwd_run(cudaStream_t st, const fa_dims &a, const void *q,
		       const void *k, const void *v, const void *pos,
		       const void *o, const float *lse, const void *dout,
		       void *dq, void *dk, void *dv, float *Dt)
{
	cudaError_t e = cudaSuccess;
	if (!dq) {
		/* D by itself (the dq kernel computes it otherwise) */
		const int64_t rows = (int64_t)a.N * a.S * a.Hq;
		fa_dt_k<T, HD>
			<<<mgc_blocks(rows * (HD / 8), 256), 256, 0, st>>>(
				a, (const T *)o, (const T *)dout, Dt);
		e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
	} else {
		e = fa_dq_launch<T, HD, fa_mw<HD>::v>(st, a, q, k, v, pos, lse,
						      o, dout, dq, Dt);
		if (e != cudaSuccess)
			return e;
	}
	if (!dk && !dv)
		return e;
	return fa_dkv_launch<T, HD, fa_bq<HD>::v>(st, a, q, k, v, pos, lse, Dt,
						  dout, dk, dv);
}

fa_dims fa_make(const struct mg_tensor *q, const struct mg_tensor *k,
		const struct mg_attn_opts *opts)
{
	const double scale = opts->scale;
	fa_dims a;
	a.window = opts->window > q->shape[1] ? 0 : (int)opts->window;
	a.N = (int)q->shape[0];
	a.S = (int)q->shape[1];
	a.Hq = (int)q->shape[2];
	a.Hkv = (int)k->shape[2];
	a.scale = (float)scale;
	a.sl2 = (float)(scale * 1.4426950408889634);
	a.cap = opts->softcap > 0 ? (float)opts->softcap : 0.0f;
	a.cap_in = a.cap > 0 ? (float)(scale / opts->softcap) : 0.0f;
	a.cap_out = a.cap > 0 ? (float)(opts->softcap / scale) : 0.0f;
	return a;
}

#define FA_DISPATCH(dt, hd, FN, ...)                                           \
	(dt == MG_F16 ? (hd == 64 ? FN<mgc_f16, 64>(__VA_ARGS__)               \
				  : FN<mgc_f16, 128>(__VA_ARGS__))             \
	 : hd == 64   ? FN<mgc_bf16, 64>(__VA_ARGS__)                          \
		      : FN<mgc_bf16, 128>(__VA_ARGS__))
} // namespace

extern "C" bool mgc_flash_attention_fits(const struct mg_tensor *q,
					 double scale,
					 const struct mg_tensor *const *t,
					 int nt)
{
	/* the kernels take row maxima of the raw scores */
	if (!(scale > 0) || !isfinite(scale))
		return false;
	if (q->dtype != MG_F16 && q->dtype != MG_BF16)
		return false;
	if (q->shape[3] != 64 && q->shape[3] != 128)
		return false;
	/* tiles of 64 rows are the grids' y (at most 65535) */
	if (q->shape[1] > (int64_t)65535 * 64)
		return false;
	for (int i = 0; i < nt; i++)
		if (t[i] && !mgc_aligned16(t[i]->data))
			return false;
	return true;
}

extern "C" int mgc_flash_attention(struct mg_ctx *ctx,
				   const struct mg_tensor *q,
				   const struct mg_tensor *k,
				   const struct mg_tensor *v,
				   const struct mg_tensor *positions,
				   const struct mg_attn_opts *opts,
				   struct mg_tensor *o, struct mg_tensor *lse)
{
	const fa_dims a = fa_make(q, k, opts);
	const int hd = (int)q->shape[3];
	const cudaError_t e =
		FA_DISPATCH(q->dtype, hd, fa_fwd_run, mgc_stream(ctx), a,
			    q->data, k->data, v->data, positions->data, o->data,
			    lse ? (float *)lse->data : NULL);
	if (e != cudaSuccess)
		return mg_error("attention (flash): %s", cudaGetErrorString(e));
	return 0;
}

extern "C" int mgc_flash_attention_backward(
	struct mg_ctx *ctx, const struct mg_tensor *q,
	const struct mg_tensor *k, const struct mg_tensor *v,
	const struct mg_tensor *positions, const struct mg_attn_opts *opts,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv)
{
	const fa_dims a = fa_make(q, k, opts);
	const int hd = (int)q->shape[3];
	float *Dt = (float *)mgc_scratch(
		ctx, (size_t)((int64_t)a.N * a.Hq * a.S) * sizeof(float));
	if (!Dt)
		return -1;
	const cudaError_t e = FA_DISPATCH(
		q->dtype, hd, fa_bwd_run, mgc_stream(ctx), a, q->data, k->data,
		v->data, positions->data, o->data, (const float *)lse->data,
		dout->data, dq ? dq->data : NULL, dk ? dk->data : NULL,
		dv ? dv->data : NULL, Dt);
	if (e != cudaSuccess)
		return mg_error("attention_backward (flash): %s",
				cudaGetErrorString(e));
	return 0;
}
