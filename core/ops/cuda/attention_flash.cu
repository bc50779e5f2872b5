/*
 * attention_flash.cu - tensor-core flash attention for F16/BF16 with head
 * dimension 64 or 128 (the LLaMA shapes), behind mg_cuda_attention and
 * mg_cuda_attention_backward (llm.cu dispatches here; everything else,
 * F32 included, keeps the tiled CUDA-core kernels of llm.cu, which are
 * also the reference this path is tested beside). Same op as there:
 * causal grouped-query attention over packed documents, query t attends
 * keys [t - positions[t], t]; q [N, S, Hq, hd], k/v [N, S, Hkv, hd],
 * lse [N, Hq, S] in natural-log units of the scaled scores.
 *
 * Why: the tiled kernels run the products on CUDA cores in F32; here
 * every product is mma.sync m16n8k16 (F16/BF16 operands, F32
 * accumulation), operands fed by ldmatrix from shared memory.
 *
 * Algorithm (FlashAttention-2, written from the algorithm):
 *  - forward: a block of 4 warps per (64-query tile, query head,
 *    sequence), 16 query rows per warp. Key/value tiles of 64 rows stream
 *    through shared memory with cp.async double buffering; tiles wholly
 *    outside every row's [lo, t] range are never loaded, only tiles that
 *    straddle a boundary are masked. Online softmax in base 2 (scores
 *    pre-multiplied by scale * log2 e): running max m and sum l per row,
 *    the output accumulator rescaled when m grows, P rounded to the input
 *    type for the P V product. lse = (m + log2 l) ln 2.
 *  - backward: D = rowsum(dO * O) first (F32). Then two kernels, so that
 *    every gradient is a fixed-order sum (the project's ops are
 *    deterministic, no float atomics): dq per query tile looping over key
 *    tiles (recomputes S and dP), and dk/dv per 64-key tile looping over
 *    the group's query heads and the query tiles that can see the keys,
 *    dk/dv accumulated in registers. P = exp(S - lse) is recomputed from
 *    the saved lse, dS = P (dP - D).
 *
 * Shared-memory tiles are row-major [rows][hd] with the 16-byte chunks of
 * row r XOR-swizzled by (r & 7), so both the cp.async stores and the
 * 8-row ldmatrix reads hit 8 distinct bank groups.
 */
#include <math.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_llm.h"

namespace
{
const int FW = 4;	/* warps per block */
const int FT = FW * 32; /* threads per block */
const int BR = FW * 16; /* query rows per forward / dq block */
const int BC = 64;	/* keys per tile (forward, dq) and per dk/dv block */
const float LOG2E = 1.4426950408889634f;
const float LN2 = 0.6931471805599453f;

struct fa_dims {
	int N, S, Hq, Hkv;
	float scale; /* softmax scale */
	float sl2;   /* scale * log2(e) */
};

/* First key query t attends: t - pos, clamped to [0, t] (as llm.cu). */
__device__ __forceinline__ int fa_lo(int t, int32_t pos)
{
	int lo = t - pos;
	return lo < 0 ? 0 : (lo > t ? t : lo);
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
 * Per query tile (forward and dq): lo of each of the BR rows into lo_s
 * (rows past S get S: they attend nothing), and over the valid rows the
 * smallest lo (first key tile) and the largest (from there on a key tile
 * before t0 needs no mask). Ends with a barrier.
 */
__device__ __forceinline__ void tile_bounds(const fa_dims &a,
					    const int32_t *pos, int n, int t0,
					    int *lo_s, int *red_s, int *kmin,
					    int *lomax)
{
	const int tid = threadIdx.x;
	if (tid < BR) {
		const int t = t0 + tid;
		lo_s[tid] = t < a.S ? fa_lo(t, pos[(int64_t)n * a.S + t]) : a.S;
	}
	__syncthreads();
	if (tid < 32) {
		int mn = a.S, mx = 0;
		for (int r = tid; r < BR; r += 32)
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

/* ---- forward -------------------------------------------------------- */

template <typename T, int HD>
__global__ void __launch_bounds__(FT)
	fa_fwd_k(fa_dims a, const T *__restrict__ q, const T *__restrict__ k,
		 const T *__restrict__ v, const int32_t *__restrict__ pos,
		 T *__restrict__ o, float *__restrict__ lse)
{
	extern __shared__ __align__(128) unsigned char fa_sm[];
	T *qs = reinterpret_cast<T *>(fa_sm);
	T *ks = qs + BR * HD, *vs = ks + 2 * BC * HD;
	__shared__ int lo_s[BR], red_s[2];
	/* heavy (late) query tiles first: causal work grows with t0 */
	const int t0 = (gridDim.x - 1 - blockIdx.x) * BR;
	const int h = blockIdx.y, n = blockIdx.z;
	const int kh = h / (a.Hq / a.Hkv);
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int64_t qst = (int64_t)a.Hq * HD, kst = (int64_t)a.Hkv * HD;
	const int rows = min(BR, a.S - t0);
	const T *qg = q + ((int64_t)n * a.S + t0) * qst + (int64_t)h * HD;
	const T *kg = k + (int64_t)n * a.S * kst + (int64_t)kh * HD;
	const T *vg = v + (int64_t)n * a.S * kst + (int64_t)kh * HD;

	load_tile<T, HD, BR>(qs, qg, qst, rows);
	int kmin, lomax;
	tile_bounds(a, pos, n, t0, lo_s, red_s, &kmin, &lomax);
	const int kb0 = (kmin / BC) * BC;
	const int nkt = (t0 + rows - 1 - kb0) / BC + 1;
	load_tile<T, HD, BC>(ks, kg + (int64_t)kb0 * kst, kst, a.S - kb0);
	load_tile<T, HD, BC>(vs, vg + (int64_t)kb0 * kst, kst, a.S - kb0);
	cp_commit();

	/* this thread's rows (g and g + 8 of the warp's 16) */
	const int wr = warp * 16, r0 = wr + g, r1 = r0 + 8;
	const int lo0 = lo_s[r0], lo1 = lo_s[r1];
	const int hi0 = t0 + r0 < a.S ? t0 + r0 : -1;
	const int hi1 = t0 + r1 < a.S ? t0 + r1 : -1;
	const int wlo = warp_min_i(min(lo0, lo1));
	const int whi = min(t0 + wr + 15, a.S - 1); /* < t0 + wr: no rows */

	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0, l1 = 0;
	float acc[HD / 8][4];
#pragma unroll
	for (int i = 0; i < HD / 8; i++)
		acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0;
	uint32_t qf[HD / 16][4];

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
			for (int kk = 0; kk < HD / 16; kk++)
				ldsm4(qf[kk],
				      qs + swz<HD>(wr + a_row(lane),
						   kk * 16 + a_col(lane)));
		}
		const T *kt = ks + (j & 1) * BC * HD;
		const T *vt = vs + (j & 1) * BC * HD;
		/* warp-uniform: skip tiles none of the warp's rows sees */
		if (whi >= t0 + wr && kb <= whi && kb + BC - 1 >= wlo) {
			float s[BC / 8][4];
#pragma unroll
			for (int i = 0; i < BC / 8; i++)
				s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0;
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
					mma<T>(s[2 * p], qf[kk], b);
					mma<T>(s[2 * p + 1], qf[kk], b + 2);
				}
			/* scale to base-2 units; mask only boundary tiles */
			const bool full = kb >= lomax && kb + BC - 1 <= t0;
#pragma unroll
			for (int nb = 0; nb < BC / 8; nb++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int c =
						kb + nb * 8 + 2 * tg + (e & 1);
					const int lo = e < 2 ? lo0 : lo1;
					const int hi = e < 2 ? hi0 : hi1;
					s[nb][e] *= a.sl2;
					if (!full && (c < lo || c > hi))
						s[nb][e] = -INFINITY;
				}
			/* online softmax, rows g (e 0,1) and g + 8 (e 2,3) */
			float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
			for (int nb = 0; nb < BC / 8; nb++) {
				mx0 = fmaxf(mx0, fmaxf(s[nb][0], s[nb][1]));
				mx1 = fmaxf(mx1, fmaxf(s[nb][2], s[nb][3]));
			}
			const float mn0 = fmaxf(m0, quad_max(mx0));
			const float mn1 = fmaxf(m1, quad_max(mx1));
			/* a row with nothing seen yet keeps m = -inf: use 0
			 * as the base so exp2 gives 0, not NaN */
			const float b0 = mn0 == -INFINITY ? 0.0f : mn0;
			const float b1 = mn1 == -INFINITY ? 0.0f : mn1;
			const float al0 = exp2f(m0 - b0), al1 = exp2f(m1 - b1);
			m0 = mn0;
			m1 = mn1;
			float ps0 = 0, ps1 = 0;
#pragma unroll
			for (int nb = 0; nb < BC / 8; nb++) {
				s[nb][0] = exp2f(s[nb][0] - b0);
				s[nb][1] = exp2f(s[nb][1] - b0);
				s[nb][2] = exp2f(s[nb][2] - b1);
				s[nb][3] = exp2f(s[nb][3] - b1);
				ps0 += s[nb][0] + s[nb][1];
				ps1 += s[nb][2] + s[nb][3];
			}
			/* l stays a per-thread partial sum (the quad's lanes
			 * share m); summed over the quad at the end */
			l0 = l0 * al0 + ps0;
			l1 = l1 * al1 + ps1;
#pragma unroll
			for (int i = 0; i < HD / 8; i++) {
				acc[i][0] *= al0;
				acc[i][1] *= al0;
				acc[i][2] *= al1;
				acc[i][3] *= al1;
			}
			/* O += P V: the S accumulators of n-blocks 2kk and
			 * 2kk + 1 are the A fragment of key step kk */
#pragma unroll
			for (int kk = 0; kk < BC / 16; kk++) {
				uint32_t pa[4];
				pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
				pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
				pa[2] = pack2<T>(s[2 * kk + 1][0],
						 s[2 * kk + 1][1]);
				pa[3] = pack2<T>(s[2 * kk + 1][2],
						 s[2 * kk + 1][3]);
#pragma unroll
				for (int dp = 0; dp < HD / 16; dp++) {
					uint32_t b[4];
					ldsm4t(b,
					       vt + swz<HD>(kk * 16 +
								    a_row(lane),
							    dp * 16 +
								    a_col(lane)));
					mma<T>(acc[2 * dp], pa, b);
					mma<T>(acc[2 * dp + 1], pa, b + 2);
				}
			}
		}
		__syncthreads(); /* the buffer is refilled next iteration */
	}
	l0 = quad_sum(l0);
	l1 = quad_sum(l1);
	/* the output goes out through qs (free: Q is in registers) */
	frag_to_smem<T, HD>(qs, wr, acc, l0 > 0 ? 1.0f / l0 : 0.0f,
			    l1 > 0 ? 1.0f / l1 : 0.0f);
	if (lse && tg == 0) {
		float *lr = lse + ((int64_t)n * a.Hq + h) * a.S + t0;
		if (hi0 >= 0)
			lr[r0] = m0 * LN2 + logf(l0);
		if (hi1 >= 0)
			lr[r1] = m1 * LN2 + logf(l1);
	}
	__syncthreads();
	store_tile<T, HD, BR>(o + ((int64_t)n * a.S + t0) * qst +
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
 * P = exp2(S sl2 - lse log2 e), dP = dout v^T. */
template <typename T, int HD>
__global__ void __launch_bounds__(FT)
	fa_dq_k(fa_dims a, const T *__restrict__ q, const T *__restrict__ k,
		const T *__restrict__ v, const int32_t *__restrict__ pos,
		const float *__restrict__ lse, const float *__restrict__ Dt,
		const T *__restrict__ dout, T *__restrict__ dq)
{
	extern __shared__ __align__(128) unsigned char fa_sm[];
	T *qs = reinterpret_cast<T *>(fa_sm);
	T *gs = qs + BR * HD, *ks = gs + BR * HD, *vs = ks + 2 * BC * HD;
	__shared__ int lo_s[BR], red_s[2];
	const int t0 = (gridDim.x - 1 - blockIdx.x) * BR;
	const int h = blockIdx.y, n = blockIdx.z;
	const int kh = h / (a.Hq / a.Hkv);
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int g = lane >> 2, tg = lane & 3;
	const int64_t qst = (int64_t)a.Hq * HD, kst = (int64_t)a.Hkv * HD;
	const int rows = min(BR, a.S - t0);
	const int64_t qoff = ((int64_t)n * a.S + t0) * qst + (int64_t)h * HD;
	const T *kg = k + (int64_t)n * a.S * kst + (int64_t)kh * HD;
	const T *vg = v + (int64_t)n * a.S * kst + (int64_t)kh * HD;

	load_tile<T, HD, BR>(qs, q + qoff, qst, rows);
	load_tile<T, HD, BR>(gs, dout + qoff, qst, rows);
	int kmin, lomax;
	tile_bounds(a, pos, n, t0, lo_s, red_s, &kmin, &lomax);
	const int kb0 = (kmin / BC) * BC;
	const int nkt = (t0 + rows - 1 - kb0) / BC + 1;
	load_tile<T, HD, BC>(ks, kg + (int64_t)kb0 * kst, kst, a.S - kb0);
	load_tile<T, HD, BC>(vs, vg + (int64_t)kb0 * kst, kst, a.S - kb0);
	cp_commit();

	const int wr = warp * 16, r0 = wr + g, r1 = r0 + 8;
	const int lo0 = lo_s[r0], lo1 = lo_s[r1];
	const int hi0 = t0 + r0 < a.S ? t0 + r0 : -1;
	const int hi1 = t0 + r1 < a.S ? t0 + r1 : -1;
	const int wlo = warp_min_i(min(lo0, lo1));
	const int whi = min(t0 + wr + 15, a.S - 1);
	const float *lr = lse + ((int64_t)n * a.Hq + h) * a.S + t0;
	const float *dr = Dt + ((int64_t)n * a.Hq + h) * a.S + t0;
	const float ls0 = hi0 >= 0 ? lr[r0] * LOG2E : 0.0f;
	const float ls1 = hi1 >= 0 ? lr[r1] * LOG2E : 0.0f;
	const float d0 = hi0 >= 0 ? dr[r0] : 0.0f;
	const float d1 = hi1 >= 0 ? dr[r1] : 0.0f;

	float acc[HD / 8][4];
#pragma unroll
	for (int i = 0; i < HD / 8; i++)
		acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0;

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
			float s[BC / 8][4], dp[BC / 8][4];
#pragma unroll
			for (int i = 0; i < BC / 8; i++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					s[i][e] = dp[i][e] = 0;
#pragma unroll
			for (int kk = 0; kk < HD / 16; kk++) {
				uint32_t qa[4], ga[4];
				const int ar = wr + a_row(lane),
					  ac = kk * 16 + a_col(lane);
				ldsm4(qa, qs + swz<HD>(ar, ac));
				ldsm4(ga, gs + swz<HD>(ar, ac));
#pragma unroll
				for (int p = 0; p < BC / 16; p++) {
					uint32_t b[4];
					const int br = p * 16 + bn_row(lane),
						  bc = kk * 16 + bn_col(lane);
					ldsm4(b, kt + swz<HD>(br, bc));
					mma<T>(s[2 * p], qa, b);
					mma<T>(s[2 * p + 1], qa, b + 2);
					ldsm4(b, vt + swz<HD>(br, bc));
					mma<T>(dp[2 * p], ga, b);
					mma<T>(dp[2 * p + 1], ga, b + 2);
				}
			}
			const bool full = kb >= lomax && kb + BC - 1 <= t0;
#pragma unroll
			for (int nb = 0; nb < BC / 8; nb++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int c =
						kb + nb * 8 + 2 * tg + (e & 1);
					const bool r1e = e >= 2;
					const int lo = r1e ? lo1 : lo0;
					const int hi = r1e ? hi1 : hi0;
					float p = exp2f(s[nb][e] * a.sl2 -
							(r1e ? ls1 : ls0));
					if (!full && (c < lo || c > hi))
						p = 0;
					s[nb][e] = p * (dp[nb][e] -
							(r1e ? d1 : d0));
				}
				/* dq += dS K (K read transposed: keys are k) */
#pragma unroll
			for (int kk = 0; kk < BC / 16; kk++) {
				uint32_t pa[4];
				pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
				pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
				pa[2] = pack2<T>(s[2 * kk + 1][0],
						 s[2 * kk + 1][1]);
				pa[3] = pack2<T>(s[2 * kk + 1][2],
						 s[2 * kk + 1][3]);
#pragma unroll
				for (int dd = 0; dd < HD / 16; dd++) {
					uint32_t b[4];
					ldsm4t(b,
					       kt + swz<HD>(kk * 16 +
								    a_row(lane),
							    dd * 16 +
								    a_col(lane)));
					mma<T>(acc[2 * dd], pa, b);
					mma<T>(acc[2 * dd + 1], pa, b + 2);
				}
			}
		}
		__syncthreads();
	}
	frag_to_smem<T, HD>(qs, wr, acc, a.scale, a.scale);
	__syncthreads();
	store_tile<T, HD, BR>(dq + qoff, qs, qst, rows);
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
	__shared__ float lse_s[2][BQ], d_s[2][BQ];
	__shared__ int lo_s[2][BQ], last_s;
	const int s0 = blockIdx.x * BC, kh = blockIdx.y, n = blockIdx.z;
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
		if (fa_lo(t, pn[t]) <= slast)
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
			lo_s[b][tid] = ok ? fa_lo(t, pn[t]) : 0x7fffffff;
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
			/* element (key k0 / k1, query tq0 + c) */
#pragma unroll
			for (int x = 0; x < BQ / 8; x++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int c = x * 8 + 2 * tg + (e & 1);
					const int key = e < 2 ? k0 : k1;
					const int t = tq0 + c;
					float p = exp2f(st[x][e] * a.sl2 -
							lse_s[b][c]);
					if (key > t || lo_s[b][c] > key)
						p = 0;
					st[x][e] = p;
					pt[x][e] = p * (pt[x][e] - d_s[b][c]);
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

template <typename K> cudaError_t smem_optin(K kern, size_t bytes)
{
	if (bytes <= 48 * 1024)
		return cudaSuccess;
	return cudaFuncSetAttribute(
		kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* Query rows per dk/dv iteration: 32 for hd 128 keeps the two 16 x 128
 * F32 accumulators (dk, dv) and S^T, dP^T within the registers. */
template <int HD> struct fa_bq {
	static const int v = HD > 64 ? 32 : 64;
};

template <typename T, int HD>
cudaError_t fa_fwd_run(cudaStream_t st, const fa_dims &a, const void *q,
		       const void *k, const void *v, const void *pos, void *o,
		       float *lse)
{
	const size_t sm = (size_t)(BR + 4 * BC) * HD * sizeof(T);
	cudaError_t e = smem_optin(fa_fwd_k<T, HD>, sm);
	if (e != cudaSuccess)
		return e;
	const dim3 grid((unsigned)((a.S + BR - 1) / BR), (unsigned)a.Hq,
			(unsigned)a.N);
	fa_fwd_k<T, HD><<<grid, FT, sm, st>>>(
		a, (const T *)q, (const T *)k, (const T *)v,
		(const int32_t *)pos, (T *)o, lse);
	return cudaGetLastError();
}

template <typename T, int HD>
cudaError_t fa_bwd_run(cudaStream_t st, const fa_dims &a, const void *q,
		       const void *k, const void *v, const void *pos,
		       const void *o, const float *lse, const void *dout,
		       void *dq, void *dk, void *dv, float *Dt)
{
	const int64_t rows = (int64_t)a.N * a.S * a.Hq;
	fa_dt_k<T, HD><<<mgc_blocks(rows * (HD / 8), 256), 256, 0, st>>>(
		a, (const T *)o, (const T *)dout, Dt);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return e;
	if (dq) {
		const size_t sm = (size_t)(2 * BR + 4 * BC) * HD * sizeof(T);
		e = smem_optin(fa_dq_k<T, HD>, sm);
		if (e != cudaSuccess)
			return e;
		const dim3 grid((unsigned)((a.S + BR - 1) / BR), (unsigned)a.Hq,
				(unsigned)a.N);
		fa_dq_k<T, HD><<<grid, FT, sm, st>>>(
			a, (const T *)q, (const T *)k, (const T *)v,
			(const int32_t *)pos, lse, Dt, (const T *)dout,
			(T *)dq);
		e = cudaGetLastError();
		if (e != cudaSuccess)
			return e;
	}
	if (dk || dv) {
		const int BQ = fa_bq<HD>::v;
		const size_t sm = (size_t)(2 * BC + 4 * BQ) * HD * sizeof(T);
		e = smem_optin(fa_dkv_k<T, HD, BQ>, sm);
		if (e != cudaSuccess)
			return e;
		const dim3 grid((unsigned)((a.S + BC - 1) / BC),
				(unsigned)a.Hkv, (unsigned)a.N);
		fa_dkv_k<T, HD, BQ><<<grid, FT, sm, st>>>(
			a, (const T *)q, (const T *)k, (const T *)v,
			(const int32_t *)pos, lse, Dt, (const T *)dout, (T *)dk,
			(T *)dv);
		e = cudaGetLastError();
	}
	return e;
}

fa_dims fa_make(const struct mg_tensor *q, const struct mg_tensor *k,
		double scale)
{
	fa_dims a;
	a.N = (int)q->shape[0];
	a.S = (int)q->shape[1];
	a.Hq = (int)q->shape[2];
	a.Hkv = (int)k->shape[2];
	a.scale = (float)scale;
	a.sl2 = (float)(scale * 1.4426950408889634);
	return a;
}

#define FA_DISPATCH(dt, hd, FN, ...)                                           \
	(dt == MG_F16 ? (hd == 64 ? FN<mgc_f16, 64>(__VA_ARGS__)               \
				  : FN<mgc_f16, 128>(__VA_ARGS__))             \
	 : hd == 64   ? FN<mgc_bf16, 64>(__VA_ARGS__)                          \
		      : FN<mgc_bf16, 128>(__VA_ARGS__))
} // namespace

extern "C" bool mgc_flash_attention_fits(const struct mg_tensor *q,
					 const struct mg_tensor *const *t,
					 int nt)
{
	if (q->dtype != MG_F16 && q->dtype != MG_BF16)
		return false;
	if (q->shape[3] != 64 && q->shape[3] != 128)
		return false;
	for (int i = 0; i < nt; i++)
		if (t[i] && !mgc_aligned16(t[i]->data))
			return false;
	return true;
}

extern "C" int
mgc_flash_attention(struct mg_ctx *ctx, const struct mg_tensor *q,
		    const struct mg_tensor *k, const struct mg_tensor *v,
		    const struct mg_tensor *positions, double scale,
		    struct mg_tensor *o, struct mg_tensor *lse)
{
	const fa_dims a = fa_make(q, k, scale);
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
	const struct mg_tensor *positions, double scale,
	const struct mg_tensor *o, const struct mg_tensor *lse,
	const struct mg_tensor *dout, struct mg_tensor *dq,
	struct mg_tensor *dk, struct mg_tensor *dv)
{
	const fa_dims a = fa_make(q, k, scale);
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
