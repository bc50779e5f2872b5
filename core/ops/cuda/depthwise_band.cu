/*
 * depthwise_band.cu - depthwise 3x3 convolutions (padding 1, stride 1 or
 * 2) over bands of rows staged in shared memory: the kernels behind
 * MobileNetV2's large planes (250 x 250 ... 16 x 16 at 500 px).
 *
 * A block owns R consecutive output rows of one plane. The input rows
 * those outputs read are contiguous in global memory, so the block copies
 * them verbatim into shared memory with 16-byte loads (the flat kernels
 * of depthwise.cu read 2-byte elements one dependent load at a time and
 * reached a third of the bandwidth). A thread then computes VB rows by 2
 * columns of outputs from (VB - 1) * S + 3 staged rows of 4 (stride 1) or
 * 5 (stride 2) values, instead of 9 reads an output; positions outside
 * the plane read as zero.
 *
 * Backward data with stride 1 is the forward pass over dy with the
 * window flipped; stride 2 computes 2 x 2 blocks of dx from 4 dy values.
 *
 * Channel multiplier M = K / C (groups == C): output channel k reads
 * input channel k / M, so the 1-channel stem (C = 1, K = 32) runs here
 * too. Backward data is only for M == 1 (MobileNetV2's stem needs none).
 *
 * The weight gradient sums per block in the arithmetic type (F32 for
 * F16/BF16/F32) over one band, then in double across the bands of the
 * block's samples, then block-wide in a fixed order; depthwise.cu's final
 * kernel adds a channel's sample slices in order: bitwise reproducible.
 */
#include "ops/cuda/cuda_reduce.cuh"

namespace
{
const int BAND_THREADS = 256;
const int BAND_OUTPUTS = 4096;		/* outputs a block aims for */
const int VB = 4;			/* outputs a thread computes, stacked */
const size_t BAND_SMEM = 24 * 1024;	/* a band's aim: several blocks an SM */
const size_t BAND_SMEM_MAX = 40 * 1024; /* one strip, under the 48 KB */
/* Weight-gradient blocks to aim for: twice what a 132-SM H100 holds at
 * 8 blocks an SM. */
const int FILTER_BLOCKS = 2 * 132 * 8;

/* Geometry of one band pass: outputs (OH, OW) from inputs (IH, IW). */
struct band_geom {
	int IH, IW, OH, OW; /* the pass's input and output planes */
	int R, bands;	    /* rows per band (a multiple of VB), bands */
	int K, M;	    /* output channels, multiplier (K / C) */
	int C;		    /* input channels */
	int64_t planes;	    /* output planes */
};

/*
 * Copy n elements from src into sm with 16-byte loads and stores, from
 * src rounded down to 16 bytes (the copy may include up to 15 bytes
 * either side, inside the same 16-byte blocks as valid data). Returns
 * where src[0] landed, in elements.
 */
template <typename T>
__device__ __forceinline__ int stage(T *sm, const T *src, int64_t n)
{
	if (n <= 0)
		return 0;
	const uintptr_t s = (uintptr_t)src, a = s & ~(uintptr_t)15;
	const uintptr_t e =
		(s + (uintptr_t)n * sizeof(T) + 15) & ~(uintptr_t)15;
	const int nv = (int)((e - a) >> 4);
	const uint4 *g = reinterpret_cast<const uint4 *>(a);
	uint4 *d = reinterpret_cast<uint4 *>(sm);
#pragma unroll 4
	for (int v = threadIdx.x; v < nv; v += blockDim.x)
		d[v] = g[v];
	return (int)((s - a) / sizeof(T));
}

/* Staged rows [h0, h1) of a plane of width W, row h0 at p. */
template <typename T> struct rows_view {
	typedef typename mgc_t<T>::acc A;
	const T *p;
	int h0, h1, W;
	__device__ __forceinline__ A at(int h, int c) const
	{
		return h >= h0 && h < h1 && (unsigned)c < (unsigned)W
			       ? mgc_ld(p, (h - h0) * W + c)
			       : (A)0;
	}
	/* Row h at columns c0 ... c0 + NC - 1. */
	template <int NC>
	__device__ __forceinline__ void row(int h, int c0, A *v) const
	{
		if (h < h0 || h >= h1) {
#pragma unroll
			for (int j = 0; j < NC; j++)
				v[j] = 0;
			return;
		}
		const T *r = p + (h - h0) * W;
#pragma unroll
		for (int j = 0; j < NC; j++)
			v[j] = (unsigned)(c0 + j) < (unsigned)W
				       ? mgc_ld(r, c0 + j)
				       : (A)0;
	}
};

/* Stage input rows [lo, lo + rows) of plane xp (clipped to [0, IH)). */
template <typename T>
__device__ __forceinline__ rows_view<T> stage_rows(T *sm, const T *xp, int lo,
						   int rows, int IH, int IW)
{
	rows_view<T> v;
	v.h0 = lo > 0 ? lo : 0;
	v.h1 = lo + rows < IH ? lo + rows : IH;
	v.W = IW;
	const int64_t n = v.h1 > v.h0 ? (int64_t)(v.h1 - v.h0) * IW : 0;
	v.p = sm + stage(sm, xp + (int64_t)v.h0 * IW, n);
	return v;
}

/* Input rows a band of R outputs reads, forward / flipped stride 1. */
template <int S> __host__ __device__ inline int fwd_rows(int R)
{
	return (R - 1) * S + 3;
}

/* Input (dy) rows a band of R dx rows (from an even row) reads with
 * stride 2. */
__host__ __device__ inline int bwd2_rows(int R)
{
	return (R + 1) / 2 + 1;
}

/*
 * Forward, stride S: y[oh][ow] = b + sum w[i][j] x[oh S - 1 + i][ow S - 1
 * + j]. With FLIP (stride 1 only) the window is w[2 - i][2 - j]: backward
 * data, the pass's input being dy. One block per (band, channel,
 * sample); a thread computes tiles of VB rows by 2 columns.
 */
template <typename T, int S, bool FLIP>
__global__ void __launch_bounds__(BAND_THREADS)
	dw_band_fwd(band_geom g, mgc_fdiv pair_div, const T *__restrict__ in,
		    const T *__restrict__ w, const T *__restrict__ bias,
		    T *__restrict__ out)
{
	typedef typename mgc_t<T>::acc A;
	extern __shared__ __align__(16) unsigned char smraw[];
	/* grid (bands, channels, samples): no 64-bit divisions */
	const int r0 = (int)blockIdx.x * g.R;
	const int rend = g.OH < r0 + g.R ? g.OH : r0 + g.R;
	const int k = (int)blockIdx.y;
	const int64_t n = blockIdx.z, p = n * g.K + k;
	A wk[9];
#pragma unroll
	for (int t = 0; t < 9; t++)
		wk[t] = mgc_ld(w, (int64_t)k * 9 + (FLIP ? 8 - t : t));
	const A b0 = bias ? mgc_ld(bias, k) : (A)0;
	const rows_view<T> x =
		stage_rows(reinterpret_cast<T *>(smraw),
			   in + (n * g.C + k / g.M) * g.IH * g.IW, r0 * S - 1,
			   fwd_rows<S>(rend - r0), g.IH, g.IW);
	__syncthreads();
	T *op = out + p * g.OH * g.OW;
	/* work item: a strip of VB rows by 2 columns (ow, ow + 1), which
	 * read NC columns of each input row */
	const int NP = (g.OW + 1) >> 1;
	const int NC = S == 1 ? 4 : 5;
	const uint32_t cnt = (uint32_t)((rend - r0 + VB - 1) / VB * NP);
	for (uint32_t e = threadIdx.x; e < cnt; e += blockDim.x) {
		const int strip = (int)mgc_div(pair_div, e);
		const int ow = 2 * (int)(e - (uint32_t)strip * NP);
		const int oh0 = r0 + strip * VB;
		A acc[VB][2];
#pragma unroll
		for (int v = 0; v < VB; v++)
			acc[v][0] = acc[v][1] = b0;
#pragma unroll
		for (int ii = 0; ii < (VB - 1) * S + 3; ii++) {
			A c[NC];
			x.template row<NC>(oh0 * S - 1 + ii, ow * S - 1, c);
#pragma unroll
			for (int v = 0; v < VB; v++) {
				const int i = ii - v * S;
				if (i >= 0 && i < 3) {
					acc[v][0] += wk[i * 3] * c[0] +
						     wk[i * 3 + 1] * c[1] +
						     wk[i * 3 + 2] * c[2];
					acc[v][1] += wk[i * 3] * c[S] +
						     wk[i * 3 + 1] * c[S + 1] +
						     wk[i * 3 + 2] * c[S + 2];
				}
			}
		}
		const bool right = ow + 1 < g.OW;
#pragma unroll
		for (int v = 0; v < VB; v++)
			if (oh0 + v < rend) {
				T *o = op + (int64_t)(oh0 + v) * g.OW + ow;
				o[0] = mgc_t<T>::from(acc[v][0]);
				if (right)
					o[1] = mgc_t<T>::from(acc[v][1]);
			}
	}
}

/*
 * Backward data, stride 2 (M == 1): dx[h][w] = sum over the taps with
 * h + 1 - i and w + 1 - j even of w[i][j] dy[(h + 1 - i) / 2][(w + 1 - j)
 * / 2]. A thread computes the 2 x 2 block of dx at (2a, 2b), which needs
 * dy at rows a, a + 1 and columns b, b + 1 only (D00 = dy[a][b], ...):
 *   dx[2a][2b]         = w11 D00
 *   dx[2a][2b+1]       = w10 D01 + w12 D00
 *   dx[2a+1][2b]       = w01 D10 + w21 D00
 *   dx[2a+1][2b+1]     = w00 D11 + w02 D10 + w20 D01 + w22 D00
 * so no lane skips taps the others take. Bands start at even rows.
 */
template <typename T>
__global__ void __launch_bounds__(BAND_THREADS)
	dw_band_bwd2(band_geom g, mgc_fdiv bw_div, const T *__restrict__ dy,
		     const T *__restrict__ w, T *__restrict__ dx)
{
	typedef typename mgc_t<T>::acc A;
	extern __shared__ __align__(16) unsigned char smraw[];
	const int r0 = (int)blockIdx.x * g.R;
	const int rend = g.OH < r0 + g.R ? g.OH : r0 + g.R;
	const int k = (int)blockIdx.y;
	const int64_t p = (int64_t)blockIdx.z * g.K + k;
	A wk[9];
#pragma unroll
	for (int t = 0; t < 9; t++)
		wk[t] = mgc_ld(w, (int64_t)k * 9 + t);
	const rows_view<T> d =
		stage_rows(reinterpret_cast<T *>(smraw), dy + p * g.IH * g.IW,
			   r0 >> 1, bwd2_rows(rend - r0), g.IH, g.IW);
	__syncthreads();
	T *op = dx + p * g.OH * g.OW;
	const int nb = (g.OW + 1) >> 1;
	const uint32_t cnt = (uint32_t)(((rend - r0 + 1) >> 1) * nb);
	for (uint32_t e = threadIdx.x; e < cnt; e += blockDim.x) {
		const int ai = (int)mgc_div(bw_div, e);
		const int b = (int)(e - (uint32_t)ai * nb);
		const int a = (r0 >> 1) + ai;
		const A d00 = d.at(a, b), d01 = d.at(a, b + 1),
			d10 = d.at(a + 1, b), d11 = d.at(a + 1, b + 1);
		const int h = 2 * a, x0 = 2 * b;
		T *row = op + (int64_t)h * g.OW + x0;
		const bool right = x0 + 1 < g.OW, down = h + 1 < rend;
		row[0] = mgc_t<T>::from(wk[4] * d00);
		if (right)
			row[1] = mgc_t<T>::from(wk[3] * d01 + wk[5] * d00);
		if (down) {
			row[g.OW] = mgc_t<T>::from(wk[1] * d10 + wk[7] * d00);
			if (right)
				row[g.OW + 1] = mgc_t<T>::from(
					wk[0] * d11 + wk[2] * d10 +
					wk[6] * d01 + wk[8] * d00);
		}
	}
}

/*
 * Weight gradient: block (s, k) sums dy[n, k] * x[n, k / M] over the
 * samples n of slice s, every band of each plane, into part[(k * NS +
 * s) * 9 + t]. The x rows and the dy rows of a band are staged.
 */
template <typename T, int S>
__global__ void __launch_bounds__(BAND_THREADS)
	dw_band_filter(band_geom g, mgc_fdiv pair_div, int64_t N, int chunk,
		       size_t dy_at, const T *__restrict__ x,
		       const T *__restrict__ dy, double *part)
{
	typedef typename mgc_t<T>::acc A;
	extern __shared__ __align__(16) unsigned char smraw[];
	__shared__ double red[32];
	T *smx = reinterpret_cast<T *>(smraw);
	T *smd = reinterpret_cast<T *>(smraw + dy_at);
	const int k = blockIdx.y, s = blockIdx.x, NS = gridDim.x;
	double acc[9];
#pragma unroll
	for (int t = 0; t < 9; t++)
		acc[t] = 0;
	const int64_t n1 =
		(int64_t)(s + 1) * chunk < N ? (int64_t)(s + 1) * chunk : N;
	for (int64_t n = (int64_t)s * chunk; n < n1; n++) {
		const T *xp = x + (n * g.C + k / g.M) * g.IH * g.IW;
		const T *dyp = dy + (n * g.K + k) * g.OH * g.OW;
		for (int r0 = 0; r0 < g.OH; r0 += g.R) {
			const int rend = g.OH < r0 + g.R ? g.OH : r0 + g.R;
			__syncthreads(); /* the previous band is consumed */
			const rows_view<T> xv =
				stage_rows(smx, xp, r0 * S - 1,
					   fwd_rows<S>(rend - r0), g.IH, g.IW);
			const T *dv = smd + stage(smd, dyp + (int64_t)r0 * g.OW,
						  (int64_t)(rend - r0) * g.OW);
			__syncthreads();
			A a[9];
#pragma unroll
			for (int t = 0; t < 9; t++)
				a[t] = 0;
			const int NP = (g.OW + 1) >> 1;
			const int NC = S == 1 ? 4 : 5;
			const uint32_t cnt =
				(uint32_t)((rend - r0 + VB - 1) / VB * NP);
			for (uint32_t e = threadIdx.x; e < cnt;
			     e += blockDim.x) {
				const int strip = (int)mgc_div(pair_div, e);
				const int ow =
					2 * (int)(e - (uint32_t)strip * NP);
				const int oh0 = r0 + strip * VB;
				const bool right = ow + 1 < g.OW;
				A d[VB][2];
#pragma unroll
				for (int v = 0; v < VB; v++) {
					const bool in = oh0 + v < rend;
					const T *dr =
						dv + (oh0 + v - r0) * g.OW + ow;
					d[v][0] = in ? mgc_ld(dr, 0) : (A)0;
					d[v][1] = in && right ? mgc_ld(dr, 1)
							      : (A)0;
				}
#pragma unroll
				for (int ii = 0; ii < (VB - 1) * S + 3; ii++) {
					A c[NC];
					xv.template row<NC>(oh0 * S - 1 + ii,
							    ow * S - 1, c);
#pragma unroll
					for (int v = 0; v < VB; v++) {
						const int i = ii - v * S;
						if (i >= 0 && i < 3) {
#pragma unroll
							for (int j = 0; j < 3;
							     j++)
								a[i * 3 + j] +=
									d[v]
									 [0] * c[j] +
									d[v]
									 [1] * c[S +
										 j];
						}
					}
				}
			}
#pragma unroll
			for (int t = 0; t < 9; t++)
				acc[t] += (double)a[t];
		}
	}
#pragma unroll
	for (int t = 0; t < 9; t++) {
		const double r = mgc_block_sum(acc[t], red);
		if (threadIdx.x == 0)
			part[((int64_t)k * NS + s) * 9 + t] = r;
	}
}

/* Shared memory of a pass with R-row bands, elements of es bytes: the
 * staged rows (and for the weight gradient the dy rows) plus the slack
 * of the 16-byte copies. */
static size_t band_smem(int pass, int S, int R, int IW, int OW, size_t es)
{
	if (pass == MGC_DW_BWD_DATA && S == 2)
		return (size_t)bwd2_rows(R) * IW * es + 32;
	const size_t x =
		(size_t)(S == 1 ? fwd_rows<1>(R) : fwd_rows<2>(R)) * IW * es +
		32;
	if (pass != MGC_DW_BWD_FILTER)
		return x;
	return ((x + 15) & ~(size_t)15) + (size_t)R * OW * es + 32;
}

/* Offset of the dy rows in the weight gradient's shared memory. */
static size_t filter_dy_at(int S, int R, int IW, size_t es)
{
	return (band_smem(MGC_DW_FWD, S, R, IW, 0, es) + 15) & ~(size_t)15;
}

/* Rows per band (a multiple of VB or all OH), 0 when even VB rows do not
 * fit in shared memory. */
static int band_r(int pass, int S, int OH, int OW, int IW, size_t es)
{
	int R = BAND_OUTPUTS / OW;
	if (R >= OH)
		R = OH;
	else
		R = R / VB * VB > VB ? R / VB * VB : VB;
	while (R > VB && band_smem(pass, S, R, IW, OW, es) > BAND_SMEM)
		R -= VB;
	if (band_smem(pass, S, R, IW, OW, es) > BAND_SMEM_MAX)
		return 0;
	return R;
}

static band_geom make(const struct mgc_conv_geom *g, bool bwd, int R)
{
	band_geom b;
	b.IH = (int)(bwd ? g->OH : g->H);
	b.IW = (int)(bwd ? g->OW : g->W);
	b.OH = (int)(bwd ? g->H : g->OH);
	b.OW = (int)(bwd ? g->W : g->OW);
	b.R = R;
	b.bands = (b.OH + R - 1) / R;
	b.C = (int)g->C;
	b.K = (int)g->K;
	b.M = (int)(g->K / g->C);
	b.planes = g->N * (bwd ? g->C : g->K);
	return b;
}

/* Grid of a pass: (bands, channels, samples). */
static dim3 band_grid(const band_geom &b, int64_t N)
{
	return dim3((unsigned)b.bands, (unsigned)(b.planes / N), (unsigned)N);
}

/* Threads for a band of `work` items: small planes (16 x 16: 64 strips)
 * get small blocks rather than idle threads. */
static int band_threads(int work)
{
	const int t = (work + 31) / 32 * 32;
	return t < 64 ? 64 : (t > BAND_THREADS ? BAND_THREADS : t);
}

/* Work items of a band: strips of VB rows by column pairs; the divisor
 * of the flat item index is the pairs a row. */
static mgc_fdiv pair_div(const band_geom &b)
{
	return mgc_fdiv_make((uint32_t)((b.OW + 1) / 2));
}

static int band_items(const band_geom &b)
{
	return (b.R + VB - 1) / VB * ((b.OW + 1) / 2);
}

template <typename T>
static void fwd(cudaStream_t st, const struct mgc_conv_geom *g, int R,
		const void *x, const void *w, const void *bias, void *y)
{
	const band_geom b = make(g, false, R);
	const size_t smem =
		band_smem(MGC_DW_FWD, (int)g->sh, R, b.IW, b.OW, sizeof(T));
	const dim3 grid = band_grid(b, g->N);
	const int th = band_threads(band_items(b));
	if (g->sh == 1)
		dw_band_fwd<T, 1, false><<<grid, th, smem, st>>>(
			b, pair_div(b), (const T *)x, (const T *)w,
			(const T *)bias, (T *)y);
	else
		dw_band_fwd<T, 2, false><<<grid, th, smem, st>>>(
			b, pair_div(b), (const T *)x, (const T *)w,
			(const T *)bias, (T *)y);
}

template <typename T>
static void bwd_data(cudaStream_t st, const struct mgc_conv_geom *g, int R,
		     const void *w, const void *dy, void *dx)
{
	const band_geom b = make(g, true, R);
	const size_t smem = band_smem(MGC_DW_BWD_DATA, (int)g->sh, R, b.IW,
				      b.OW, sizeof(T));
	const dim3 grid = band_grid(b, g->N);
	if (g->sh == 1)
		dw_band_fwd<T, 1, true>
			<<<grid, band_threads(band_items(b)), smem, st>>>(
				b, pair_div(b), (const T *)dy, (const T *)w,
				NULL, (T *)dx);
	else
		dw_band_bwd2<T>
			<<<grid, band_threads((b.R + 1) / 2 * ((b.OW + 1) / 2)),
			   smem, st>>>(
				b, mgc_fdiv_make((uint32_t)((b.OW + 1) / 2)),
				(const T *)dy, (const T *)w, (T *)dx);
}

/* Sample slices per channel: enough blocks to fill the GPU twice. */
static int filter_slices(const struct mgc_conv_geom *g)
{
	int64_t ns = (FILTER_BLOCKS + g->K - 1) / g->K;
	if (ns > g->N)
		ns = g->N;
	if (ns > 64)
		ns = 64;
	return (int)(ns > 0 ? ns : 1);
}

template <typename T>
static void filter(cudaStream_t st, const struct mgc_conv_geom *g, int R,
		   const void *x, const void *dy, double *part, int *NS)
{
	const band_geom b = make(g, false, R);
	const int ns = filter_slices(g);
	const int chunk = (int)((g->N + ns - 1) / ns);
	const int used = (int)((g->N + chunk - 1) / chunk);
	const dim3 grid((unsigned)used, (unsigned)g->K);
	const int S = (int)g->sh;
	const size_t smem =
		band_smem(MGC_DW_BWD_FILTER, S, R, b.IW, b.OW, sizeof(T));
	const size_t dy_at = filter_dy_at(S, R, b.IW, sizeof(T));
	*NS = used;
	if (S == 1)
		dw_band_filter<T, 1><<<grid, BAND_THREADS, smem, st>>>(
			b, pair_div(b), g->N, chunk, dy_at, (const T *)x,
			(const T *)dy, part);
	else
		dw_band_filter<T, 2><<<grid, BAND_THREADS, smem, st>>>(
			b, pair_div(b), g->N, chunk, dy_at, (const T *)x,
			(const T *)dy, part);
}
} // namespace

/* Rows per band for the pass, or 0 when the band kernels do not apply:
 * 3x3, padding 1, square stride 1 or 2, outputs at least 16 wide, a
 * channel multiplier only forward and for the weight gradient. */
extern "C" int mgc_dw_band_rows(const struct mgc_conv_geom *g, enum mg_dtype dt,
				int pass)
{
	if (g->kh != 3 || g->kw != 3 || g->ph != 1 || g->pw != 1 ||
	    g->sh != g->sw || (g->sh != 1 && g->sh != 2) || g->groups != g->C ||
	    g->K % g->C != 0 || (pass == MGC_DW_BWD_DATA && g->K != g->C))
		return 0;
	const bool bwd = pass == MGC_DW_BWD_DATA;
	const int64_t OH = bwd ? g->H : g->OH, OW = bwd ? g->W : g->OW;
	const int64_t IW = bwd ? g->OW : g->W;
	if (OW < 16 || g->N * g->K * OH * OW >= ((int64_t)1 << 31) ||
	    g->H * g->W >= ((int64_t)1 << 30) || g->N > 65535 || g->K > 65535)
		return 0;
	return band_r(pass, (int)g->sh, (int)OH, (int)OW, (int)IW,
		      mg_dtype_size(dt));
}

extern "C" int mgc_dw_band_fwd(struct mg_ctx *ctx,
			       const struct mgc_conv_geom *g, int R,
			       enum mg_dtype dt, const void *x, const void *w,
			       const void *bias, void *y)
{
	MGC_DISPATCH("conv2d (depthwise band)", dt, fwd, mgc_stream(ctx), g, R,
		     x, w, bias, y);
	return mgc_check_launch("conv2d (depthwise band)");
}

extern "C" int mgc_dw_band_bwd_data(struct mg_ctx *ctx,
				    const struct mgc_conv_geom *g, int R,
				    enum mg_dtype dt, const void *w,
				    const void *dy, void *dx)
{
	MGC_DISPATCH("conv2d_backward (depthwise band dx)", dt, bwd_data,
		     mgc_stream(ctx), g, R, w, dy, dx);
	return mgc_check_launch("conv2d_backward (depthwise band dx)");
}

extern "C" int mgc_dw_band_filter_slices(const struct mgc_conv_geom *g)
{
	return filter_slices(g);
}

extern "C" int mgc_dw_band_bwd_filter(struct mg_ctx *ctx,
				      const struct mgc_conv_geom *g, int R,
				      enum mg_dtype dt, const void *x,
				      const void *dy, double *part, int *NS)
{
	MGC_DISPATCH("conv2d_backward (depthwise band dw)", dt, filter,
		     mgc_stream(ctx), g, R, x, dy, part, NS);
	return mgc_check_launch("conv2d_backward (depthwise band dw)");
}
