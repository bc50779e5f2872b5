/*
 * host_optim.c - the CPU optimizer engine of host-offload strategies:
 * SGD and AdamW over master weights and state in host memory, hand
 * vectorised for AVX-512F and AVX2 (+F16C) with a portable C path, on a
 * persistent pthread pool. See host_optim.h for the contract.
 *
 * Bit-exactness with core/ops/cpu/optim.c is deliberate: every expression
 * keeps the reference's order (b1*m + (1-b1)*g, ((1-b2)*g)*g,
 * p*shrink - (step*m)/(sqrt(q)*rbc2 + eps)) and uses separate multiplies
 * and adds (no FMA intrinsics; CMake compiles ISO C11, where GCC does not
 * contract), so an offload run on the CPU can be compared with the
 * single-rank oracle exactly. The update is memory bound; FMAs would not
 * make it faster.
 */
#include "mg/kit/host_optim.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum isa { ISA_SCALAR = 0, ISA_AVX2, ISA_AVX512, ISA_COUNT };
static const char *const isa_names[ISA_COUNT] = {"scalar", "avx2", "avx512"};

/* Fewest elements worth a thread: waking one costs microseconds. */
#define GRAIN 16384
/* Thread shares start on multiples of this (256 B of F32): threads
 * rarely write the same cache line. */
#define SHARE_ALIGN 64
#define MAX_THREADS 1024

/* ------------------------------------------------------------------ */
/* Per-slice constants, computed exactly as core/ops/cpu/optim.c does.  */

struct adam_f {
	float b1, c1, b2, c2, eps, mul, step, rbc2, shrink;
};
struct adam_d {
	double b1, c1, b2, c2, eps, mul, step, rbc2, shrink;
};
struct sgd_f {
	float lr, mul, wd, mom, damp;
	bool buf, first, nest;
};
struct sgd_d {
	double lr, mul, wd, mom, damp;
	bool buf, first, nest;
};

#define ADAM_CONSTS(T, k, h, v, s)                                             \
	do {                                                                   \
		(k).step = (T)((double)(v)->lr / (v)->bias1);                  \
		(k).rbc2 = (T)(1.0 / sqrt((double)(v)->bias2));                \
		(k).shrink =                                                   \
			(s)->decay                                             \
				? (T)(1 - (double)(v)->lr * (h)->weight_decay) \
				: (T)1;                                        \
		(k).b1 = (T)(h)->beta1;                                        \
		(k).c1 = 1 - (k).b1;                                           \
		(k).b2 = (T)(h)->beta2;                                        \
		(k).c2 = 1 - (k).b2;                                           \
		(k).eps = (T)(h)->eps;                                         \
		(k).mul = (T)(v)->grad_mul;                                    \
	} while (0)

#define SGD_CONSTS(T, k, h, v, s)                                              \
	do {                                                                   \
		(k).lr = (T)(v)->lr;                                           \
		(k).mul = (T)(v)->grad_mul;                                    \
		(k).wd = (s)->decay ? (T)(h)->weight_decay : 0;                \
		(k).mom = (T)(h)->momentum;                                    \
		(k).damp = 1 - (T)(h)->dampening;                              \
		(k).buf = (h)->momentum != 0.0;                                \
		(k).first = (v)->first;                                        \
		(k).nest = (h)->nesterov;                                      \
	} while (0)

/* ------------------------------------------------------------------ */
/* Portable path (also every vector path's tail).                      */

static inline float bf16_to_f(uint16_t b)
{
	uint32_t x = (uint32_t)b << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

/* mg_float_to_bf16, inlined. */
static inline uint16_t f_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

static inline float load_g32(const void *g, enum mg_dtype gt, int64_t i)
{
	if (gt == MG_BF16)
		return bf16_to_f(((const uint16_t *)g)[i]);
	if (gt == MG_F16)
		return mg_half_to_float(((const uint16_t *)g)[i]);
	return ((const float *)g)[i];
}

static inline double load_g64(const void *g, enum mg_dtype gt, int64_t i)
{
	(void)gt;
	return ((const double *)g)[i];
}

static inline void store_lp(void *lp, enum mg_dtype lt, int64_t i, float x)
{
	((uint16_t *)lp)[i] =
		lt == MG_BF16 ? f_to_bf16(x) : mg_float_to_half(x);
}

/* Elements [i0, i1) of slice s; constants copied to locals so stores
 * through the float pointers cannot force reloads. */
#define DEFINE_SCALAR(T, SFX, SQRT, LOADG)                                     \
	static void adamw_##SFX##_scalar(const struct adam_##SFX *k,           \
					 const struct mg_optim_slice *s,       \
					 int64_t i0, int64_t i1)               \
	{                                                                      \
		T *p = s->param, *m = s->state[0], *q = s->state[1];           \
		const void *g = s->grad;                                       \
		void *lp = s->param_lp;                                        \
		const enum mg_dtype gt = s->grad_dtype, lt = s->lp_dtype;      \
		const T b1 = k->b1, c1 = k->c1, b2 = k->b2, c2 = k->c2;        \
		const T eps = k->eps, mul = k->mul, step = k->step;            \
		const T rbc2 = k->rbc2, shrink = k->shrink;                    \
		for (int64_t i = i0; i < i1; i++) {                            \
			T gi = LOADG(g, gt, i) * mul;                          \
			T mi = b1 * m[i] + c1 * gi;                            \
			T qi = b2 * q[i] + c2 * gi * gi;                       \
			m[i] = mi;                                             \
			q[i] = qi;                                             \
			T pi = p[i] * shrink -                                 \
			       step * mi / (SQRT(qi) * rbc2 + eps);            \
			p[i] = pi;                                             \
			if (lp)                                                \
				store_lp(lp, lt, i, (float)pi);                \
		}                                                              \
	}                                                                      \
	static void sgd_##SFX##_scalar(const struct sgd_##SFX *k,              \
				       const struct mg_optim_slice *s,         \
				       int64_t i0, int64_t i1)                 \
	{                                                                      \
		T *p = s->param, *buf = k->buf ? s->state[0] : NULL;           \
		const void *g = s->grad;                                       \
		void *lp = s->param_lp;                                        \
		const enum mg_dtype gt = s->grad_dtype, lt = s->lp_dtype;      \
		const T lr = k->lr, mul = k->mul, wd = k->wd, mom = k->mom;    \
		const T damp = k->damp;                                        \
		const bool first = k->first, nest = k->nest;                   \
		for (int64_t i = i0; i < i1; i++) {                            \
			T d = LOADG(g, gt, i) * mul + wd * p[i];               \
			if (buf) {                                             \
				T b = first ? d : mom * buf[i] + damp * d;     \
				buf[i] = b;                                    \
				d = nest ? d + mom * b : b;                    \
			}                                                      \
			T pi = p[i] - lr * d;                                  \
			p[i] = pi;                                             \
			if (lp)                                                \
				store_lp(lp, lt, i, (float)pi);                \
		}                                                              \
	}

DEFINE_SCALAR(float, f, sqrtf, load_g32)
DEFINE_SCALAR(double, d, sqrt, load_g64)

/* ------------------------------------------------------------------ */
/* x86 vector paths: AdamW, every dtype combination.                    */

#if defined(__x86_64__)
#define TGT_AVX2 __attribute__((target("avx2,f16c")))
#define TGT_AVX512 __attribute__((target("avx512f,avx2,f16c")))
#define INL static inline __attribute__((always_inline))
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* 8 floats to BF16, f_to_bf16 lane by lane. */
TGT_AVX2 INL __m128i bf16_x8(__m256 v)
{
	__m256i x = _mm256_castps_si256(v);
	__m256i hi = _mm256_srli_epi32(x, 16);
	__m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(
		x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
	r = _mm256_srli_epi32(r, 16);
	__m256i nan = _mm256_cmpgt_epi32(
		_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
		_mm256_set1_epi32(0x7f800000));
	r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)),
			       nan);
	return _mm_packus_epi32(_mm256_castsi256_si128(r),
				_mm256_extracti128_si256(r, 1));
}

/* 4 floats to BF16 (low 64 bits). */
TGT_AVX2 INL __m128i bf16_x4(__m128 v)
{
	__m128i x = _mm_castps_si128(v);
	__m128i hi = _mm_srli_epi32(x, 16);
	__m128i lsb = _mm_and_si128(hi, _mm_set1_epi32(1));
	__m128i r =
		_mm_add_epi32(x, _mm_add_epi32(lsb, _mm_set1_epi32(0x7fff)));
	r = _mm_srli_epi32(r, 16);
	__m128i nan =
		_mm_cmpgt_epi32(_mm_and_si128(x, _mm_set1_epi32(0x7fffffff)),
				_mm_set1_epi32(0x7f800000));
	r = _mm_blendv_epi8(r, _mm_or_si128(hi, _mm_set1_epi32(0x40)), nan);
	return _mm_packus_epi32(r, r);
}

TGT_AVX2 INL __m256 ld8_g(const void *g, enum mg_dtype gt, int64_t i)
{
	if (gt == MG_F32)
		return _mm256_loadu_ps((const float *)g + i);
	__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)g + i));
	if (gt == MG_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(
		_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

TGT_AVX2 INL void st8_lp(void *lp, enum mg_dtype lt, int64_t i, __m256 v)
{
	__m128i h = lt == MG_F16 ? _mm256_cvtps_ph(v, RNE) : bf16_x8(v);
	_mm_storeu_si128((__m128i *)((uint16_t *)lp + i), h);
}

TGT_AVX2 INL void st4_lp(void *lp, enum mg_dtype lt, int64_t i, __m128 v)
{
	__m128i h = lt == MG_F16 ? _mm_cvtps_ph(v, RNE) : bf16_x4(v);
	_mm_storel_epi64((__m128i *)((uint16_t *)lp + i), h);
}

TGT_AVX2 static void adamw_f_avx2(const struct adam_f *k,
				  const struct mg_optim_slice *s, int64_t i0,
				  int64_t i1)
{
	float *p = s->param, *m = s->state[0], *q = s->state[1];
	const void *g = s->grad;
	void *lp = s->param_lp;
	const enum mg_dtype gt = s->grad_dtype, lt = s->lp_dtype;
	const __m256 b1 = _mm256_set1_ps(k->b1), c1 = _mm256_set1_ps(k->c1);
	const __m256 b2 = _mm256_set1_ps(k->b2), c2 = _mm256_set1_ps(k->c2);
	const __m256 eps = _mm256_set1_ps(k->eps), mul = _mm256_set1_ps(k->mul);
	const __m256 step = _mm256_set1_ps(k->step);
	const __m256 rbc2 = _mm256_set1_ps(k->rbc2);
	const __m256 shrink = _mm256_set1_ps(k->shrink);
	int64_t i = i0;
	for (; i + 8 <= i1; i += 8) {
		__m256 gi = _mm256_mul_ps(ld8_g(g, gt, i), mul);
		__m256 mi =
			_mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(m + i)),
				      _mm256_mul_ps(c1, gi));
		__m256 qi =
			_mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(q + i)),
				      _mm256_mul_ps(_mm256_mul_ps(c2, gi), gi));
		_mm256_storeu_ps(m + i, mi);
		_mm256_storeu_ps(q + i, qi);
		__m256 den = _mm256_add_ps(
			_mm256_mul_ps(_mm256_sqrt_ps(qi), rbc2), eps);
		__m256 pi = _mm256_sub_ps(
			_mm256_mul_ps(_mm256_loadu_ps(p + i), shrink),
			_mm256_div_ps(_mm256_mul_ps(step, mi), den));
		_mm256_storeu_ps(p + i, pi);
		if (lp)
			st8_lp(lp, lt, i, pi);
	}
	adamw_f_scalar(k, s, i, i1);
}

TGT_AVX2 static void adamw_d_avx2(const struct adam_d *k,
				  const struct mg_optim_slice *s, int64_t i0,
				  int64_t i1)
{
	double *p = s->param, *m = s->state[0], *q = s->state[1];
	const double *g = s->grad;
	void *lp = s->param_lp;
	const enum mg_dtype lt = s->lp_dtype;
	const __m256d b1 = _mm256_set1_pd(k->b1), c1 = _mm256_set1_pd(k->c1);
	const __m256d b2 = _mm256_set1_pd(k->b2), c2 = _mm256_set1_pd(k->c2);
	const __m256d eps = _mm256_set1_pd(k->eps);
	const __m256d mul = _mm256_set1_pd(k->mul);
	const __m256d step = _mm256_set1_pd(k->step);
	const __m256d rbc2 = _mm256_set1_pd(k->rbc2);
	const __m256d shrink = _mm256_set1_pd(k->shrink);
	int64_t i = i0;
	for (; i + 4 <= i1; i += 4) {
		__m256d gi = _mm256_mul_pd(_mm256_loadu_pd(g + i), mul);
		__m256d mi =
			_mm256_add_pd(_mm256_mul_pd(b1, _mm256_loadu_pd(m + i)),
				      _mm256_mul_pd(c1, gi));
		__m256d qi =
			_mm256_add_pd(_mm256_mul_pd(b2, _mm256_loadu_pd(q + i)),
				      _mm256_mul_pd(_mm256_mul_pd(c2, gi), gi));
		_mm256_storeu_pd(m + i, mi);
		_mm256_storeu_pd(q + i, qi);
		__m256d den = _mm256_add_pd(
			_mm256_mul_pd(_mm256_sqrt_pd(qi), rbc2), eps);
		__m256d pi = _mm256_sub_pd(
			_mm256_mul_pd(_mm256_loadu_pd(p + i), shrink),
			_mm256_div_pd(_mm256_mul_pd(step, mi), den));
		_mm256_storeu_pd(p + i, pi);
		if (lp)
			st4_lp(lp, lt, i, _mm256_cvtpd_ps(pi));
	}
	adamw_d_scalar(k, s, i, i1);
}

/* 16 floats to BF16, f_to_bf16 lane by lane. */
TGT_AVX512 INL __m256i bf16_x16(__m512 v)
{
	__m512i x = _mm512_castps_si512(v);
	__m512i hi = _mm512_srli_epi32(x, 16);
	__m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
	__m512i r = _mm512_add_epi32(
		x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
	r = _mm512_srli_epi32(r, 16);
	__mmask16 nan = _mm512_cmpgt_epu32_mask(
		_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
		_mm512_set1_epi32(0x7f800000));
	r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(r);
}

TGT_AVX512 INL __m512 ld16_g(const void *g, enum mg_dtype gt, int64_t i)
{
	if (gt == MG_F32)
		return _mm512_loadu_ps((const float *)g + i);
	__m256i h =
		_mm256_loadu_si256((const __m256i *)((const uint16_t *)g + i));
	if (gt == MG_F16)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(
		_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

TGT_AVX512 INL void st16_lp(void *lp, enum mg_dtype lt, int64_t i, __m512 v)
{
	__m256i h = lt == MG_F16 ? _mm512_cvtps_ph(v, RNE) : bf16_x16(v);
	_mm256_storeu_si256((__m256i *)((uint16_t *)lp + i), h);
}

TGT_AVX512 static void adamw_f_avx512(const struct adam_f *k,
				      const struct mg_optim_slice *s,
				      int64_t i0, int64_t i1)
{
	float *p = s->param, *m = s->state[0], *q = s->state[1];
	const void *g = s->grad;
	void *lp = s->param_lp;
	const enum mg_dtype gt = s->grad_dtype, lt = s->lp_dtype;
	const __m512 b1 = _mm512_set1_ps(k->b1), c1 = _mm512_set1_ps(k->c1);
	const __m512 b2 = _mm512_set1_ps(k->b2), c2 = _mm512_set1_ps(k->c2);
	const __m512 eps = _mm512_set1_ps(k->eps), mul = _mm512_set1_ps(k->mul);
	const __m512 step = _mm512_set1_ps(k->step);
	const __m512 rbc2 = _mm512_set1_ps(k->rbc2);
	const __m512 shrink = _mm512_set1_ps(k->shrink);
	int64_t i = i0;
	for (; i + 16 <= i1; i += 16) {
		__m512 gi = _mm512_mul_ps(ld16_g(g, gt, i), mul);
		__m512 mi =
			_mm512_add_ps(_mm512_mul_ps(b1, _mm512_loadu_ps(m + i)),
				      _mm512_mul_ps(c1, gi));
		__m512 qi =
			_mm512_add_ps(_mm512_mul_ps(b2, _mm512_loadu_ps(q + i)),
				      _mm512_mul_ps(_mm512_mul_ps(c2, gi), gi));
		_mm512_storeu_ps(m + i, mi);
		_mm512_storeu_ps(q + i, qi);
		__m512 den = _mm512_add_ps(
			_mm512_mul_ps(_mm512_sqrt_ps(qi), rbc2), eps);
		__m512 pi = _mm512_sub_ps(
			_mm512_mul_ps(_mm512_loadu_ps(p + i), shrink),
			_mm512_div_ps(_mm512_mul_ps(step, mi), den));
		_mm512_storeu_ps(p + i, pi);
		if (lp)
			st16_lp(lp, lt, i, pi);
	}
	adamw_f_scalar(k, s, i, i1);
}

TGT_AVX512 static void adamw_d_avx512(const struct adam_d *k,
				      const struct mg_optim_slice *s,
				      int64_t i0, int64_t i1)
{
	double *p = s->param, *m = s->state[0], *q = s->state[1];
	const double *g = s->grad;
	void *lp = s->param_lp;
	const enum mg_dtype lt = s->lp_dtype;
	const __m512d b1 = _mm512_set1_pd(k->b1), c1 = _mm512_set1_pd(k->c1);
	const __m512d b2 = _mm512_set1_pd(k->b2), c2 = _mm512_set1_pd(k->c2);
	const __m512d eps = _mm512_set1_pd(k->eps);
	const __m512d mul = _mm512_set1_pd(k->mul);
	const __m512d step = _mm512_set1_pd(k->step);
	const __m512d rbc2 = _mm512_set1_pd(k->rbc2);
	const __m512d shrink = _mm512_set1_pd(k->shrink);
	int64_t i = i0;
	for (; i + 8 <= i1; i += 8) {
		__m512d gi = _mm512_mul_pd(_mm512_loadu_pd(g + i), mul);
		__m512d mi =
			_mm512_add_pd(_mm512_mul_pd(b1, _mm512_loadu_pd(m + i)),
				      _mm512_mul_pd(c1, gi));
		__m512d qi =
			_mm512_add_pd(_mm512_mul_pd(b2, _mm512_loadu_pd(q + i)),
				      _mm512_mul_pd(_mm512_mul_pd(c2, gi), gi));
		_mm512_storeu_pd(m + i, mi);
		_mm512_storeu_pd(q + i, qi);
		__m512d den = _mm512_add_pd(
			_mm512_mul_pd(_mm512_sqrt_pd(qi), rbc2), eps);
		__m512d pi = _mm512_sub_pd(
			_mm512_mul_pd(_mm512_loadu_pd(p + i), shrink),
			_mm512_div_pd(_mm512_mul_pd(step, mi), den));
		_mm512_storeu_pd(p + i, pi);
		if (lp)
			st8_lp(lp, lt, i, _mm512_cvtpd_ps(pi));
	}
	adamw_d_scalar(k, s, i, i1);
}
#endif /* __x86_64__ */

static bool isa_available(enum isa i)
{
	if (i == ISA_SCALAR)
		return true;
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c"))
		return false;
	return i == ISA_AVX2 || __builtin_cpu_supports("avx512f");
#else
	return false;
#endif
}

/* ------------------------------------------------------------------ */
/* One run, split into thread shares.                                   */

struct job {
	const struct mg_optim_hparams *h;
	const struct mg_optim_vals *v;
	const struct mg_optim_slice *s;
	int n;
	int use; /* threads with work */
	int64_t total;
	enum isa isa;
	char *zero; /* set: the job zeroes total bytes here instead */
};

/* Elements [i0, i1) of slice s. */
static void run_piece(const struct job *j, const struct mg_optim_slice *s,
		      int64_t i0, int64_t i1)
{
	const struct mg_optim_hparams *h = j->h;
	const struct mg_optim_vals *v = j->v;
	if (h->kind == MG_OPTIM_ADAMW && s->dtype == MG_F32) {
		struct adam_f k;
		ADAM_CONSTS(float, k, h, v, s);
#if defined(__x86_64__)
		if (j->isa == ISA_AVX512)
			adamw_f_avx512(&k, s, i0, i1);
		else if (j->isa == ISA_AVX2)
			adamw_f_avx2(&k, s, i0, i1);
		else
#endif
			adamw_f_scalar(&k, s, i0, i1);
	} else if (h->kind == MG_OPTIM_ADAMW) {
		struct adam_d k;
		ADAM_CONSTS(double, k, h, v, s);
#if defined(__x86_64__)
		if (j->isa == ISA_AVX512)
			adamw_d_avx512(&k, s, i0, i1);
		else if (j->isa == ISA_AVX2)
			adamw_d_avx2(&k, s, i0, i1);
		else
#endif
			adamw_d_scalar(&k, s, i0, i1);
	} else if (s->dtype == MG_F32) {
		struct sgd_f k;
		SGD_CONSTS(float, k, h, v, s);
		sgd_f_scalar(&k, s, i0, i1);
	} else {
		struct sgd_d k;
		SGD_CONSTS(double, k, h, v, s);
		sgd_d_scalar(&k, s, i0, i1);
	}
}

/* Start of thread t's share of the concatenated slices: an even split,
 * rounded down to SHARE_ALIGN. */
static int64_t share_start(const struct job *j, int t)
{
	if (t >= j->use)
		return j->total;
	int64_t q = j->total / j->use, r = j->total % j->use;
	int64_t b = q * t + r * t / j->use;
	return b - b % SHARE_ALIGN;
}

static void run_share(const struct job *j, int t)
{
	int64_t lo = share_start(j, t), hi = share_start(j, t + 1), off = 0;
	if (j->zero) {
		memset(j->zero + lo, 0, (size_t)(hi - lo));
		return;
	}
	for (int k = 0; k < j->n && off < hi; k++) {
		int64_t end = off + j->s[k].n;
		int64_t a = lo > off ? lo : off, b = hi < end ? hi : end;
		if (a < b)
			run_piece(j, &j->s[k], a - off, b - off);
		off = end;
	}
}

/* ------------------------------------------------------------------ */
/* The pool.                                                            */

struct worker {
	struct mg_host_optim *o;
	int id;
	pthread_t tid;
};

struct mg_host_optim {
	int threads;
	enum isa isa;
	pthread_mutex_t run_mu; /* one run at a time */
	pthread_mutex_t mu;	/* guards the fields below */
	pthread_cond_t wake, done;
	uint64_t gen; /* bumped per run */
	int pending;  /* workers still busy with this run */
	bool quit;
	const struct job *job;
	struct worker *w;
	int nw; /* workers started */
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct mg_host_optim *o = w->o;
	uint64_t seen = 0;
	pthread_mutex_lock(&o->mu);
	for (;;) {
		while (!o->quit && o->gen == seen)
			pthread_cond_wait(&o->wake, &o->mu);
		if (o->quit)
			break;
		seen = o->gen;
		const struct job *j = o->job;
		pthread_mutex_unlock(&o->mu);
		run_share(j, w->id);
		pthread_mutex_lock(&o->mu);
		if (--o->pending == 0)
			pthread_cond_signal(&o->done);
	}
	pthread_mutex_unlock(&o->mu);
	return NULL;
}

int mg_host_optim_cores(void)
{
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

static int pick_isa(enum isa *out)
{
	const char *e = getenv("MG_HOST_OPTIM_ISA");
	if (e && *e) {
		for (int i = 0; i < ISA_COUNT; i++) {
			if (strcmp(e, isa_names[i]) != 0)
				continue;
			if (!isa_available((enum isa)i))
				return mg_error(
					"MG_HOST_OPTIM_ISA=%s: this CPU "
					"lacks it",
					e);
			*out = (enum isa)i;
			return 0;
		}
		return mg_error(
			"MG_HOST_OPTIM_ISA=%s: expected scalar, avx2 or "
			"avx512",
			e);
	}
	*out = isa_available(ISA_AVX512) ? ISA_AVX512
	       : isa_available(ISA_AVX2) ? ISA_AVX2
					 : ISA_SCALAR;
	return 0;
}

int mg_host_optim_create(int threads, struct mg_host_optim **out)
{
	*out = NULL;
	if (threads < 0)
		return mg_error("host optimizer: %d threads", threads);
	if (threads == 0)
		threads = mg_host_optim_cores();
	if (threads > MAX_THREADS)
		threads = MAX_THREADS;
	enum isa isa = ISA_SCALAR;
	if (pick_isa(&isa) != 0)
		return -1;
	struct mg_host_optim *o = calloc(1, sizeof(*o));
	struct worker *w =
		threads > 1 ? calloc((size_t)threads - 1, sizeof(*w)) : NULL;
	if (!o || (threads > 1 && !w)) {
		free(o);
		free(w);
		return mg_error("host optimizer: out of memory");
	}
	o->threads = threads;
	o->isa = isa;
	o->w = w;
	pthread_mutex_init(&o->run_mu, NULL);
	pthread_mutex_init(&o->mu, NULL);
	pthread_cond_init(&o->wake, NULL);
	pthread_cond_init(&o->done, NULL);
	/* Workers block every signal: they go to the application's
	 * threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = 0;
	for (int i = 0; i < threads - 1; i++) {
		w[i].o = o;
		w[i].id = i + 1;
		rc = pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
		if (rc != 0)
			break;
		o->nw++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		int started = o->nw;
		mg_host_optim_destroy(o);
		return mg_error("host optimizer: starting thread %d of %d: %s",
				started + 2, threads, strerror(rc));
	}
	*out = o;
	return 0;
}

void mg_host_optim_destroy(struct mg_host_optim *o)
{
	if (!o)
		return;
	pthread_mutex_lock(&o->mu);
	o->quit = true;
	pthread_cond_broadcast(&o->wake);
	pthread_mutex_unlock(&o->mu);
	for (int i = 0; i < o->nw; i++)
		pthread_join(o->w[i].tid, NULL);
	pthread_cond_destroy(&o->done);
	pthread_cond_destroy(&o->wake);
	pthread_mutex_destroy(&o->mu);
	pthread_mutex_destroy(&o->run_mu);
	free(o->w);
	free(o);
}

const char *mg_host_optim_isa(const struct mg_host_optim *o)
{
	return isa_names[o->isa];
}

int mg_host_optim_threads(const struct mg_host_optim *o)
{
	return o->threads;
}

/* Job j on up to want threads (at least one, at most the pool), the
 * caller taking share 0; returns when every share is done. */
static void pool_run(struct mg_host_optim *o, struct job *j, int64_t want)
{
	j->use = want < 1 ? 1 : want > o->nw + 1 ? o->nw + 1 : (int)want;
	if (j->use == 1) {
		run_share(j, 0);
		return;
	}
	pthread_mutex_lock(&o->run_mu);
	pthread_mutex_lock(&o->mu);
	o->job = j;
	o->pending = o->nw;
	o->gen++;
	pthread_cond_broadcast(&o->wake);
	pthread_mutex_unlock(&o->mu);
	run_share(j, 0);
	pthread_mutex_lock(&o->mu);
	while (o->pending > 0)
		pthread_cond_wait(&o->done, &o->mu);
	o->job = NULL;
	pthread_mutex_unlock(&o->mu);
	pthread_mutex_unlock(&o->run_mu);
}

static int check_slice(const struct mg_optim_hparams *h,
		       const struct mg_optim_slice *s, int i)
{
	if (s->dtype != MG_F32 && s->dtype != MG_F64)
		return mg_error("host optimizer: slice %d: master dtype %s "
				"unsupported",
				i, mg_dtype_name(s->dtype));
	bool lp_grad = s->grad_dtype == MG_F16 || s->grad_dtype == MG_BF16;
	if (s->grad_dtype != s->dtype && !(s->dtype == MG_F32 && lp_grad))
		return mg_error("host optimizer: slice %d: %s gradients for a "
				"%s master",
				i, mg_dtype_name(s->grad_dtype),
				mg_dtype_name(s->dtype));
	if (s->param_lp && s->lp_dtype != MG_F16 && s->lp_dtype != MG_BF16)
		return mg_error("host optimizer: slice %d: low-precision copy "
				"in %s",
				i, mg_dtype_name(s->lp_dtype));
	if (s->n < 0)
		return mg_error("host optimizer: slice %d: %lld elements", i,
				(long long)s->n);
	int slots = mg_optim_state_slots(h);
	if (s->n > 0 && (!s->param || !s->grad || (slots > 0 && !s->state[0]) ||
			 (slots > 1 && !s->state[1])))
		return mg_error("host optimizer: slice %d: missing parameter, "
				"gradient or state",
				i);
	return 0;
}

int mg_host_optim_run(struct mg_host_optim *o, const struct mg_optim_hparams *h,
		      const struct mg_optim_vals *v,
		      const struct mg_optim_slice *s, int n)
{
	if (h->kind != MG_OPTIM_SGD && h->kind != MG_OPTIM_ADAMW)
		return mg_error("host optimizer: unknown optimizer %d",
				(int)h->kind);
	int64_t total = 0;
	for (int i = 0; i < n; i++) {
		if (check_slice(h, &s[i], i) != 0)
			return -1;
		total += s[i].n;
	}
	if (v->skip || total == 0)
		return 0;
	struct job j = {
		.h = h, .v = v, .s = s, .n = n, .total = total, .isa = o->isa};
	pool_run(o, &j, total / GRAIN);
	return 0;
}

int mg_host_optim_zero(struct mg_host_optim *o, void *p, size_t bytes)
{
	if (!p && bytes)
		return mg_error("host optimizer: zeroing %zu bytes at NULL",
				bytes);
	if (!bytes)
		return 0;
	struct job j = {.total = (int64_t)bytes, .zero = p, .isa = o->isa};
	/* As many threads as a run over the same floats would use. */
	pool_run(o, &j, (int64_t)(bytes / sizeof(float)) / GRAIN);
	return 0;
}

int mg_host_optim_default_threads(const struct mg_ctx *ctx)
{
	int cores = mg_host_optim_cores();
	int local = ctx->local_world > 0 ? ctx->local_world : 1;
	if (cores >= local * 2)
		cores /= local;
	return cores > 0 ? cores : 1;
}
