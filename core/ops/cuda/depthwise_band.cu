/*
 * depthwise_band.cu - depthwise 3x3 convolutions (padding 1, stride 1 or
 * 2) over bands of rows staged in shared memory: the kernels behind
 * MobileNetV2's large planes (250 x 250 ... 16 x 16 at 500 px).
 *
 * A block owns R consecutive output rows of one plane. It copies the
 * input rows those outputs read (with a zero border: one column each
 * side, rows outside the plane) into shared memory in coalesced row
 * sweeps, then every thread computes outputs from shared memory without
 * bounds checks. Global memory is read about once per element instead
 * of nine times through L1 with a division per tap, which is what held
 * the flat kernels of depthwise.cu to a fraction of the bandwidth.
 *
 * Channel multiplier M = K / C (groups == C): output channel k reads
 * input channel k / M, so the 1-channel stem (C = 1, K = 32) runs here
 * too. Backward data is only for M == 1 (MobileNetV2's stem needs none).
 *
 * The weight gradient sums per block in F32 (F64 for F64) over one band,
 * then in double across the bands of a block's samples, then block-wide
 * in a fixed order; the S sample slices of a channel are added in order
 * by depthwise.cu's final kernel: bitwise reproducible.
 */
#include "ops/cuda/cuda_reduce.cuh"

namespace
{
const int BAND_THREADS = 256;
const int BAND_OUTPUTS = 2048; /* outputs a block aims for */
const size_t BAND_SMEM = 24 * 1024;	  /* a band's aim: several blocks an SM */
const size_t BAND_SMEM_MAX = 40 * 1024; /* one row band, under the 48 KB */
/* Weight-gradient blocks to aim for: twice what a 132-SM H100 holds at
 * 8 blocks an SM. */
const int FILTER_BLOCKS = 2 * 132 * 8;

/* Geometry of one band pass: outputs (OH, OW) from inputs (IH, IW). */
struct band_geom {
	int IH, IW, OH, OW; /* the pass's input and output planes */
	int R, bands;	    /* rows per band, bands per plane */
	int K, M;	    /* output channels, multiplier (K / C) */
	int C;		    /* input channels */
	int64_t planes;	    /* output planes N * K */
};

/* Input rows [lo, lo + rows) a band of outputs starting at r0 reads. */
template <bool BWD, int S>
__device__ __forceinline__ int band_lo(int r0)
{
	if (!BWD)
		return r0 * S - 1;
	return S == 1 ? r0 - 1 : ((r0 - 1) >> 1);
}

template <bool BWD, int S> __host__ __device__ inline int band_rows(int R)
{
	if (!BWD)
		return (R - 1) * S + 3;
	return S == 1 ? R + 2 : R / 2 + 3;
}

/*
 * Stage input rows [lo, lo + rows) of plane xp (IH x IW) into sm as
 * rows of IW + 2 values, column c at c + 1, zeros outside the plane.
 */
template <typename T, typename A>
__device__ void stage(A *sm, const T *__restrict__ xp, int lo, int rows,
		      int IH, int IW)
{
	const int width = IW + 2, lane = threadIdx.x & 31,
		  warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int r = warp; r < rows; r += nw) {
		const int h = lo + r;
		A *row = sm + r * width;
		if (h < 0 || h >= IH) {
			for (int c = lane; c < width; c += 32)
				row[c] = 0;
			continue;
		}
		const T *src = xp + (int64_t)h * IW;
		for (int c = lane; c < IW; c += 32)
			row[c + 1] = mgc_ld(src, c);
		if (lane == 0) {
			row[0] = 0;
			row[IW + 1] = 0;
		}
	}
}

/* Output (oh, ow) of the pass from the staged rows (first row lo). */
template <bool BWD, int S, typename A>
__device__ __forceinline__ A band_out(const A *sm, int width, int lo, int oh,
				      int ow, const A *wk)
{
	A acc = 0;
	if constexpr (!BWD) {
		const A *p = sm + (oh * S - 1 - lo) * width + ow * S;
#pragma unroll
		for (int i = 0; i < 3; i++)
#pragma unroll
			for (int j = 0; j < 3; j++)
				acc += wk[i * 3 + j] * p[i * width + j];
	} else if constexpr (S == 1) {
		/* dx[h][w] = sum w[i][j] dy[h + 1 - i][w + 1 - j] */
		const A *p = sm + (oh + 1 - lo) * width + ow + 2;
#pragma unroll
		for (int i = 0; i < 3; i++)
#pragma unroll
			for (int j = 0; j < 3; j++)
				acc += wk[i * 3 + j] * p[-i * width - j];
	} else {
		/* stride 2: only taps with h + 1 - i and w + 1 - j even */
#pragma unroll
		for (int i = 0; i < 3; i++) {
			const int th = oh + 1 - i;
			if (th & 1)
				continue;
			const A *p = sm + ((th >> 1) - lo) * width + 1;
#pragma unroll
			for (int j = 0; j < 3; j++) {
				const int tw = ow + 1 - j;
				if (!(tw & 1))
					acc += wk[i * 3 + j] * p[tw >> 1];
			}
		}
	}
	return acc;
}

/*
 * Forward (BWD false: y from x) or backward data (BWD true, M == 1: dx
 * from dy, the pass's "input" being dy). One block per (plane, band).
 */
template <typename T, bool BWD, int S>
__global__ void __launch_bounds__(BAND_THREADS)
	dw_band(band_geom g, mgc_fdiv ow_div, const T *__restrict__ in,
		const T *__restrict__ w, const T *__restrict__ bias,
		T *__restrict__ out)
{
	typedef typename mgc_t<T>::acc A;
	extern __shared__ __align__(16) unsigned char smraw[];
	A *sm = reinterpret_cast<A *>(smraw);
	const int64_t blk = blockIdx.x;
	const int64_t p = blk / g.bands; /* output plane n * K + k */
	const int r0 = (int)(blk - p * g.bands) * g.R;
	const int R = g.OH - r0 < g.R ? g.OH - r0 : g.R;
	const int64_t n = p / g.K;
	const int k = (int)(p - n * g.K);
	const int64_t ip = n * g.C + k / g.M;
	A wk[9];
#pragma unroll
	for (int t = 0; t < 9; t++)
		wk[t] = mgc_ld(w, (int64_t)k * 9 + t);
	const A b0 = bias ? mgc_ld(bias, k) : (A)0;
	const int lo = band_lo<BWD, S>(r0);
	const int width = g.IW + 2;
	stage<T, A>(sm, in + ip * g.IH * g.IW, lo, band_rows<BWD, S>(R), g.IH,
		    g.IW);
	__syncthreads();
	T *op = out + p * g.OH * g.OW + (int64_t)r0 * g.OW;
	const uint32_t cnt = (uint32_t)(R * g.OW);
	for (uint32_t e = threadIdx.x; e < cnt; e += blockDim.x) {
		const int rr = (int)mgc_div(ow_div, e);
		const int ow = (int)(e - (uint32_t)rr * g.OW);
		const A v = band_out<BWD, S, A>(sm, width, lo, r0 + rr, ow, wk);
		op[e] = mgc_t<T>::from(v + b0);
	}
}

/*
 * Weight gradient: block (s, k) sums dy[n, k] * x[n, k / M] over the
 * samples n of slice s, every band of each plane, into part[(k * NS +
 * s) * 9 + t].
 */
template <typename T, int S>
__global__ void __launch_bounds__(BAND_THREADS)
	dw_band_filter(band_geom g, mgc_fdiv ow_div, int64_t N, int chunk,
		       const T *__restrict__ x, const T *__restrict__ dy,
		       double *part)
{
	typedef typename mgc_t<T>::acc A;
	extern __shared__ __align__(16) unsigned char smraw[];
	__shared__ double red[32];
	A *sm = reinterpret_cast<A *>(smraw);
	const int k = blockIdx.y, s = blockIdx.x, NS = gridDim.x;
	const int width = g.IW + 2;
	double acc[9];
#pragma unroll
	for (int t = 0; t < 9; t++)
		acc[t] = 0;
	const int64_t n1 = (int64_t)(s + 1) * chunk < N ? (int64_t)(s + 1) * chunk
						      : N;
	for (int64_t n = (int64_t)s * chunk; n < n1; n++) {
		const T *xp = x + (n * g.C + k / g.M) * g.IH * g.IW;
		const T *dyp = dy + (n * g.K + k) * g.OH * g.OW;
		for (int r0 = 0; r0 < g.OH; r0 += g.R) {
			const int R = g.OH - r0 < g.R ? g.OH - r0 : g.R;
			const int lo = band_lo<false, S>(r0);
			__syncthreads(); /* the previous band is consumed */
			stage<T, A>(sm, xp, lo, band_rows<false, S>(R), g.IH,
				    g.IW);
			__syncthreads();
			A a[9];
#pragma unroll
			for (int t = 0; t < 9; t++)
				a[t] = 0;
			const uint32_t cnt = (uint32_t)(R * g.OW);
			const T *d = dyp + (int64_t)r0 * g.OW;
			for (uint32_t e = threadIdx.x; e < cnt;
			     e += blockDim.x) {
				const int rr = (int)mgc_div(ow_div, e);
				const int ow = (int)(e - (uint32_t)rr * g.OW);
				const A dv = mgc_ld(d, e);
				const A *p = sm + (rr * S) * width + ow * S;
#pragma unroll
				for (int i = 0; i < 3; i++)
#pragma unroll
					for (int j = 0; j < 3; j++)
						a[i * 3 + j] +=
							dv * p[i * width + j];
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

/* Rows per band for a pass over OW-wide outputs whose staged input rows
 * are IW + 2 wide; 0 when even one row does not fit. */
template <bool BWD, int S>
static int band_r(int OH, int OW, int IW, size_t es)
{
	const size_t row = (size_t)(IW + 2) * es;
	if (band_rows<BWD, S>(1) * row > BAND_SMEM_MAX)
		return 0;
	int R = BAND_OUTPUTS / OW;
	if (R < 1)
		R = 1;
	if (R > OH)
		R = OH;
	while (R > 1 && band_rows<BWD, S>(R) * row > BAND_SMEM)
		R--;
	return R;
}

template <bool BWD, int S>
static size_t band_smem(int R, int IW, size_t es)
{
	return (size_t)band_rows<BWD, S>(R) * (IW + 2) * es;
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

template <typename T, bool BWD, int S>
static void run(cudaStream_t st, const struct mgc_conv_geom *g, int R,
		const void *in, const void *w, const void *bias, void *out)
{
	typedef typename mgc_t<T>::acc A;
	const band_geom b = make(g, BWD, R);
	const size_t smem = band_smem<BWD, S>(R, b.IW, sizeof(A));
	const int64_t blocks = b.planes * b.bands;
	dw_band<T, BWD, S><<<(unsigned)blocks, BAND_THREADS, smem, st>>>(
		b, mgc_fdiv_make((uint32_t)b.OW), (const T *)in, (const T *)w,
		(const T *)bias, (T *)out);
}

template <typename T>
static void fwd(cudaStream_t st, const struct mgc_conv_geom *g, int R,
		const void *x, const void *w, const void *b, void *y)
{
	if (g->sh == 1)
		run<T, false, 1>(st, g, R, x, w, b, y);
	else
		run<T, false, 2>(st, g, R, x, w, b, y);
}

template <typename T>
static void bwd_data(cudaStream_t st, const struct mgc_conv_geom *g, int R,
		     const void *w, const void *dy, void *dx)
{
	if (g->sh == 1)
		run<T, true, 1>(st, g, R, dy, w, NULL, dx);
	else
		run<T, true, 2>(st, g, R, dy, w, NULL, dx);
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
	typedef typename mgc_t<T>::acc A;
	const band_geom b = make(g, false, R);
	const int ns = filter_slices(g);
	const int chunk = (int)((g->N + ns - 1) / ns);
	const int used = (int)((g->N + chunk - 1) / chunk);
	const dim3 grid((unsigned)used, (unsigned)g->K);
	const mgc_fdiv od = mgc_fdiv_make((uint32_t)b.OW);
	*NS = used;
	if (g->sh == 1)
		dw_band_filter<T, 1>
			<<<grid, BAND_THREADS,
			   band_smem<false, 1>(R, b.IW, sizeof(A)), st>>>(
				b, od, g->N, chunk, (const T *)x,
				(const T *)dy, part);
	else
		dw_band_filter<T, 2>
			<<<grid, BAND_THREADS,
			   band_smem<false, 2>(R, b.IW, sizeof(A)), st>>>(
				b, od, g->N, chunk, (const T *)x,
				(const T *)dy, part);
}

static size_t acc_size(enum mg_dtype dt)
{
	return dt == MG_F64 ? sizeof(double) : sizeof(float);
}
} // namespace

/* Rows per band for the pass, or 0 when the band kernels do not apply:
 * 3x3, padding 1, square stride 1 or 2, outputs at least 16 wide, a
 * channel multiplier only forward and for the weight gradient. */
extern "C" int mgc_dw_band_rows(const struct mgc_conv_geom *g,
				enum mg_dtype dt, int pass)
{
	if (g->kh != 3 || g->kw != 3 || g->ph != 1 || g->pw != 1 ||
	    g->sh != g->sw || (g->sh != 1 && g->sh != 2) ||
	    g->groups != g->C || g->K % g->C != 0 ||
	    (pass == MGC_DW_BWD_DATA && g->K != g->C))
		return 0;
	const bool bwd = pass == MGC_DW_BWD_DATA;
	const int64_t OH = bwd ? g->H : g->OH, OW = bwd ? g->W : g->OW;
	const int64_t IW = bwd ? g->OW : g->W;
	if (OW < 16 || g->N * g->K * OH * OW >= ((int64_t)1 << 31))
		return 0;
	const size_t es = acc_size(dt);
	if (bwd)
		return g->sh == 1 ? band_r<true, 1>((int)OH, (int)OW, (int)IW, es)
				  : band_r<true, 2>((int)OH, (int)OW, (int)IW, es);
	return g->sh == 1 ? band_r<false, 1>((int)OH, (int)OW, (int)IW, es)
			  : band_r<false, 2>((int)OH, (int)OW, (int)IW, es);
}

extern "C" int mgc_dw_band_fwd(struct mg_ctx *ctx,
			       const struct mgc_conv_geom *g, int R,
			       enum mg_dtype dt, const void *x, const void *w,
			       const void *bias, void *y)
{
	MGC_DISPATCH("conv2d (depthwise band)", dt, fwd, mgc_stream(ctx), g,
		     R, x, w, bias, y);
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
