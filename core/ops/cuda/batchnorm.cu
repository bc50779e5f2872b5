/*
 * batchnorm.cu - 2-D batch normalisation (PyTorch semantics) with the
 * optional fused ReLU6, forward and backward, on CUDA.
 *
 * Three launches each way: per-channel partial sums (cuda_reduce.cuh,
 * double accumulation, fixed order), a per-channel finalise (statistics,
 * running-stat update with the unbiased variance, dgamma/dbeta +=, the
 * coefficients of the element-wise pass), and the element-wise pass.
 * Training statistics are shifted by the channel's first value (as the
 * CPU op does) so the one-pass variance stays accurate when |mean| >> std.
 * For F16/BF16 activations gamma, beta, the saved statistics and the
 * parameter gradients are F32; running statistics are F32 or F64.
 */
#include "ops/cuda/cuda_reduce.cuh"

namespace
{
struct bn_coef {
	double mean, k1, k2, k3; /* forward: k1 scale, k2 shift */
};

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

template <typename T, typename P>
__global__ void bn_fwd_final(const double *part, int S, int64_t C, double m,
			     const T *x, int64_t HW, double eps, double mom,
			     bool training, const P *gamma, const P *beta,
			     void *rm, void *rv, bool rs64, P *save_mean,
			     P *save_invstd, bn_coef *coef)
{
	const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double mean, invstd;
	if (training) {
		double s1 = 0, s2 = 0;
		for (int k = 0; k < S; k++) {
			s1 += part[(c * S + k) * 2];
			s2 += part[(c * S + k) * 2 + 1];
		}
		const double shift = (double)mgc_ld(x, c * HW);
		const double dm = s1 / m;
		double var = s2 / m - dm * dm;
		if (var < 0)
			var = 0;
		mean = shift + dm;
		invstd = 1.0 / sqrt(var + eps);
		if (rm)
			rs_set(rm, rs64, c,
			       (1 - mom) * rs_get(rm, rs64, c) + mom * mean);
		if (rv)
			rs_set(rv, rs64, c,
			       (1 - mom) * rs_get(rv, rs64, c) +
				       mom * var * m / (m - 1));
	} else {
		mean = rs_get(rm, rs64, c);
		invstd = 1.0 / sqrt(rs_get(rv, rs64, c) + eps);
	}
	if (save_mean)
		save_mean[c] = (P)mean;
	if (save_invstd)
		save_invstd[c] = (P)invstd;
	coef[c].mean = mean;
	coef[c].k1 = (double)gamma[c] * invstd;
	coef[c].k2 = (double)beta[c];
}

template <typename T, bool RELU6>
__global__ void bn_fwd_apply(const T *x, T *y, const bn_coef *coef,
			     int64_t planes, int64_t C, int64_t HW)
{
	typedef typename mgc_t<T>::acc A;
	const int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (q >= HW)
		return;
	for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
		const bn_coef k = coef[p % C];
		const A tm = (A)k.mean, sc = (A)k.k1, sh = (A)k.k2;
		A v = (mgc_ld(x, p * HW + q) - tm) * sc + sh;
		if (RELU6)
			v = v < 0 ? (A)0 : (v > 6 ? (A)6 : v);
		y[p * HW + q] = mgc_t<T>::from(v);
	}
}

template <typename T, typename P> struct grad_f {
	const T *x, *y, *dy;
	const P *mean;
	int64_t C, HW;
	bool relu6;
	__device__ void operator()(int64_t n, int64_t q, int64_t c,
				   double *acc) const
	{
		const int64_t i = (n * C + c) * HW + q;
		double dz = (double)mgc_ld(dy, i);
		if (relu6) {
			const double yv = (double)mgc_ld(y, i);
			if (!(yv > 0 && yv < 6))
				dz = 0;
		}
		acc[0] += dz;
		acc[1] += dz * ((double)mgc_ld(x, i) - (double)mean[c]);
	}
};

template <typename P>
__global__ void bn_bwd_final(const double *part, int S, int64_t C, double m,
			     bool training, const P *gamma, const P *save_mean,
			     const P *save_invstd, P *dgamma, P *dbeta,
			     bn_coef *coef)
{
	const int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	double sdz = 0, sdzx = 0;
	for (int k = 0; k < S; k++) {
		sdz += part[(c * S + k) * 2];
		sdzx += part[(c * S + k) * 2 + 1];
	}
	const double invstd = save_invstd[c];
	if (dgamma)
		dgamma[c] = (P)((double)dgamma[c] + sdzx * invstd);
	if (dbeta)
		dbeta[c] = (P)((double)dbeta[c] + sdz);
	const double k = (double)gamma[c] * invstd;
	coef[c].mean = save_mean[c];
	coef[c].k1 = k;
	coef[c].k2 = training ? k * sdz / m : 0;
	coef[c].k3 = training ? k * sdzx * invstd * invstd / m : 0;
}

template <typename T, bool RELU6>
__global__ void bn_bwd_apply(const T *x, const T *y, const T *dy, T *dx,
			     const bn_coef *coef, int64_t planes, int64_t C,
			     int64_t HW)
{
	typedef typename mgc_t<T>::acc A;
	const int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (q >= HW)
		return;
	for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
		const bn_coef k = coef[p % C];
		const int64_t i = p * HW + q;
		A dz = mgc_ld(dy, i);
		if (RELU6) {
			const A yv = mgc_ld(y, i);
			if (!(yv > 0 && yv < 6))
				dz = 0;
		}
		const A v = (A)k.k1 * dz - (A)k.k2 -
			    (mgc_ld(x, i) - (A)k.mean) * (A)k.k3;
		dx[i] = mgc_t<T>::from(v);
	}
}

static dim3 plane_grid(int64_t planes, int64_t HW, int *threads)
{
	const int th = HW >= 256 ? 256 : (HW >= 128 ? 128 : 64);
	*threads = th;
	const int64_t gx = (HW + th - 1) / th;
	const int64_t gy = planes < 65535 ? planes : 65535;
	return dim3((unsigned)gx, (unsigned)(gy > 0 ? gy : 1));
}

struct fwd_args {
	const struct mg_bn_args *a;
	int64_t N, C, HW;
	const void *x, *gamma, *beta;
	void *rm, *rv, *save_mean, *save_invstd, *y;
	bool rs64;
	double *part;
	bn_coef *coef;
};

template <typename T> void fwd(cudaStream_t st, const fwd_args &f)
{
	typedef typename mgc_param<T>::type P;
	int S = 1;
	if (f.a->training) {
		stat_f<T> fn = {(const T *)f.x, f.C, f.HW};
		mgc_chan_reduce<2>(st, fn, f.N, f.C, f.HW, f.part, &S);
	}
	bn_fwd_final<T, P><<<mgc_blocks(f.C, 128), 128, 0, st>>>(
		f.part, S, f.C, (double)(f.N * f.HW), (const T *)f.x, f.HW,
		f.a->eps, f.a->momentum, f.a->training, (const P *)f.gamma,
		(const P *)f.beta, f.rm, f.rv, f.rs64, (P *)f.save_mean,
		(P *)f.save_invstd, f.coef);
	int th;
	const dim3 grid = plane_grid(f.N * f.C, f.HW, &th);
	if (f.a->act == MG_ACT_RELU6)
		bn_fwd_apply<T, true><<<grid, th, 0, st>>>(
			(const T *)f.x, (T *)f.y, f.coef, f.N * f.C, f.C, f.HW);
	else
		bn_fwd_apply<T, false><<<grid, th, 0, st>>>(
			(const T *)f.x, (T *)f.y, f.coef, f.N * f.C, f.C, f.HW);
}

struct bwd_args {
	const struct mg_bn_args *a;
	int64_t N, C, HW;
	const void *x, *y, *dy, *gamma, *save_mean, *save_invstd;
	void *dx, *dgamma, *dbeta;
	double *part;
	bn_coef *coef;
};

template <typename T> void bwd(cudaStream_t st, const bwd_args &b)
{
	typedef typename mgc_param<T>::type P;
	const bool relu6 = b.a->act == MG_ACT_RELU6;
	int S;
	grad_f<T, P> fn = {(const T *)b.x,
			   (const T *)b.y,
			   (const T *)b.dy,
			   (const P *)b.save_mean,
			   b.C,
			   b.HW,
			   relu6};
	mgc_chan_reduce<2>(st, fn, b.N, b.C, b.HW, b.part, &S);
	bn_bwd_final<P><<<mgc_blocks(b.C, 128), 128, 0, st>>>(
		b.part, S, b.C, (double)(b.N * b.HW), b.a->training,
		(const P *)b.gamma, (const P *)b.save_mean,
		(const P *)b.save_invstd, (P *)b.dgamma, (P *)b.dbeta, b.coef);
	if (!b.dx)
		return;
	int th;
	const dim3 grid = plane_grid(b.N * b.C, b.HW, &th);
	if (relu6)
		bn_bwd_apply<T, true><<<grid, th, 0, st>>>(
			(const T *)b.x, (const T *)b.y, (const T *)b.dy,
			(T *)b.dx, b.coef, b.N * b.C, b.C, b.HW);
	else
		bn_bwd_apply<T, false><<<grid, th, 0, st>>>(
			(const T *)b.x, (const T *)b.y, (const T *)b.dy,
			(T *)b.dx, b.coef, b.N * b.C, b.C, b.HW);
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

/* Scratch: partials for the reduction, then the coefficients. */
static int scratch(struct mg_ctx *ctx, int64_t N, int64_t C, int64_t HW,
		   double **part, bn_coef **coef)
{
	const size_t np = (size_t)C * mgc_red_splits(N * HW) * 2;
	const size_t bytes = np * sizeof(double) + (size_t)C * sizeof(bn_coef);
	char *p = (char *)mgc_scratch(ctx, bytes);
	if (!p)
		return -1;
	*part = (double *)p;
	*coef = (bn_coef *)(p + np * sizeof(double));
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
	if (scratch(ctx, f.N, f.C, f.HW, &f.part, &f.coef))
		return -1;
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
	if (scratch(ctx, b.N, b.C, b.HW, &b.part, &b.coef))
		return -1;
	MGC_DISPATCH(op, x->dtype, bwd, mgc_stream(ctx), b);
	return mgc_check_launch(op);
}
