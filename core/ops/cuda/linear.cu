/*
 * linear.cu - fully connected layer y = x w^T + b on CUDA: cuBLAS
 * GEMMs (cublasGemmEx; F16/BF16 with F32 compute, F32 without TF32 unless
 * allowed, F64), a broadcast bias add, and the bias gradient as a
 * deterministic two-stage column sum (no atomics).
 *
 * Row-major x [rows, in], w [out, in], y [rows, out] are column-major
 * x^T, w^T, y^T to cuBLAS, so y^T = w x^T is gemm(T, N, out, rows, in).
 */
#include <cublas_v2.h>

#include "ops/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_gemm.h"

namespace
{
const int COL_TH = 256;
const int64_t ROWS_PER_SPLIT = 256;
const int MAX_SPLIT = 64;

template <typename T>
__global__ void bias_add_k(T *y, const T *b, int64_t rows, int64_t out)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	     i < rows * out; i += (int64_t)gridDim.x * blockDim.x)
		y[i] = mgc_t<T>::from(mgc_ld(y, i) + mgc_ld(b, i % out));
}

/* part[s, o] = sum of dy[r, o] over the rows of split s, in order. */
template <typename T>
__global__ void colsum_part_k(const T *dy, int64_t rows, int64_t out,
			      int64_t chunk, double *part)
{
	const int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (o >= out)
		return;
	const int64_t r0 = blockIdx.y * chunk;
	const int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
	double s = 0;
	for (int64_t r = r0; r < r1; r++)
		s += (double)mgc_ld(dy, r * out + o);
	part[blockIdx.y * out + o] = s;
}

template <typename T>
__global__ void colsum_final_k(const double *part, int S, int64_t out, T *db)
{
	const int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if (o >= out)
		return;
	double s = 0;
	for (int k = 0; k < S; k++)
		s += part[k * out + o];
	db[o] = mgc_t<T>::from((double)mgc_ld(db, o) + s);
}

template <typename T>
void bias_add(cudaStream_t st, void *y, const void *b, int64_t rows,
	      int64_t out)
{
	bias_add_k<T><<<mgc_blocks(rows * out, 256), 256, 0, st>>>(
		(T *)y, (const T *)b, rows, out);
}

template <typename T>
void colsum(cudaStream_t st, const void *dy, int64_t rows, int64_t out,
	    void *db, double *part, int S)
{
	const int64_t chunk = (rows + S - 1) / S;
	const dim3 grid((unsigned)((out + COL_TH - 1) / COL_TH), (unsigned)S);
	colsum_part_k<T><<<grid, COL_TH, 0, st>>>((const T *)dy, rows, out,
						  chunk, part);
	colsum_final_k<T><<<mgc_blocks(out, COL_TH), COL_TH, 0, st>>>(
		part, S, out, (T *)db);
}

int splits(int64_t rows)
{
	int64_t s = (rows + ROWS_PER_SPLIT - 1) / ROWS_PER_SPLIT;
	return (int)(s < 1 ? 1 : (s > MAX_SPLIT ? MAX_SPLIT : s));
}

/* cuBLAS types for dt. */
struct gemm_types {
	cudaDataType_t data;
	cublasComputeType_t compute;
	bool f64;
};

int types_for(struct mg_ctx *ctx, const char *op, enum mg_dtype dt,
	      gemm_types *t)
{
	struct mgc_state *st = mgc_state(ctx);
	if (!st)
		return -1;
	t->f64 = dt == MG_F64;
	switch (dt) {
	case MG_F32:
		t->data = CUDA_R_32F;
		t->compute = st->opt[MG_CUDA_OPT_TF32]
				     ? CUBLAS_COMPUTE_32F_FAST_TF32
				     : CUBLAS_COMPUTE_32F;
		return 0;
	case MG_F64:
		t->data = CUDA_R_64F;
		t->compute = CUBLAS_COMPUTE_64F;
		return 0;
	case MG_F16:
		t->data = CUDA_R_16F;
		t->compute = CUBLAS_COMPUTE_32F;
		return 0;
	case MG_BF16:
		t->data = CUDA_R_16BF;
		t->compute = CUBLAS_COMPUTE_32F;
		return 0;
	default:
		return mgc_bad_dtype(op, dt);
	}
}

/* Column-major C = alpha op(A) op(B) + beta C. */
int gemm(struct mg_ctx *ctx, const char *op, const gemm_types &t, bool ta,
	 bool tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
	 const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
	return mgc_gemm(ctx, op, t.data, t.compute, t.f64, ta, tb, m, n, k, A,
			lda, B, ldb, beta, C, ldc);
}
} // namespace

/* cuda_gemm.h */
extern "C" int mgc_gemm(struct mg_ctx *ctx, const char *op, cudaDataType_t data,
			cublasComputeType_t compute, bool f64, bool ta, bool tb,
			int64_t m, int64_t n, int64_t k, const void *A,
			int64_t lda, const void *B, int64_t ldb, double beta,
			void *C, int64_t ldc)
{
	const double one64 = 1, beta64 = beta;
	const float one32 = 1, beta32 = (float)beta;
	cublasStatus_t s = cublasGemmEx(
		(cublasHandle_t)ctx->dev->cublas,
		ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
		(int)m, (int)n, (int)k,
		f64 ? (const void *)&one64 : (const void *)&one32, A, data,
		(int)lda, B, data, (int)ldb,
		f64 ? (const void *)&beta64 : (const void *)&beta32, C, data,
		(int)ldc, compute, CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS)
		return mg_error("%s: cublasGemmEx (%lld x %lld x %lld) failed: "
				"%s",
				op, (long long)m, (long long)n, (long long)k,
				cublasGetStatusString(s));
	return 0;
}

/* y = (or += when y_add: the GEMM's beta) x w^T + b. */
static int lin_fwd(struct mg_ctx *ctx, const char *op,
		   const struct mg_tensor *x, const struct mg_tensor *w,
		   const struct mg_tensor *b, struct mg_tensor *y, bool y_add)
{
	const int64_t out = w->shape[0], in = w->shape[1];
	const int64_t rows = in ? mg_tensor_numel(x) / in : 0;
	gemm_types t = {CUDA_R_32F, CUBLAS_COMPUTE_32F, false};
	if (types_for(ctx, op, x->dtype, &t))
		return -1;
	if (rows == 0 || out == 0)
		return 0;
	if (in == 0) {
		if (!y_add && mgc_zero(ctx, y->data, y->dtype, rows * out))
			return -1;
	} else if (gemm(ctx, op, t, true, false, out, rows, in, w->data, in,
			x->data, in, y_add ? 1 : 0, y->data, out)) {
		return -1;
	}
	if (b) {
		MGC_DISPATCH(op, x->dtype, bias_add, mgc_stream(ctx), y->data,
			     b->data, rows, out);
		return mgc_check_launch(op);
	}
	return 0;
}

extern "C" int mg_cuda_linear(struct mg_ctx *ctx, const struct mg_tensor *x,
			      const struct mg_tensor *w,
			      const struct mg_tensor *b, struct mg_tensor *y)
{
	return lin_fwd(ctx, "linear", x, w, b, y, false);
}

extern "C" int mg_cuda_linear_add(struct mg_ctx *ctx, const struct mg_tensor *x,
				  const struct mg_tensor *w,
				  const struct mg_tensor *b,
				  struct mg_tensor *y)
{
	return lin_fwd(ctx, "linear_add", x, w, b, y, true);
}

extern "C" int
mg_cuda_linear_backward(struct mg_ctx *ctx, const struct mg_tensor *x,
			const struct mg_tensor *w, const struct mg_tensor *dy,
			struct mg_tensor *dx, bool dx_add, struct mg_tensor *dw,
			struct mg_tensor *db)
{
	static const char op[] = "linear_backward";
	const int64_t out = w->shape[0], in = w->shape[1];
	const int64_t rows = in ? mg_tensor_numel(x) / in : 0;
	gemm_types t = {CUDA_R_32F, CUBLAS_COMPUTE_32F, false};
	if (types_for(ctx, op, x->dtype, &t))
		return -1;
	if (rows == 0 || out == 0 || in == 0) {
		if (dx && !dx_add &&
		    mgc_zero(ctx, dx->data, dx->dtype, mg_tensor_numel(dx)))
			return -1;
		return 0;
	}
	/* dx^T [in, rows] = (or +=) w^T [in, out] . dy^T [out, rows] */
	if (dx && gemm(ctx, op, t, false, false, in, rows, out, w->data, in,
		       dy->data, out, dx_add ? 1 : 0, dx->data, in))
		return -1;
	/* dw^T [in, out] += x^T [in, rows] . dy [rows, out] */
	if (dw && gemm(ctx, op, t, false, true, in, out, rows, x->data, in,
		       dy->data, out, 1, dw->data, in))
		return -1;
	if (db) {
		const int S = splits(rows);
		double *part = (double *)mgc_scratch(
			ctx, (size_t)S * out * sizeof(double));
		if (!part)
			return -1;
		MGC_DISPATCH(op, x->dtype, colsum, mgc_stream(ctx), dy->data,
			     rows, out, db->data, part, S);
		return mgc_check_launch(op);
	}
	return 0;
}
