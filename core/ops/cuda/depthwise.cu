/*
 * depthwise.cu - depthwise convolution (groups == C == K, MobileNet's
 * 3x3 layers) with own kernels: a direct forward (one output per
 * thread), a gather backward for dx (one input per thread, no atomics),
 * and a deterministic two-stage reduction for dw (cuda_reduce.cuh: every
 * tap of a channel summed in a fixed order, then added in order). 3x3
 * windows with stride 1 or 2 (all of MobileNetV2's) take a fast path over
 * the flat element index with the stride known at compile time; other
 * windows and strides take the generic kernels. Measured against cuDNN's
 * grouped convolution by tests/gpu/bench_gpu_ops.
 */
#include "ops/cuda/cuda_reduce.cuh"

namespace
{
struct dw_geom {
	int64_t planes;
	int C, H, W, OH, OW, kh, kw, sh, sw, ph, pw;
	mgc_fdiv owd; /* by OW: output position -> row */
};

static dw_geom make(const struct mgc_conv_geom *g)
{
	dw_geom d;
	d.planes = g->N * g->C;
	d.C = (int)g->C;
	d.H = (int)g->H;
	d.W = (int)g->W;
	d.OH = (int)g->OH;
	d.OW = (int)g->OW;
	d.kh = (int)g->kh;
	d.kw = (int)g->kw;
	d.sh = (int)g->sh;
	d.sw = (int)g->sw;
	d.ph = (int)g->ph;
	d.pw = (int)g->pw;
	d.owd = mgc_fdiv_make((uint32_t)(d.OW > 0 ? d.OW : 1));
	return d;
}

/* Grid over (plane tiles, positions): y walks planes, x positions. */
static dim3 plane_grid(int64_t planes, int64_t pos, int threads)
{
	int64_t gx = (pos + threads - 1) / threads;
	int64_t gy = planes < 65535 ? planes : 65535;
	return dim3((unsigned)(gx > 0 ? gx : 1), (unsigned)(gy > 0 ? gy : 1));
}

/* Flat-index helpers of the 3x3 fast path: output (or input) element
 * idx -> plane p, row, column and channel, with multiply-shift divides. */
struct dw_idx {
	mgc_fdiv plane, row, chan; /* by positions per plane, width, C */
	uint32_t total;
};

/*
 * 3x3 forward, stride S (1 or 2) known at compile time: one output per
 * thread over the flat (plane, position) index, so small planes (7x7)
 * fill whole blocks.
 */
template <typename T, int S>
__global__ void __launch_bounds__(256)
	dw_fwd3(dw_geom g, dw_idx ix, const T *__restrict__ x,
		const T *__restrict__ w, const T *__restrict__ bias,
		T *__restrict__ y)
{
	typedef typename mgc_t<T>::acc A;
	for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < ix.total;
	     i += gridDim.x * blockDim.x) {
		const uint32_t p = mgc_div(ix.plane, i);
		const uint32_t q = i - p * ix.plane.d;
		const int oh = (int)mgc_div(ix.row, q);
		const int ow = (int)(q - (uint32_t)oh * ix.row.d);
		const uint32_t c = p - mgc_div(ix.chan, p) * ix.chan.d;
		const T *xp = x + (size_t)p * g.H * g.W;
		const T *wc = w + c * 9;
		const int h0 = oh * S - g.ph, w0 = ow * S - g.pw;
		A acc = bias ? mgc_ld(bias, c) : (A)0;
#pragma unroll
		for (int ti = 0; ti < 3; ti++) {
			const int h = h0 + ti;
			if (h < 0 || h >= g.H)
				continue;
#pragma unroll
			for (int tj = 0; tj < 3; tj++) {
				const int ww = w0 + tj;
				if (ww >= 0 && ww < g.W)
					acc += mgc_ld(wc, ti * 3 + tj) *
					       mgc_ld(xp, h * g.W + ww);
			}
		}
		y[i] = mgc_t<T>::from(acc);
	}
}

/* 3x3 backward data, stride S: a gather per input element; the stride
 * tests are shifts and masks. */
template <typename T, int S>
__global__ void __launch_bounds__(256)
	dw_bwd_data3(dw_geom g, dw_idx ix, const T *__restrict__ w,
		     const T *__restrict__ dy, T *__restrict__ dx)
{
	typedef typename mgc_t<T>::acc A;
	for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < ix.total;
	     i += gridDim.x * blockDim.x) {
		const uint32_t p = mgc_div(ix.plane, i);
		const uint32_t q = i - p * ix.plane.d;
		const int h = (int)mgc_div(ix.row, q);
		const int wq = (int)(q - (uint32_t)h * ix.row.d);
		const uint32_t c = p - mgc_div(ix.chan, p) * ix.chan.d;
		const T *dyp = dy + (size_t)p * g.OH * g.OW;
		const T *wc = w + c * 9;
		A acc = 0;
#pragma unroll
		for (int ti = 0; ti < 3; ti++) {
			const int th = h + g.ph - ti;
			if (th < 0 || (S == 2 && (th & 1)))
				continue;
			const int oh = S == 2 ? th >> 1 : th;
			if (oh >= g.OH)
				continue;
#pragma unroll
			for (int tj = 0; tj < 3; tj++) {
				const int tw = wq + g.pw - tj;
				if (tw < 0 || (S == 2 && (tw & 1)))
					continue;
				const int ow = S == 2 ? tw >> 1 : tw;
				if (ow < g.OW)
					acc += mgc_ld(wc, ti * 3 + tj) *
					       mgc_ld(dyp, oh * g.OW + ow);
			}
		}
		dx[i] = mgc_t<T>::from(acc);
	}
}

/* Can the 3x3 fast path take g (square stride 1 or 2, 32-bit indices)? */
static bool fast3(const dw_geom &g, int64_t pos)
{
	return g.kh == 3 && g.kw == 3 && g.sh == g.sw &&
	       (g.sh == 1 || g.sh == 2) && g.planes * pos < (1ll << 31) &&
	       g.planes * pos > 0;
}

static dw_idx make_idx(const dw_geom &g, int rows, int cols)
{
	dw_idx ix;
	ix.plane = mgc_fdiv_make((uint32_t)(rows * cols));
	ix.row = mgc_fdiv_make((uint32_t)cols);
	ix.chan = mgc_fdiv_make((uint32_t)g.C);
	ix.total = (uint32_t)(g.planes * rows * cols);
	return ix;
}

/* KH, KW > 0: compile-time window; 0: runtime (g.kh, g.kw). */
template <typename T, int KH, int KW>
__global__ void dw_fwd(dw_geom g, const T *__restrict__ x,
		       const T *__restrict__ w, const T *__restrict__ bias,
		       T *__restrict__ y)
{
	typedef typename mgc_t<T>::acc A;
	const int kh = KH ? KH : g.kh, kw = KW ? KW : g.kw;
	const int opos = g.OH * g.OW;
	const int q = blockIdx.x * blockDim.x + threadIdx.x;
	if (q >= opos)
		return;
	const int oh = q / g.OW, ow = q - oh * g.OW;
	const int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
	for (int64_t p = blockIdx.y; p < g.planes; p += gridDim.y) {
		const int c = (int)(p % g.C);
		const T *xp = x + p * g.H * g.W;
		const T *wc = w + (int64_t)c * kh * kw;
		A acc = bias ? mgc_ld(bias, c) : (A)0;
#pragma unroll
		for (int i = 0; i < (KH ? KH : 1); i++)
			for (int ii = 0; ii < (KH ? 1 : kh); ii++) {
				const int ti = KH ? i : ii;
				const int h = h0 + ti;
				if (h < 0 || h >= g.H)
					continue;
#pragma unroll
				for (int j = 0; j < (KW ? KW : 1); j++)
					for (int jj = 0; jj < (KW ? 1 : kw);
					     jj++) {
						const int tj = KW ? j : jj;
						const int ww = w0 + tj;
						if (ww < 0 || ww >= g.W)
							continue;
						acc += mgc_ld(wc,
							      ti * kw + tj) *
						       mgc_ld(xp, h * g.W + ww);
					}
			}
		y[p * opos + q] = mgc_t<T>::from(acc);
	}
}

/* dx[h, w] = sum over taps (i, j) with (h + ph - i) = oh * sh (and the
 * same for w) of w[i, j] * dy[oh, ow]: a gather, so no atomics. */
template <typename T, int KH, int KW>
__global__ void dw_bwd_data(dw_geom g, const T *__restrict__ w,
			    const T *__restrict__ dy, T *__restrict__ dx)
{
	typedef typename mgc_t<T>::acc A;
	const int kh = KH ? KH : g.kh, kw = KW ? KW : g.kw;
	const int ipos = g.H * g.W;
	const int q = blockIdx.x * blockDim.x + threadIdx.x;
	if (q >= ipos)
		return;
	const int h = q / g.W, wq = q - h * g.W;
	for (int64_t p = blockIdx.y; p < g.planes; p += gridDim.y) {
		const int c = (int)(p % g.C);
		const T *dyp = dy + p * g.OH * g.OW;
		const T *wc = w + (int64_t)c * kh * kw;
		A acc = 0;
#pragma unroll
		for (int i = 0; i < (KH ? KH : 1); i++)
			for (int ii = 0; ii < (KH ? 1 : kh); ii++) {
				const int ti = KH ? i : ii;
				const int th = h + g.ph - ti;
				if (th < 0 || th % g.sh)
					continue;
				const int oh = th / g.sh;
				if (oh >= g.OH)
					continue;
#pragma unroll
				for (int j = 0; j < (KW ? KW : 1); j++)
					for (int jj = 0; jj < (KW ? 1 : kw);
					     jj++) {
						const int tj = KW ? j : jj;
						const int tw = wq + g.pw - tj;
						if (tw < 0 || tw % g.sw)
							continue;
						const int ow = tw / g.sw;
						if (ow >= g.OW)
							continue;
						acc += mgc_ld(wc,
							      ti * kw + tj) *
						       mgc_ld(dyp,
							      oh * g.OW + ow);
					}
			}
		dx[p * ipos + q] = mgc_t<T>::from(acc);
	}
}

/* Weight-gradient element functor: all NT taps of one output position
 * (NT == kh * kw), or the one tap `tap` when NT == 1 and tap >= 0. */
template <typename T, int NT> struct dw_f {
	const T *x, *dy;
	dw_geom g;
	int tap;
	__device__ void operator()(int64_t n, int64_t q, int64_t c,
				   double *acc) const
	{
		const int64_t p = n * g.C + c;
		const int oh = (int)mgc_div(g.owd, (uint32_t)q),
			  ow = (int)q - oh * g.OW;
		const double d = (double)mgc_ld(dy, p * g.OH * g.OW + q);
		const T *xp = x + p * g.H * g.W;
		const int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
		if constexpr (NT == 1) {
			const int h = h0 + tap / g.kw, w = w0 + tap % g.kw;
			if (h >= 0 && h < g.H && w >= 0 && w < g.W)
				acc[0] += d * (double)mgc_ld(xp, h * g.W + w);
		} else {
#pragma unroll
			for (int t = 0; t < NT; t++) {
				const int h = h0 + t / 3, w = w0 + t % 3;
				if (h >= 0 && h < g.H && w >= 0 && w < g.W)
					acc[t] += d * (double)mgc_ld(
							      xp, h * g.W + w);
			}
		}
	}
};

/* dw[c, t] += sum of the S partials of (c, t), in order. part is laid
 * out [C][S][nv] with taps t0 .. t0 + nv - 1. */
template <typename T>
__global__ void dw_final(const double *part, int S, int nv, int t0, int C,
			 int taps, T *dw)
{
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= C * nv)
		return;
	const int c = i / nv, v = i - c * nv;
	double s = 0;
	for (int k = 0; k < S; k++)
		s += part[((int64_t)c * S + k) * nv + v];
	const int64_t o = (int64_t)c * taps + t0 + v;
	dw[o] = mgc_t<T>::from(mgc_ld(dw, o) + s);
}

/* dw_final for the 3 x 3 taps of channel c, folded into the reduction
 * (cuda_reduce.cuh's finaliser): the S partials of each tap in order. */
template <typename T> struct dw_fin9 {
	static const bool on = true;
	static const int threads = 9; /* one a tap */
	static const bool post_on = false;
	T *dw;
	__device__ void post(int64_t) const
	{
	}
	__device__ void operator()(int64_t c, const double *part, int S,
				   int v) const
	{
		double s = 0;
		for (int k = 0; k < S; k++)
			s += __ldcg(part + k * 9 + v);
		const int64_t o = c * 9 + v;
		dw[o] = mgc_t<T>::from(mgc_ld(dw, o) + s);
	}
};

template <typename T>
void fwd(cudaStream_t st, const dw_geom &g, const void *x, const void *w,
	 const void *b, void *y)
{
	const int opos = g.OH * g.OW, th = opos >= 256 ? 256 : 64;
	const dim3 grid = plane_grid(g.planes, opos, th);
	if (fast3(g, opos)) {
		const dw_idx ix = make_idx(g, g.OH, g.OW);
		const unsigned nb = mgc_blocks(ix.total, 256);
		if (g.sh == 1)
			dw_fwd3<T, 1><<<nb, 256, 0, st>>>(g, ix, (const T *)x,
							  (const T *)w,
							  (const T *)b, (T *)y);
		else
			dw_fwd3<T, 2><<<nb, 256, 0, st>>>(g, ix, (const T *)x,
							  (const T *)w,
							  (const T *)b, (T *)y);
	} else if (g.kh == 3 && g.kw == 3)
		dw_fwd<T, 3, 3><<<grid, th, 0, st>>>(
			g, (const T *)x, (const T *)w, (const T *)b, (T *)y);
	else
		dw_fwd<T, 0, 0><<<grid, th, 0, st>>>(
			g, (const T *)x, (const T *)w, (const T *)b, (T *)y);
}

template <typename T>
void bwd_data(cudaStream_t st, const dw_geom &g, const void *w, const void *dy,
	      void *dx)
{
	const int ipos = g.H * g.W, th = ipos >= 256 ? 256 : 64;
	const dim3 grid = plane_grid(g.planes, ipos, th);
	if (fast3(g, ipos)) {
		const dw_idx ix = make_idx(g, g.H, g.W);
		const unsigned nb = mgc_blocks(ix.total, 256);
		if (g.sh == 1)
			dw_bwd_data3<T, 1><<<nb, 256, 0, st>>>(
				g, ix, (const T *)w, (const T *)dy, (T *)dx);
		else
			dw_bwd_data3<T, 2><<<nb, 256, 0, st>>>(
				g, ix, (const T *)w, (const T *)dy, (T *)dx);
	} else if (g.kh == 3 && g.kw == 3)
		dw_bwd_data<T, 3, 3><<<grid, th, 0, st>>>(
			g, (const T *)w, (const T *)dy, (T *)dx);
	else
		dw_bwd_data<T, 0, 0><<<grid, th, 0, st>>>(
			g, (const T *)w, (const T *)dy, (T *)dx);
}

template <typename T>
void bwd_filter(cudaStream_t st, const dw_geom &g, int64_t N, const void *x,
		const void *dy, void *dw, double *part, unsigned *cnt)
{
	const int taps = g.kh * g.kw;
	int S;
	if (g.kh == 3 && g.kw == 3) {
		dw_f<T, 9> f = {(const T *)x, (const T *)dy, g, -1};
		const dw_fin9<T> fin = {(T *)dw};
		mgc_chan_reduce_fin<9>(st, f, N, g.C, (int64_t)g.OH * g.OW,
				       part, &S, fin, cnt);
		return;
	}
	for (int t = 0; t < taps; t++) {
		dw_f<T, 1> f = {(const T *)x, (const T *)dy, g, t};
		mgc_chan_reduce<1>(st, f, N, g.C, (int64_t)g.OH * g.OW, part,
				   &S);
		dw_final<T><<<mgc_blocks(g.C, 128), 128, 0, st>>>(
			part, S, 1, t, g.C, taps, (T *)dw);
	}
}
/* dw += the band kernels' NS slices per channel, added in order. */
template <typename T>
void final_sum(cudaStream_t st, const double *part, int NS, int K, void *dw)
{
	dw_final<T><<<mgc_blocks((int64_t)K * 9, 128), 128, 0, st>>>(
		part, NS, 9, 0, K, 9, (T *)dw);
}
} // namespace

extern "C" int mgc_depthwise_fwd(struct mg_ctx *ctx,
				 const struct mgc_conv_geom *g,
				 enum mg_dtype dt, const void *x, const void *w,
				 const void *bias, void *y)
{
	const int R = mgc_dw_band_rows(g, dt, MGC_DW_FWD);
	if (R)
		return mgc_dw_band_fwd(ctx, g, R, dt, x, w, bias, y);
	const dw_geom d = make(g);
	MGC_DISPATCH("conv2d (depthwise)", dt, fwd, mgc_stream(ctx), d, x, w,
		     bias, y);
	return mgc_check_launch("conv2d (depthwise)");
}

extern "C" int mgc_depthwise_bwd_data(struct mg_ctx *ctx,
				      const struct mgc_conv_geom *g,
				      enum mg_dtype dt, const void *w,
				      const void *dy, void *dx)
{
	const int R = mgc_dw_band_rows(g, dt, MGC_DW_BWD_DATA);
	if (R)
		return mgc_dw_band_bwd_data(ctx, g, R, dt, w, dy, dx);
	const dw_geom d = make(g);
	MGC_DISPATCH("conv2d_backward (depthwise dx)", dt, bwd_data,
		     mgc_stream(ctx), d, w, dy, dx);
	return mgc_check_launch("conv2d_backward (depthwise dx)");
}

extern "C" int mgc_depthwise_bwd_filter(struct mg_ctx *ctx,
					const struct mgc_conv_geom *g,
					enum mg_dtype dt, const void *x,
					const void *dy, void *dw)
{
	const int R = mgc_dw_band_rows(g, dt, MGC_DW_BWD_FILTER);
	if (R) {
		double *part = (double *)mgc_scratch(
			ctx, (size_t)g->K * 9 * mgc_dw_band_filter_slices(g) *
				     sizeof(double));
		int NS;
		if (!part ||
		    mgc_dw_band_bwd_filter(ctx, g, R, dt, x, dy, part, &NS))
			return -1;
		MGC_DISPATCH("conv2d_backward (depthwise dw)", dt, final_sum,
			     mgc_stream(ctx), part, NS, (int)g->K, dw);
		return mgc_check_launch("conv2d_backward (depthwise dw)");
	}
	const dw_geom d = make(g);
	const int nv = d.kh == 3 && d.kw == 3 ? 9 : 1;
	double *part = (double *)mgc_scratch(
		ctx, (size_t)g->C * nv * mgc_red_splits(g->N * g->OH * g->OW) *
			     sizeof(double));
	unsigned *cnt = mgc_counters(ctx);
	if (!part || !cnt)
		return -1;
	MGC_DISPATCH("conv2d_backward (depthwise dw)", dt, bwd_filter,
		     mgc_stream(ctx), d, g->N, x, dy, dw, part, cnt);
	return mgc_check_launch("conv2d_backward (depthwise dw)");
}
