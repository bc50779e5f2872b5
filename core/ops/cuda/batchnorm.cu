/*
 * batchnorm.cu - 2-D batch normalisation (PyTorch semantics) with the
 * optional fused ReLU6, forward and backward, on CUDA.
 *
 * Two launches each way in training: per-channel partial sums
 * (cuda_reduce.cuh, double accumulation, fixed order) whose last block
 * per channel runs the finalise (statistics, running-stat update with the
 * unbiased variance, dgamma/dbeta +=, the coefficients of the
 * element-wise pass), then the element-wise pass. Channels of at most
 * BN_SMALL_MAX elements (N * HW: the 7 x 7 and smaller planes at batch
 * 64) run the whole op in one launch of a few warps a channel, the
 * values held in registers (bn_small_fwd / bn_small_bwd). Where a larger
 * channel is still one slice of the reduction (N * HW <= MGC_RED_SLICE),
 * the reducing block runs the element-wise pass over it, so the op is
 * one launch there too. Eval runs the finalise as its own small kernel.
 * Training statistics are shifted by the channel's first value (as the
 * CPU op does) so the one-pass variance stays accurate when |mean| >> std.
 * For F16/BF16 activations gamma, beta, the saved statistics and the
 * parameter gradients are F32; running statistics are F32 or F64.
 *
 * Both passes are memory-bound and sized for bandwidth: planes of at
 * least MGC_VEC_MIN_HW elements reduce with 16-byte loads
 * (mgc_chan_partial_vec), and the element-wise passes walk the flat
 * tensor in 16-byte vectors, looking the channel up per vector (per
 * element only where a vector straddles two planes), so odd plane sizes
 * (125 x 125) vectorise too.
 */
#include "ops/cuda/cuda_reduce.cuh"

namespace
{
/* Coefficients of the element-wise passes, in the arithmetic type. */
template <typename A> struct bn_coef {
	A mean, k1, k2, k3; /* forward: k1 scale, k2 shift */
};

/* Statistics, small planes: one element at (n, q) of channel c. */
template <typename T> struct stat_f {
	const T *x;
	int64_t C, HW;
	__device__ void operator()(int64_t n, int64_t q, int64_t c,
				   double *acc) const
	{
		const double shift = (double)mgc_ld(x, c * HW);
		const double d =
			(double)mgc_ld(x, (n * C + c) * HW + q) - shift;
		acc[0] += d;
		acc[1] += d * d;
	}
};

/* Statistics, large planes (mgc_chan_partial_vec). */
template <typename T> struct stat_v {
	typedef typename mgc_t<T>::acc A;
	typedef A S; /* the channel's shift */
	const T *x;
	int64_t HW;
	__device__ S begin(int64_t c) const
	{
		return mgc_ld(x, c * HW);
	}
	__device__ void one(const S &sh, int64_t i, double *acc) const
	{
		const double d = (double)mgc_ld(x, i) - (double)sh;
		acc[0] += d;
		acc[1] += d * d;
	}
	__device__ void vec(const S &sh, int64_t v, double *acc) const
	{
		A e[MGC_VEC(T)], s1 = 0, s2 = 0;
		mgc_ldv(x, v, e);
#pragma unroll
		for (int k = 0; k < MGC_VEC(T); k++) {
			const A d = e[k] - sh;
			s1 += d;
			s2 += d * d;
		}
		acc[0] += (double)s1;
		acc[1] += (double)s2;
	}
};

__device__ __forceinline__ double rs_get(const void *p, bool f64, int64_t c)
{
	return f64 ? ((const double *)p)[c] : (double)((const float *)p)[c];
}

__device__ __forceinline__ void rs_set(void *p, bool f64, int64_t c, double v)
{
	if (f64)
		((double *)p)[c] = v;
	else
		((float *)p)[c] = (float)v;
}

/*
 * The forward finalise of channel c: from the partial sums of the
 * shifted values (training) or the running statistics (eval), the saved
 * statistics, the running-stat update and the coefficients of the
 * element-wise pass. As a cuda_reduce.cuh finaliser it adds the S
 * partials in order.
 */
template <typename T, typename P> struct fwd_fin {
	typedef typename mgc_t<T>::acc A;
	static const int threads = 1;
	const T *x;
	int64_t HW;
	double m, eps, mom;
	bool training, rs64;
	const P *gamma, *beta;
	void *rm, *rv;
	P *save_mean, *save_invstd;
	bn_coef<A> *coef;
	__device__ void operator()(int64_t c, const double *part, int S,
				   int) const
	{
		double s1 = 0, s2 = 0;
		for (int k = 0; k < S; k++) {
			s1 += __ldcg(part + 2 * k);
			s2 += __ldcg(part + 2 * k + 1);
		}
		coef[c] = finish(c, (double)mgc_ld(x, c * HW), s1, s2, true);
	}
	/*
	 * The statistics of channel c from the sums s1, s2 of the values
	 * shifted by shift (training); with write, the saved and running
	 * statistics are stored. Returns the coefficients. The small-plane
	 * kernel calls it in every thread of a channel (same bits in each)
	 * and writes from one.
	 */
	__device__ bn_coef<A> finish(int64_t c, double shift, double s1,
				     double s2, bool write) const
	{
		double mean, invstd;
		if (training) {
			const double dm = s1 / m;
			double var = s2 / m - dm * dm;
			if (var < 0)
				var = 0;
			mean = shift + dm;
			invstd = 1.0 / sqrt(var + eps);
			if (write && rm)
				rs_set(rm, rs64, c,
				       (1 - mom) * rs_get(rm, rs64, c) +
					       mom * mean);
			if (write && rv)
				rs_set(rv, rs64, c,
				       (1 - mom) * rs_get(rv, rs64, c) +
					       mom * var * m / (m - 1));
		} else {
			mean = rs_get(rm, rs64, c);
			invstd = 1.0 / sqrt(rs_get(rv, rs64, c) + eps);
		}
		if (write && save_mean)
			save_mean[c] = (P)mean;
		if (write && save_invstd)
			save_invstd[c] = (P)invstd;
		bn_coef<A> k;
		k.mean = (A)mean;
		k.k1 = (A)((double)gamma[c] * invstd);
		k.k2 = (A)beta[c];
		k.k3 = 0;
		return k;
	}
};

/* The eval finalise, from the running statistics. */
template <typename T, typename P>
__global__ void bn_fwd_final(fwd_fin<T, P> f, int64_t C)
{
	const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (c < C)
		f.coef[c] = f.finish(c, 0, 0, 0, true);
}

/* Geometry of the flat element-wise passes: element i is in plane
 * i / HW, channel plane % C; total < 2^31 (the launcher chunks). */
struct flat_geom {
	uint32_t total;
	mgc_fdiv hw, c;
};

__device__ __forceinline__ uint32_t plane_chan(const flat_geom &g, uint32_t p)
{
	return p - mgc_div(g.c, p) * g.c.d;
}

/*
 * Walk the flat tensor: with VEC > 1 in 16-byte vectors (op.run), each
 * with one coefficient lookup unless it straddles two planes or is the
 * partial last one, which go element by element (op.one); with VEC == 1
 * (unaligned pointers) element by element.
 */
template <int VEC, typename A, typename OP>
__device__ __forceinline__ void flat_walk(const flat_geom &g,
					  const bn_coef<A> *coef, OP op)
{
	const uint32_t n = (g.total + VEC - 1) / VEC;
	for (uint32_t v = blockIdx.x * blockDim.x + threadIdx.x; v < n;
	     v += gridDim.x * blockDim.x) {
		const uint32_t i0 = v * VEC;
		const uint32_t i1 = i0 + VEC < g.total ? i0 + VEC : g.total;
		const uint32_t p0 = mgc_div(g.hw, i0);
		if (VEC > 1 && i1 - i0 == VEC && p0 == mgc_div(g.hw, i1 - 1)) {
			op.run(v, coef[plane_chan(g, p0)]);
		} else {
			for (uint32_t i = i0; i < i1; i++)
				op.one(i,
				       coef[plane_chan(g, mgc_div(g.hw, i))]);
		}
	}
}

template <typename T, bool RELU6> struct fwd_op {
	typedef typename mgc_t<T>::acc A;
	const T *x;
	T *y;
	fwd_op at(int64_t e) const
	{
		return fwd_op{x + e, y + e};
	}
	bool aligned() const
	{
		return mgc_aligned16(x) && mgc_aligned16(y);
	}
	static __device__ __forceinline__ A f(A v, const bn_coef<A> &k)
	{
		v = (v - k.mean) * k.k1 + k.k2;
		if (RELU6)
			v = v < 0 ? (A)0 : (v > 6 ? (A)6 : v);
		return v;
	}
	__device__ __forceinline__ void run(uint32_t v,
					    const bn_coef<A> &k) const
	{
		A e[MGC_VEC(T)];
		mgc_ldv(x, v, e);
#pragma unroll
		for (int j = 0; j < MGC_VEC(T); j++)
			e[j] = f(e[j], k);
		mgc_stv(y, v, e);
	}
	__device__ __forceinline__ void one(uint32_t i,
					    const bn_coef<A> &k) const
	{
		y[i] = mgc_t<T>::from(f(mgc_ld(x, i), k));
	}
};

template <typename T, bool RELU6, int VEC>
__global__ void bn_fwd_apply(fwd_op<T, RELU6> op, flat_geom g,
			     const bn_coef<typename mgc_t<T>::acc> *coef)
{
	flat_walk<VEC>(g, coef, op);
}

/* Backward reduction, small planes. */
template <typename T, typename P, bool RELU6> struct grad_f {
	const T *x, *y, *dy;
	const P *mean;
	int64_t C, HW;
	__device__ void operator()(int64_t n, int64_t q, int64_t c,
				   double *acc) const
	{
		const int64_t i = (n * C + c) * HW + q;
		double dz = (double)mgc_ld(dy, i);
		if (RELU6) {
			const double yv = (double)mgc_ld(y, i);
			if (!(yv > 0 && yv < 6))
				dz = 0;
		}
		acc[0] += dz;
		acc[1] += dz * ((double)mgc_ld(x, i) - (double)mean[c]);
	}
};

/* Backward reduction, large planes (mgc_chan_partial_vec). */
template <typename T, typename P, bool RELU6> struct grad_v {
	typedef typename mgc_t<T>::acc A;
	typedef A S; /* the channel's mean */
	const T *x, *y, *dy;
	const P *mean;
	__device__ S begin(int64_t c) const
	{
		return (A)mean[c];
	}
	__device__ void one(const S &mu, int64_t i, double *acc) const
	{
		double dz = (double)mgc_ld(dy, i);
		if (RELU6) {
			const double yv = (double)mgc_ld(y, i);
			if (!(yv > 0 && yv < 6))
				dz = 0;
		}
		acc[0] += dz;
		acc[1] += dz * ((double)mgc_ld(x, i) - (double)mu);
	}
	__device__ void vec(const S &mu, int64_t v, double *acc) const
	{
		A g[MGC_VEC(T)], xv[MGC_VEC(T)], s1 = 0, s2 = 0;
		mgc_ldv(dy, v, g);
		mgc_ldv(x, v, xv);
		if (RELU6) {
			A yv[MGC_VEC(T)];
			mgc_ldv(y, v, yv);
#pragma unroll
			for (int k = 0; k < MGC_VEC(T); k++)
				if (!(yv[k] > 0 && yv[k] < 6))
					g[k] = 0;
		}
#pragma unroll
		for (int k = 0; k < MGC_VEC(T); k++) {
			s1 += g[k];
			s2 += g[k] * (xv[k] - mu);
		}
		acc[0] += (double)s1;
		acc[1] += (double)s2;
	}
};

/*
 * The backward finalise of channel c, as a cuda_reduce.cuh finaliser:
 * dgamma/dbeta += and the coefficients of the element-wise pass from the
 * S partials of sum(dz) and sum(dz * (x - mean)), added in order.
 */
template <typename P, typename A> struct bwd_fin {
	static const int threads = 1;
	double m;
	bool training;
	const P *gamma, *save_mean, *save_invstd;
	P *dgamma, *dbeta;
	bn_coef<A> *coef;
	__device__ void operator()(int64_t c, const double *part, int S,
				   int) const
	{
		double sdz = 0, sdzx = 0;
		for (int k = 0; k < S; k++) {
			sdz += __ldcg(part + 2 * k);
			sdzx += __ldcg(part + 2 * k + 1);
		}
		coef[c] = finish(c, sdz, sdzx, true);
	}
	/* From the sums of channel c: with write, dgamma/dbeta +=; returns
	 * the coefficients (the small-plane kernel: every thread of the
	 * channel, one writing). */
	__device__ bn_coef<A> finish(int64_t c, double sdz, double sdzx,
				     bool write) const
	{
		const double invstd = save_invstd[c];
		if (write && dgamma)
			dgamma[c] = (P)((double)dgamma[c] + sdzx * invstd);
		if (write && dbeta)
			dbeta[c] = (P)((double)dbeta[c] + sdz);
		const double k = (double)gamma[c] * invstd;
		bn_coef<A> r;
		r.mean = (A)save_mean[c];
		r.k1 = (A)k;
		r.k2 = (A)(training ? k * sdz / m : 0);
		r.k3 = (A)(training ? k * sdzx * invstd * invstd / m : 0);
		return r;
	}
};

template <typename T, bool RELU6> struct bwd_op {
	typedef typename mgc_t<T>::acc A;
	const T *x, *y, *dy;
	T *dx;
	bwd_op at(int64_t e) const
	{
		return bwd_op{x + e, y ? y + e : y, dy + e, dx + e};
	}
	bool aligned() const
	{
		return mgc_aligned16(x) && (!y || mgc_aligned16(y)) &&
		       mgc_aligned16(dy) && mgc_aligned16(dx);
	}
	static __device__ __forceinline__ A f(A xv, A yv, A g,
					      const bn_coef<A> &k)
	{
		if (RELU6 && !(yv > 0 && yv < 6))
			g = 0;
		return k.k1 * g - k.k2 - (xv - k.mean) * k.k3;
	}
	__device__ __forceinline__ void run(uint32_t v,
					    const bn_coef<A> &k) const
	{
		A xv[MGC_VEC(T)], yv[MGC_VEC(T)], g[MGC_VEC(T)];
		mgc_ldv(x, v, xv);
		mgc_ldv(dy, v, g);
		if (RELU6)
			mgc_ldv(y, v, yv);
#pragma unroll
		for (int j = 0; j < MGC_VEC(T); j++)
			g[j] = f(xv[j], RELU6 ? yv[j] : (A)0, g[j], k);
		mgc_stv(dx, v, g);
	}
	__device__ __forceinline__ void one(uint32_t i,
					    const bn_coef<A> &k) const
	{
		dx[i] = mgc_t<T>::from(f(mgc_ld(x, i),
					 RELU6 ? mgc_ld(y, i) : (A)0,
					 mgc_ld(dy, i), k));
	}
};

template <typename T, bool RELU6, int VEC>
__global__ void bn_bwd_apply(bwd_op<T, RELU6> op, flat_geom g,
			     const bn_coef<typename mgc_t<T>::acc> *coef)
{
	flat_walk<VEC>(g, coef, op);
}

/*
 * Launch an element-wise pass (K<VEC> instantiated for MGC_VEC(T) and 1)
 * over N samples of C * HW elements, in chunks of whole samples below
 * 2^31 elements; op.at(e) offsets the op's pointers by e elements.
 */
template <typename T, typename OP, typename KV, typename K1, typename A>
static void launch_flat(cudaStream_t st, OP op, int64_t N, int64_t C,
			int64_t HW, const bn_coef<A> *coef, KV kvec, K1 kone)
{
	const int64_t per = C * HW; /* < 2^30: checked by the caller */
	const int64_t chunk = ((int64_t)1 << 30) / per;
	for (int64_t n0 = 0; n0 < N; n0 += chunk) {
		const int64_t nn = N - n0 < chunk ? N - n0 : chunk;
		const OP o = op.at(n0 * per);
		flat_geom g;
		g.total = (uint32_t)(nn * per);
		g.hw = mgc_fdiv_make((uint32_t)HW);
		g.c = mgc_fdiv_make((uint32_t)C);
		const int V = MGC_VEC(T);
		const int64_t work =
			o.aligned() ? (g.total + V - 1) / V : g.total;
		const unsigned blocks = mgc_blocks(work, 256);
		if (o.aligned())
			kvec<<<blocks, 256, 0, st>>>(o, g, coef);
		else
			kone<<<blocks, 256, 0, st>>>(o, g, coef);
	}
}

/*
 * The finaliser FIN, and where the channel was reduced by this block
 * alone (S == 1) the element-wise pass OP over the channel's N * HW
 * elements in the same block, after the finalise has written the
 * channel's coefficients (post_on false: the caller launches the pass
 * over the whole tensor). With S == 1, N * C * HW < 2^31, so 32-bit
 * flat indices do.
 */
template <typename FIN, typename OP> struct fin_then_apply {
	typedef typename OP::A A;
	static const bool on = true;
	static const int threads = FIN::threads;
	FIN fin;
	OP op;
	bool post_on;
	uint32_t C, HW, M;
	mgc_fdiv hw;
	const bn_coef<A> *coef;
	__device__ void operator()(int64_t c, const double *part, int S,
				   int t) const
	{
		fin(c, part, S, t);
	}
	__device__ void post(int64_t c) const
	{
		const bn_coef<A> k = coef[c];
		for (uint32_t j = threadIdx.x; j < M; j += blockDim.x) {
			const uint32_t n = mgc_div(hw, j);
			op.one((n * C + (uint32_t)c) * HW + (j - n * HW), k);
		}
	}
};

template <typename FIN, typename OP>
static fin_then_apply<FIN, OP>
make_fin_apply(const FIN &fin, const OP &op, bool post_on, int64_t N, int64_t C,
	       int64_t HW, const void *coef)
{
	fin_then_apply<FIN, OP> f;
	f.fin = fin;
	f.op = op;
	f.post_on = post_on;
	f.C = (uint32_t)C;
	f.HW = (uint32_t)HW;
	f.M = (uint32_t)(post_on ? N * HW : 0);
	f.hw = mgc_fdiv_make((uint32_t)HW);
	f.coef = (const bn_coef<typename OP::A> *)coef;
	return f;
}

/*
 * Small planes (N * HW <= BN_SMALL_MAX: the 7 x 7 ... 1 x 1 planes of a
 * 28 px step at batch 64, 7 x 7 at 224 px): the whole op in one launch
 * with no partials, counters or fences. A channel is a group of G warps
 * (32G threads, G = 1 ... 8) of a 256-thread block, 8 / G channels a
 * block; each thread keeps its E elements (element t + k * 32G of the
 * channel's N * HW) in registers. The sums go through a butterfly within
 * each warp and the group's warp sums in order (fixed by the shape, so
 * the same bits run to run), leaving the totals in every thread; every
 * thread then runs the finalise (the same bits in each), one writes the
 * statistics, and each applies the element-wise pass to its registers.
 * One 256-thread block a channel (the folded-finalise path) left most
 * threads idle on 1 x 1 and 2 x 2 planes and spent its time in a chain
 * of dependent steps (block reduction, fence, counter, finalise in one
 * thread, coefficients through global memory, re-reading the channel).
 */
#define BN_SMALL_THREADS 256
#define BN_SMALL_MAX (16 * BN_SMALL_THREADS)

/* Where each thread's elements are: M = N * HW < 2^31 elements of each
 * channel, N * C * HW < 2^31 (32-bit flat indices); lg = log2(32G). */
struct small_geom {
	uint32_t C, HW, M;
	mgc_fdiv hw;
	int lg;
};

/*
 * The sums a and b over the group of G = 2^(lg - 5) warps of this
 * thread, valid in every thread of the group. Every thread of the block
 * calls it (it synchronises the block when G > 1).
 */
__device__ __forceinline__ void small_sum2(double &a, double &b,
					   double (*sh)[32], int lg)
{
	for (int o = 16; o > 0; o >>= 1) {
		a += __shfl_xor_sync(0xffffffffu, a, o);
		b += __shfl_xor_sync(0xffffffffu, b, o);
	}
	if (lg == 5)
		return;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int G = 1 << (lg - 5), w0 = warp & ~(G - 1);
	if (lane == 0) {
		sh[0][warp] = a;
		sh[1][warp] = b;
	}
	__syncthreads();
	a = lane < G ? sh[0][w0 + lane] : 0.0;
	b = lane < G ? sh[1][w0 + lane] : 0.0;
	for (int o = 16; o > 0; o >>= 1) {
		a += __shfl_xor_sync(0xffffffffu, a, o);
		b += __shfl_xor_sync(0xffffffffu, b, o);
	}
}

/* This thread's channel (C or more: an idle group), its place t in the
 * group, and the flat index of its k-th element (false past M). */
struct small_pos {
	uint32_t c, t;
	__device__ small_pos(const small_geom &g)
	{
		const uint32_t gt = 1u << g.lg;
		t = threadIdx.x & (gt - 1);
		c = blockIdx.x * (BN_SMALL_THREADS >> g.lg) +
		    (threadIdx.x >> g.lg);
	}
	__device__ bool at(const small_geom &g, int k, uint32_t *i) const
	{
		const uint32_t j = t + ((uint32_t)k << g.lg);
		if (c >= g.C || j >= g.M)
			return false;
		const uint32_t n = mgc_div(g.hw, j);
		*i = (n * g.C + c) * g.HW + (j - n * g.HW);
		return true;
	}
};

/* Start bringing p's line into L1 (generic address): the finalise's
 * load of it after the reduction then hits instead of waiting on L2. */
__device__ __forceinline__ void l1_prefetch(const void *p)
{
	asm volatile("prefetch.L1 [%0];" ::"l"(p));
}

/* Training forward over small planes: statistics, finalise, y. */
template <typename T, bool RELU6, int E>
__global__ void __launch_bounds__(BN_SMALL_THREADS, 2)
	bn_small_fwd(small_geom g, fwd_fin<T, typename mgc_param<T>::type> fin,
		     T *y)
{
	typedef typename mgc_t<T>::acc A;
	__shared__ double sh[2][32];
	const small_pos p(g);
	const bool on = p.c < g.C;
	const double shift = on ? (double)mgc_ld(fin.x, p.c * g.HW) : 0.0;
	if (on) {
		l1_prefetch(fin.gamma + p.c);
		l1_prefetch(fin.beta + p.c);
	}
	A v[E];
	bool in[E];
#pragma unroll
	for (int k = 0; k < E; k++) {
		uint32_t i = 0;
		in[k] = p.at(g, k, &i);
		v[k] = in[k] ? mgc_ld(fin.x, i) : (A)0;
	}
	double s1 = 0, s2 = 0;
#pragma unroll
	for (int k = 0; k < E; k++)
		if (in[k]) {
			const double d = (double)v[k] - shift;
			s1 += d;
			s2 += d * d;
		}
	small_sum2(s1, s2, sh, g.lg);
	if (!on)
		return;
	const bn_coef<A> c = fin.finish(p.c, shift, s1, s2, p.t == 0);
#pragma unroll
	for (int k = 0; k < E; k++) {
		uint32_t i = 0;
		if (p.at(g, k, &i)) /* recomputed: fewer registers held */
			y[i] = mgc_t<T>::from(fwd_op<T, RELU6>::f(v[k], c));
	}
}

/* Training backward over small planes: the two sums, dgamma/dbeta +=,
 * and dx where asked for. */
template <typename T, bool RELU6, int E>
__global__ void __launch_bounds__(BN_SMALL_THREADS, 2) bn_small_bwd(
	small_geom g,
	bwd_fin<typename mgc_param<T>::type, typename mgc_t<T>::acc> fin,
	const T *x, const T *y, const T *dy, T *dx)
{
	typedef typename mgc_t<T>::acc A;
	__shared__ double sh[2][32];
	const small_pos p(g);
	const bool on = p.c < g.C;
	const double mu = on ? (double)fin.save_mean[p.c] : 0.0;
	if (on) {
		l1_prefetch(fin.gamma + p.c);
		l1_prefetch(fin.save_invstd + p.c);
	}
	/* gv: dy with ReLU6's mask applied at the load, so y is not held */
	A xv[E], gv[E];
	bool in[E];
#pragma unroll
	for (int k = 0; k < E; k++) {
		uint32_t i = 0;
		in[k] = p.at(g, k, &i);
		xv[k] = in[k] ? mgc_ld(x, i) : (A)0;
		gv[k] = in[k] ? mgc_ld(dy, i) : (A)0;
		if (RELU6 && in[k]) {
			const A yv = mgc_ld(y, i);
			if (!(yv > 0 && yv < 6))
				gv[k] = 0;
		}
	}
	double sdz = 0, sdzx = 0;
#pragma unroll
	for (int k = 0; k < E; k++)
		if (in[k]) {
			const double dz = (double)gv[k];
			sdz += dz;
			sdzx += dz * ((double)xv[k] - mu);
		}
	small_sum2(sdz, sdzx, sh, g.lg);
	if (!on)
		return;
	const bn_coef<A> c = fin.finish(p.c, sdz, sdzx, p.t == 0);
	if (!dx)
		return;
#pragma unroll
	for (int k = 0; k < E; k++) {
		uint32_t i = 0;
		/* the mask is in gv already: the unmasked formula, same bits */
		if (p.at(g, k, &i))
			dx[i] = mgc_t<T>::from(
				bwd_op<T, false>::f(xv[k], (A)0, gv[k], c));
	}
}

/*
 * The small-plane geometry of an N x C x HW tensor, or false where it
 * does not apply; *E is 4 or 16 (the kernel's elements a thread): the
 * fewest warps that hold the channel at 4 a thread, else 8 warps at 16.
 */
static bool small_plan(int64_t N, int64_t C, int64_t HW, small_geom *g, int *E)
{
	const int64_t M = N * HW;
	if (M > BN_SMALL_MAX || N * C * HW >= ((int64_t)1 << 31))
		return false;
	int lg = 5;
	while (lg < 8 && ((int64_t)4 << lg) < M)
		lg++;
	*E = ((int64_t)4 << lg) >= M ? 4 : 16;
	g->C = (uint32_t)C;
	g->HW = (uint32_t)HW;
	g->M = (uint32_t)M;
	g->hw = mgc_fdiv_make((uint32_t)HW);
	g->lg = lg;
	return true;
}

static unsigned small_blocks(const small_geom &g)
{
	const uint32_t per = BN_SMALL_THREADS >> g.lg;
	return (g.C + per - 1) / per;
}

struct fwd_args {
	const struct mg_bn_args *a;
	int64_t N, C, HW;
	const void *x, *gamma, *beta;
	void *rm, *rv, *save_mean, *save_invstd, *y;
	bool rs64;
	bool small; /* MG_CUDA_OPT_BN_SMALL */
	double *part;
	void *coef;    /* bn_coef<acc of T> */
	unsigned *cnt; /* the folded finalise's counters */
};

template <typename T, bool RELU6>
static void fwd_apply(cudaStream_t st, const fwd_args &f)
{
	typedef typename mgc_t<T>::acc A;
	const fwd_op<T, RELU6> op = {(const T *)f.x, (T *)f.y};
	launch_flat<T>(st, op, f.N, f.C, f.HW, (const bn_coef<A> *)f.coef,
		       bn_fwd_apply<T, RELU6, MGC_VEC(T)>,
		       bn_fwd_apply<T, RELU6, 1>);
}

template <typename T, bool RELU6>
static void fwd_run(cudaStream_t st, const fwd_args &f)
{
	typedef typename mgc_param<T>::type P;
	typedef typename mgc_t<T>::acc A;
	const fwd_fin<T, P> fin = {(const T *)f.x,
				   f.HW,
				   (double)(f.N * f.HW),
				   f.a->eps,
				   f.a->momentum,
				   f.a->training,
				   f.rs64,
				   (const P *)f.gamma,
				   (const P *)f.beta,
				   f.rm,
				   f.rv,
				   (P *)f.save_mean,
				   (P *)f.save_invstd,
				   (bn_coef<A> *)f.coef};
	if (!f.a->training) {
		bn_fwd_final<T, P>
			<<<mgc_blocks(f.C, 128), 128, 0, st>>>(fin, f.C);
		fwd_apply<T, RELU6>(st, f);
		return;
	}
	small_geom sg;
	int E = 0;
	if (f.small && small_plan(f.N, f.C, f.HW, &sg, &E)) {
		if (E == 4)
			bn_small_fwd<T, RELU6, 4>
				<<<small_blocks(sg), BN_SMALL_THREADS, 0, st>>>(
					sg, fin, (T *)f.y);
		else
			bn_small_fwd<T, RELU6, 16>
				<<<small_blocks(sg), BN_SMALL_THREADS, 0, st>>>(
					sg, fin, (T *)f.y);
		return;
	}
	const bool one = mgc_red_splits(f.N * f.HW) == 1;
	const fwd_op<T, RELU6> op = {(const T *)f.x, (T *)f.y};
	const fin_then_apply<fwd_fin<T, P>, fwd_op<T, RELU6>> fa =
		make_fin_apply(fin, op, one, f.N, f.C, f.HW, f.coef);
	int S;
	if (f.HW >= MGC_VEC_MIN_HW && mgc_aligned16(f.x)) {
		const stat_v<T> fn = {(const T *)f.x, f.HW};
		mgc_chan_reduce_vec_fin<2, MGC_VEC(T)>(st, fn, f.N, f.C, f.HW,
						       f.part, &S, fa, f.cnt);
	} else {
		const stat_f<T> fn = {(const T *)f.x, f.C, f.HW};
		mgc_chan_reduce_fin<2>(st, fn, f.N, f.C, f.HW, f.part, &S, fa,
				       f.cnt);
	}
	if (!one)
		fwd_apply<T, RELU6>(st, f);
}

template <typename T> void fwd(cudaStream_t st, const fwd_args &f)
{
	if (f.a->act == MG_ACT_RELU6)
		fwd_run<T, true>(st, f);
	else
		fwd_run<T, false>(st, f);
}

struct bwd_args {
	const struct mg_bn_args *a;
	int64_t N, C, HW;
	const void *x, *y, *dy, *gamma, *save_mean, *save_invstd;
	void *dx, *dgamma, *dbeta;
	bool small; /* MG_CUDA_OPT_BN_SMALL */
	double *part;
	void *coef;    /* bn_coef<acc of T> */
	unsigned *cnt; /* the folded finalise's counters */
};

template <typename T, bool RELU6>
static void bwd_run(cudaStream_t st, const bwd_args &b)
{
	typedef typename mgc_param<T>::type P;
	typedef typename mgc_t<T>::acc A;
	const T *x = (const T *)b.x, *y = (const T *)b.y, *dy = (const T *)b.dy;
	const bwd_fin<P, A> fin = {(double)(b.N * b.HW),
				   b.a->training,
				   (const P *)b.gamma,
				   (const P *)b.save_mean,
				   (const P *)b.save_invstd,
				   (P *)b.dgamma,
				   (P *)b.dbeta,
				   (bn_coef<A> *)b.coef};
	small_geom sg;
	int E = 0;
	if (b.small && small_plan(b.N, b.C, b.HW, &sg, &E)) {
		if (E == 4)
			bn_small_bwd<T, RELU6, 4>
				<<<small_blocks(sg), BN_SMALL_THREADS, 0, st>>>(
					sg, fin, x, y, dy, (T *)b.dx);
		else
			bn_small_bwd<T, RELU6, 16>
				<<<small_blocks(sg), BN_SMALL_THREADS, 0, st>>>(
					sg, fin, x, y, dy, (T *)b.dx);
		return;
	}
	/* the pass in the reducing block where a channel is one slice */
	const bool one = b.dx && mgc_red_splits(b.N * b.HW) == 1;
	const bwd_op<T, RELU6> op = {x, y, dy, (T *)b.dx};
	const fin_then_apply<bwd_fin<P, A>, bwd_op<T, RELU6>> fa =
		make_fin_apply(fin, op, one, b.N, b.C, b.HW, b.coef);
	int S;
	if (b.HW >= MGC_VEC_MIN_HW && mgc_aligned16(x) &&
	    (!RELU6 || mgc_aligned16(y)) && mgc_aligned16(dy)) {
		const grad_v<T, P, RELU6> fn = {x, y, dy,
						(const P *)b.save_mean};
		mgc_chan_reduce_vec_fin<2, MGC_VEC(T)>(st, fn, b.N, b.C, b.HW,
						       b.part, &S, fa, b.cnt);
	} else {
		const grad_f<T, P, RELU6> fn = {
			x, y, dy, (const P *)b.save_mean, b.C, b.HW};
		mgc_chan_reduce_fin<2>(st, fn, b.N, b.C, b.HW, b.part, &S, fa,
				       b.cnt);
	}
	if (!b.dx || one)
		return;
	launch_flat<T>(st, op, b.N, b.C, b.HW, (const bn_coef<A> *)b.coef,
		       bn_bwd_apply<T, RELU6, MGC_VEC(T)>,
		       bn_bwd_apply<T, RELU6, 1>);
}

template <typename T> void bwd(cudaStream_t st, const bwd_args &b)
{
	if (b.a->act == MG_ACT_RELU6)
		bwd_run<T, true>(st, b);
	else
		bwd_run<T, false>(st, b);
}

/* Parameter-side tensors must be F64 for F64 activations, else F32. */
static int param_dtype_ok(const char *op, enum mg_dtype xt,
			  const struct mg_tensor *t, const char *name)
{
	if (!t)
		return 0;
	const enum mg_dtype want = xt == MG_F64 ? MG_F64 : MG_F32;
	if (t->dtype != want)
		return mg_error("%s: %s is %s; with %s activations it must be "
				"%s on CUDA",
				op, name, mg_dtype_name(t->dtype),
				mg_dtype_name(xt), mg_dtype_name(want));
	return 0;
}

/*
 * Scratch: partials for the reduction, then the coefficients (at most
 * four doubles a channel). A sample must stay below 2^30 elements: the
 * element-wise passes index with 32 bits.
 */
static int scratch(struct mg_ctx *ctx, const char *op, int64_t N, int64_t C,
		   int64_t HW, double **part, void **coef)
{
	if (C * HW >= ((int64_t)1 << 30))
		return mg_error("%s: one sample has %lld elements; the CUDA "
				"op takes fewer than 2^30",
				op, (long long)(C * HW));
	const size_t np = (size_t)C * mgc_red_splits(N * HW) * 2;
	const size_t bytes =
		np * sizeof(double) + (size_t)C * 4 * sizeof(double);
	char *p = (char *)mgc_scratch(ctx, bytes);
	if (!p)
		return -1;
	*part = (double *)p;
	*coef = p + np * sizeof(double);
	return 0;
}
} // namespace

extern "C" int
mg_cuda_batchnorm2d(struct mg_ctx *ctx, const struct mg_bn_args *a,
		    const struct mg_tensor *x, const struct mg_tensor *gamma,
		    const struct mg_tensor *beta,
		    struct mg_tensor *running_mean,
		    struct mg_tensor *running_var, struct mg_tensor *save_mean,
		    struct mg_tensor *save_invstd, struct mg_tensor *y)
{
	static const char op[] = "batchnorm2d";
	fwd_args f;
	f.a = a;
	f.N = x->shape[0];
	f.C = x->shape[1];
	f.HW = x->shape[2] * x->shape[3];
	if (param_dtype_ok(op, x->dtype, gamma, "gamma") ||
	    param_dtype_ok(op, x->dtype, beta, "beta") ||
	    param_dtype_ok(op, x->dtype, save_mean, "save_mean") ||
	    param_dtype_ok(op, x->dtype, save_invstd, "save_invstd"))
		return -1;
	if (running_mean && running_var &&
	    running_mean->dtype != running_var->dtype)
		return mg_error("%s: running_mean and running_var must share "
				"a dtype on CUDA",
				op);
	if (f.C == 0 || f.N * f.HW == 0)
		return 0;
	f.x = x->data;
	f.gamma = gamma->data;
	f.beta = beta->data;
	f.rm = running_mean ? running_mean->data : NULL;
	f.rv = running_var ? running_var->data : NULL;
	f.rs64 = running_mean ? running_mean->dtype == MG_F64
			      : (running_var && running_var->dtype == MG_F64);
	f.save_mean = save_mean ? save_mean->data : NULL;
	f.save_invstd = save_invstd ? save_invstd->data : NULL;
	f.y = y->data;
	if (scratch(ctx, op, f.N, f.C, f.HW, &f.part, &f.coef))
		return -1;
	f.cnt = mgc_counters(ctx);
	if (!f.cnt)
		return -1;
	f.small = mgc_state(ctx)->opt[MG_CUDA_OPT_BN_SMALL] != 0;
	MGC_DISPATCH(op, x->dtype, fwd, mgc_stream(ctx), f);
	return mgc_check_launch(op);
}

extern "C" int mg_cuda_batchnorm2d_backward(
	struct mg_ctx *ctx, const struct mg_bn_args *a,
	const struct mg_tensor *x, const struct mg_tensor *y,
	const struct mg_tensor *dy, const struct mg_tensor *gamma,
	const struct mg_tensor *save_mean, const struct mg_tensor *save_invstd,
	struct mg_tensor *dx, struct mg_tensor *dgamma, struct mg_tensor *dbeta)
{
	static const char op[] = "batchnorm2d_backward";
	bwd_args b;
	b.a = a;
	b.N = x->shape[0];
	b.C = x->shape[1];
	b.HW = x->shape[2] * x->shape[3];
	if (param_dtype_ok(op, x->dtype, gamma, "gamma") ||
	    param_dtype_ok(op, x->dtype, save_mean, "save_mean") ||
	    param_dtype_ok(op, x->dtype, save_invstd, "save_invstd") ||
	    param_dtype_ok(op, x->dtype, dgamma, "dgamma") ||
	    param_dtype_ok(op, x->dtype, dbeta, "dbeta"))
		return -1;
	if (b.C == 0 || b.N * b.HW == 0)
		return 0;
	b.x = x->data;
	b.y = a->act != MG_ACT_NONE ? y->data : NULL;
	b.dy = dy->data;
	b.gamma = gamma->data;
	b.save_mean = save_mean->data;
	b.save_invstd = save_invstd->data;
	b.dx = dx ? dx->data : NULL;
	b.dgamma = dgamma ? dgamma->data : NULL;
	b.dbeta = dbeta ? dbeta->data : NULL;
	if (scratch(ctx, op, b.N, b.C, b.HW, &b.part, &b.coef))
		return -1;
	b.cnt = mgc_counters(ctx);
	if (!b.cnt)
		return -1;
	b.small = mgc_state(ctx)->opt[MG_CUDA_OPT_BN_SMALL] != 0;
	MGC_DISPATCH(op, x->dtype, bwd, mgc_stream(ctx), b);
	return mgc_check_launch(op);
}
