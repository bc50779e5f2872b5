/*
 * nf4.c - the NF4 format on the host (include/mg/nf4.h): the code table,
 * the nested 8-bit map, the blob layout, and quantize / dequantize with
 * bitsandbytes' rounding decisions, so that a model loaded here in 4 bits
 * holds the bytes bitsandbytes would have produced.
 *
 * All arithmetic is f32, one rounding per operation: this file is C11
 * without GNU extensions, where GCC and Clang do not contract a * b + c
 * into a fused multiply-add, and the CUDA twin uses __fmul_rn/__fadd_rn.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/nf4_impl.h"
#include "runtime/runtime.h"

const float mg_nf4_code[16] = {
	-1.0f,
	-0.6961928009986877f,
	-0.5250730514526367f,
	-0.39491748809814453f,
	-0.28444138169288635f,
	-0.18477343022823334f,
	-0.09105003625154495f,
	0.0f,
	0.07958029955625534f,
	0.16093020141124725f,
	0.24611230194568634f,
	0.33791524171829224f,
	0.44070982933044434f,
	0.5626170039176941f,
	0.7229568362236023f,
	1.0f,
};

static float nested_map[256];
static pthread_once_t nested_once = PTHREAD_ONCE_INIT;

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/*
 * create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for
 * exponent i = 0..6, the 2^i means of adjacent points of the f32
 * linspace(0.1, 1, 2^i + 1), times 10^(i-6) rounded to f32, with both
 * signs; then 0 and 1.0; sorted. The linspace is torch's: step = (end -
 * start) / (n - 1), then start + step * j in the first half and end -
 * step * (n-1-j) in the second, each a fused multiply-add as its compiled
 * kernel computes them. Rounded separately, 21 of the 254 entries would
 * be one or two ulps off bitsandbytes' published map; fused, all equal
 * (tests/nf4 checks some of them).
 */
static void build_nested_map(void)
{
	static const double scale[7] = {1e-6, 1e-5, 1e-4, 1e-3,
					1e-2, 1e-1, 1e0};
	int k = 0;
	for (int i = 0; i < 7; i++) {
		const int n = (1 << i) + 1, half = n / 2;
		const float start = 0.1f, end = 1.0f;
		const float step = (end - start) / (float)(n - 1);
		const float s = (float)scale[i];
		float pts[65];
		for (int j = 0; j < n; j++)
			pts[j] = j < half
					 ? fmaf(step, (float)j, start)
					 : fmaf(-step, (float)(n - 1 - j), end);
		for (int j = 0; j + 1 < n; j++) {
			float mean = (pts[j] + pts[j + 1]) / 2.0f;
			nested_map[k++] = s * mean;
			nested_map[k++] = -(s * mean);
		}
	}
	nested_map[k++] = 0.0f;
	nested_map[k++] = 1.0f;
	qsort(nested_map, 256, sizeof(float), cmp_float);
}

const float *mg_nf4_nested_map(void)
{
	pthread_once(&nested_once, build_nested_map);
	return nested_map;
}

static size_t align_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

struct mg_nf4_layout mg_nf4_layout(int64_t n)
{
	struct mg_nf4_layout l;
	memset(&l, 0, sizeof l);
	if (n <= 0)
		return l;
	l.n = n;
	l.nblocks = (n + MG_NF4_BLOCK - 1) / MG_NF4_BLOCK;
	l.nnested = (l.nblocks + MG_NF4_NESTED_BLOCK - 1) / MG_NF4_NESTED_BLOCK;
	l.codes = 0;
	l.absmax = (size_t)(n + 1) / 2;
	l.nested_absmax = align_up(l.absmax + (size_t)l.nblocks, 4);
	l.offset = l.nested_absmax + 4 * (size_t)l.nnested;
	l.bytes = align_up(l.offset + 4, 256);
	return l;
}

/*
 * bitsandbytes' NF4 decision thresholds (the f32 literals of its
 * dQuantizeNF4 tree), ascending. The decimals are the f64 midpoints of
 * the table values; an f32 literal rounds its decimal directly, which
 * puts four of them (0, 8, 12 and 14) one ulp from the f32 midpoint.
 * They are used as they are, since they decide bitsandbytes' codes.
 */
const float mg_nf4_threshold[15] = {
	-0.8480964004993439f,	-0.6106329262256622f,  -0.4599952697753906f,
	-0.33967943489551544f,	-0.23460740596055984f, -0.13791173323988914f,
	-0.045525018125772476f, 0.03979014977812767f,  0.1202552504837513f,
	0.2035212516784668f,	0.2920137718319893f,   0.3893125355243683f,
	0.5016634166240692f,	0.6427869200706482f,   0.8614784181118011f,
};

/*
 * The NF4 code of x (x already scaled by the block absmax): the number of
 * thresholds x is strictly above, by a four-step branch-free binary
 * search. bitsandbytes walks a tree of strict x > threshold tests, so a
 * value exactly on a threshold takes the LOWER code, and NaN fails every
 * test and takes code 0; the search decides the same.
 */
static inline unsigned nf4_quant(float x)
{
	unsigned c = (unsigned)(x > mg_nf4_threshold[7]) << 3;
	c += (unsigned)(x > mg_nf4_threshold[c + 3]) << 2;
	c += (unsigned)(x > mg_nf4_threshold[c + 1]) << 1;
	c += (unsigned)(x > mg_nf4_threshold[c]);
	return c;
}

/*
 * The nested map index of x (x already divided by the nested absmax), as
 * bitsandbytes' 8-bit search (dQuantize, not stochastic) decides: seven
 * halving steps from index 127 (x > map[p] goes up by 64, 32, ..., 1,
 * else down), remembering the last index visited on each side, then the
 * nearer of the final index p and that neighbour, where "nearer" compares
 * x with the f32 midpoint (a + b) * 0.5: above it going up, below it going
 * down, else p. The final p is always even, so a tie between two adjacent
 * entries goes to the even index. NaN ends at index 0.
 */
static unsigned nested_quant(const float *map, float x)
{
	int p = 127, lo_p = 0, hi_p = 255;
	float lo = -1.0f, hi = 1.0f, v = map[p];
	for (int i = 64; i > 0; i >>= 1) {
		if (x > v) {
			lo_p = p;
			lo = v;
			p += i;
		} else {
			hi_p = p;
			hi = v;
			p -= i;
		}
		v = map[p];
	}
	if (hi_p == 255)
		hi = map[255];
	if (lo_p == 0)
		lo = map[0];
	if (x > v)
		return x > (hi + v) * 0.5f ? (unsigned)hi_p : (unsigned)p;
	return x < (lo + v) * 0.5f ? (unsigned)lo_p : (unsigned)p;
}

/* Quantize block b of x into the codes and return its absmax (-1: the
 * block holds a NaN or an infinity). */
static float quant_block(unsigned char *codes, const float *x, int64_t n,
			 int64_t b)
{
	const int64_t i0 = b * MG_NF4_BLOCK;
	const unsigned len =
		(unsigned)(n - i0 < MG_NF4_BLOCK ? n - i0 : MG_NF4_BLOCK);
	float m = 0.0f;
	for (unsigned i = 0; i < len; i++) {
		float a = fabsf(x[i0 + i]);
		if (!(a <= 3.4028234663852886e38f))
			return -1.0f;
		m = a > m ? a : m;
	}
	/* bitsandbytes scales by the f32 reciprocal of the absmax. An
	 * all-zero block has absmax 0: there the reciprocal is infinite, x
	 * * inf is NaN and bitsandbytes stores code 0 (-1.0), which decodes
	 * to -1 times the double-quantized absmax, not exactly 0. We store
	 * code 7 (0.0) instead, which decodes to 0 whatever the absmax. */
	unsigned char q[MG_NF4_BLOCK + 1];
	if (m > 0) {
		const float r = 1.0f / m;
		for (unsigned i = 0; i < len; i++)
			q[i] = (unsigned char)nf4_quant(x[i0 + i] * r);
	} else {
		memset(q, 7, len);
	}
	q[len] = 0; /* odd len: the last low nibble */
	unsigned char *c = codes + i0 / 2;
	for (unsigned i = 0; i < len; i += 2)
		c[i / 2] = (unsigned char)(q[i] << 4 | q[i + 1]);
	return m;
}

int mg_nf4_quantize_host(void *blob, const float *x, int64_t n)
{
	if (!blob || !x || n < 1 || ((uintptr_t)blob & 3))
		return mg_error("nf4 quantize: %s",
				n < 1	      ? "no elements"
				: !blob || !x ? "NULL argument"
					      : "blob not 4-byte aligned");
	const float *map = mg_nf4_nested_map();
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	unsigned char *base = blob;
	float *absmax = malloc((size_t)l.nblocks * sizeof(float));
	if (!absmax)
		return mg_error("nf4 quantize: out of memory (%lld blocks)",
				(long long)l.nblocks);
	memset(base, 0, l.bytes);

	int64_t bad = -1;
#pragma omp parallel for schedule(static) if (l.nblocks > 256)
	for (int64_t b = 0; b < l.nblocks; b++) {
		absmax[b] = quant_block(base + l.codes, x, n, b);
		if (absmax[b] < 0) {
#pragma omp critical(mg_nf4_bad)
			if (bad < 0 || b < bad)
				bad = b;
		}
	}
	if (bad >= 0) {
		free(absmax);
		return mg_error("nf4 quantize: block %lld (elements from %lld) "
				"holds a NaN or an infinity",
				(long long)bad, (long long)bad * MG_NF4_BLOCK);
	}

	/* offset: the mean of the absmax in f64, in the fixed order of
	 * nf4_impl.h (the CUDA quantizer's), rounded once. torch's mean
	 * (f32 accumulation on CUDA) may differ in its last bits, and with
	 * it some nested indices near a tie; the offset is stored, so
	 * decoding is unaffected. */
	const int64_t nchunks =
		(l.nblocks + MG_NF4_SUM_CHUNK - 1) / MG_NF4_SUM_CHUNK;
	double *part = malloc((size_t)nchunks * sizeof *part);
	if (!part) {
		free(absmax);
		return mg_error("nf4 quantize: out of memory");
	}
#pragma omp parallel for schedule(static) if (nchunks > 4)
	for (int64_t c = 0; c < nchunks; c++) {
		const int64_t b1 = (c + 1) * MG_NF4_SUM_CHUNK < l.nblocks
					   ? (c + 1) * MG_NF4_SUM_CHUNK
					   : l.nblocks;
		double s = 0;
		for (int64_t b = c * MG_NF4_SUM_CHUNK; b < b1; b++)
			s += absmax[b];
		part[c] = s;
	}
	double sum = 0;
	for (int64_t c = 0; c < nchunks; c++)
		sum += part[c];
	free(part);
	const float offset = (float)(sum / (double)l.nblocks);

	unsigned char *qabs = base + l.absmax;
	float *nested = (float *)(base + l.nested_absmax);
#pragma omp parallel for schedule(static) if (l.nnested > 16)
	for (int64_t g = 0; g < l.nnested; g++) {
		const int64_t b0 = g * MG_NF4_NESTED_BLOCK;
		const int64_t b1 = b0 + MG_NF4_NESTED_BLOCK < l.nblocks
					   ? b0 + MG_NF4_NESTED_BLOCK
					   : l.nblocks;
		float m = 0.0f;
		for (int64_t b = b0; b < b1; b++) {
			float a = fabsf(absmax[b] - offset);
			m = a > m ? a : m;
		}
		/* As bitsandbytes: the f32 reciprocal; for m = 0 every
		 * value is NaN and takes index 0, which decodes to
		 * map[0] * 0 + offset = offset exactly. */
		const float r = 1.0f / m;
		for (int64_t b = b0; b < b1; b++)
			qabs[b] = (unsigned char)nested_quant(
				map, (absmax[b] - offset) * r);
		nested[g] = m;
	}
	memcpy(base + l.offset, &offset, sizeof offset);
	free(absmax);
	return 0;
}

int64_t mg_nf4_decode_blocks(float *out, const void *blob, int64_t n,
			     int64_t b0, int64_t nb)
{
	const float *map = mg_nf4_nested_map();
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	const unsigned char *base = blob;
	const unsigned char *qabs = base + l.absmax;
	const float *nested = (const float *)(base + l.nested_absmax);
	float offset;
	memcpy(&offset, base + l.offset, sizeof offset);
	int64_t done = 0;
	for (int64_t b = b0; b < b0 + nb && b < l.nblocks; b++) {
		/* Two roundings, as bitsandbytes (dequantize the absmax, then
		 * add the offset): C11 mode keeps them apart. */
		float a = map[qabs[b]] * nested[b / MG_NF4_NESTED_BLOCK];
		a = a + offset;
		const int64_t i0 = b * MG_NF4_BLOCK;
		const int len =
			(int)(n - i0 < MG_NF4_BLOCK ? n - i0 : MG_NF4_BLOCK);
		const unsigned char *c = base + l.codes + i0 / 2;
		float *o = out + done;
		for (int j = 0; 2 * j + 1 < len; j++) {
			o[2 * j] = mg_nf4_code[c[j] >> 4] * a;
			o[2 * j + 1] = mg_nf4_code[c[j] & 15u] * a;
		}
		if (len & 1)
			o[len - 1] = mg_nf4_code[c[len / 2] >> 4] * a;
		done += len;
	}
	return done;
}

int mg_nf4_dequantize_host(float *out, const void *blob, int64_t n)
{
	if (!out || !blob || n < 1 || ((uintptr_t)blob & 3))
		return mg_error("nf4 dequantize: %s",
				n < 1		? "no elements"
				: !out || !blob ? "NULL argument"
						: "blob not 4-byte aligned");
	const int64_t nblocks = mg_nf4_layout(n).nblocks;
	const int64_t per = 64;	   /* blocks per task: 4096 elements */
	(void)mg_nf4_nested_map(); /* built before the threads start */
#pragma omp parallel for schedule(static) if (nblocks > 256)
	for (int64_t t = 0; t < (nblocks + per - 1) / per; t++)
		mg_nf4_decode_blocks(out + t * per * MG_NF4_BLOCK, blob, n,
				     t * per, per);
	return 0;
}
