/*
 * test_nf4.c - the NF4 format (mg/nf4.h) against values worked out by
 * hand from bitsandbytes' description: the code table and its decision
 * midpoints (bitsandbytes' own constants), the tie rule, nibble order,
 * partial blocks and odd n, zero blocks, the double quantization on a
 * three-block case, the nested map's shape and end points, the blob
 * layout, the round-trip error bound on normal data, thread-count
 * independence, and the CPU ops mg_op_nf4_dequantize and
 * mg_op_nf4_quantize.
 *
 * Usage: test_nf4 [case]   (no case: all of them)
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define MG_OP_TEST_SEED 4242
#include "../common/op_test_util.h"

/* bitsandbytes' dQuantizeNF4 thresholds, ascending: f64 midpoints of the
 * table values as f32 literals (rounded directly, four land one ulp off
 * the f32 midpoints). */
static const float bnb_mid[15] = {
	-0.8480964004993439f,	-0.6106329262256622f,  -0.4599952697753906f,
	-0.33967943489551544f,	-0.23460740596055984f, -0.13791173323988914f,
	-0.045525018125772476f, 0.03979014977812767f,  0.1202552504837513f,
	0.2035212516784668f,	0.2920137718319893f,   0.3893125355243683f,
	0.5016634166240692f,	0.6427869200706482f,   0.8614784181118011f,
};

static unsigned char *quant(const float *x, int64_t n)
{
	unsigned char *blob = malloc(mg_nf4_layout(n).bytes);
	if (mg_nf4_quantize_host(blob, x, n) != 0) {
		fail("quantize n=%lld: %s", (long long)n, mg_last_error());
		free(blob);
		return NULL;
	}
	return blob;
}

/* The code of element i. */
static unsigned code_at(const unsigned char *blob, int64_t i)
{
	unsigned c = blob[i / 2];
	return (i & 1) ? c & 15u : c >> 4;
}

static void test_layout(void)
{
	struct mg_nf4_layout l = mg_nf4_layout(1);
	CHECK(l.n == 1 && l.nblocks == 1 && l.nnested == 1);
	CHECK(l.codes == 0 && l.absmax == 1 && l.nested_absmax == 4);
	CHECK(l.offset == 8 && l.bytes == 256);
	l = mg_nf4_layout(100); /* 50 code bytes, 2 blocks */
	CHECK(l.absmax == 50 && l.nested_absmax == 52 && l.offset == 56);
	l = mg_nf4_layout(64 * 257); /* 257 blocks: two nested blocks */
	CHECK(l.nblocks == 257 && l.nnested == 2);
	CHECK(l.absmax == 8224 && l.nested_absmax == 8484);
	CHECK(l.offset == 8492 && l.bytes == 8704);
	/* Llama 3 8B's MLP weight: 4096 x 14336. */
	l = mg_nf4_layout((int64_t)4096 * 14336);
	CHECK(l.nblocks == 917504 && l.nnested == 3584);
	CHECK(l.absmax == 29360128 && l.nested_absmax == 30277632);
	CHECK(l.offset == 30291968 && l.bytes == 30292224);
	l = mg_nf4_layout(0);
	CHECK(l.bytes == 0 && l.nblocks == 0);

	int64_t shape[2] = {3, 7};
	struct mg_tensor t = mg_tensor_make(NULL, MG_NF4, MG_DEV_CPU, 2, shape);
	CHECK(mg_tensor_bytes(&t) == mg_nf4_layout(21).bytes);
	CHECK(mg_dtype_size(MG_NF4) == 0);
}

static void test_table(void)
{
	static const float want[16] = {
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
	for (int k = 0; k < 16; k++)
		CHECK(mg_nf4_code[k] == want[k]);
	/* bitsandbytes' thresholds are within one ulp of the f32 midpoints
	 * of the f32 values, equal to them but at k = 0, 8, 12 and 14. */
	int off = 0;
	for (int k = 0; k < 15; k++) {
		float mid = (float)(((double)want[k] + want[k + 1]) / 2);
		CHECK(bnb_mid[k] == mid || bnb_mid[k] == nextafterf(mid, 2) ||
		      bnb_mid[k] == nextafterf(mid, -2));
		off += bnb_mid[k] != mid;
	}
	CHECK_INT(off, 4);
}

/*
 * One block whose absmax is exactly 1 (element 0 is 1.0), so x * (1 /
 * absmax) is x itself: table values map to themselves; a value exactly
 * on a midpoint takes the lower code (bitsandbytes' strict x > t); one
 * ulp above it the upper code, one ulp below the lower.
 */
static void test_codes(void)
{
	float x[64];
	memset(x, 0, sizeof x);
	x[0] = 1.0f;
	for (int k = 0; k < 16; k++)
		x[1 + k] = mg_nf4_code[k];
	for (int k = 0; k < 15; k++) {
		x[17 + 3 * k] = bnb_mid[k];
		x[18 + 3 * k] = nextafterf(bnb_mid[k], 2.0f);
		x[19 + 3 * k] = nextafterf(bnb_mid[k], -2.0f);
	}
	unsigned char *b = quant(x, 62);
	if (!b)
		return;
	CHECK(code_at(b, 0) == 15);
	for (int k = 0; k < 16; k++)
		CHECK_INT(code_at(b, 1 + k), k);
	for (int k = 0; k < 15; k++) {
		CHECK_INT(code_at(b, 17 + 3 * k), k); /* tie: lower */
		CHECK_INT(code_at(b, 18 + 3 * k), k + 1);
		CHECK_INT(code_at(b, 19 + 3 * k), k);
	}
	free(b);

	/* A scale that is not 1: x = 0.5 * code, absmax 0.5. */
	for (int k = 0; k < 16; k++)
		x[k] = 0.5f * mg_nf4_code[k];
	b = quant(x, 16);
	if (b) {
		for (int k = 0; k < 16; k++)
			CHECK_INT(code_at(b, k), k);
		free(b);
	}
}

/* Element 0 in the high nibble; odd n leaves the last low nibble 0. */
static void test_nibbles(void)
{
	const float a[2] = {1.0f, -1.0f}, c[2] = {-1.0f, 1.0f};
	const float d[3] = {1.0f, 0.0f, 0.5f}; /* 0.5 < 0.50166: code 12 */
	unsigned char *b = quant(a, 2);
	if (b) {
		CHECK_INT(b[0], 0xf0);
		free(b);
	}
	b = quant(c, 2);
	if (b) {
		CHECK_INT(b[0], 0x0f);
		free(b);
	}
	b = quant(d, 3);
	if (b) {
		CHECK_INT(b[0], 0xf7);
		CHECK_INT(b[1], 0xc0);
		CHECK_INT(mg_nf4_layout(3).absmax, 2);
		free(b);
	}
}

/*
 * Three blocks, the last partial (n = 134, 6 elements in block 2), with
 * absmax 1, 2 and 4 and an all-zero tail elsewhere, checked by hand:
 * offset = (1 + 2 + 4) / 3 = 7/3 rounded to f32; the values absmax -
 * offset are -4/3, -1/3 and 5/3, so nested_absmax = 4 - offset; divided
 * by it they are -0.8, -0.2 and 1. In the map's top decade the entries
 * are 0.1 + (k + 0.5) * 0.9/64: -0.8 is nearest k = 49 (0.79609375,
 * index 63 - 49 = 14), -0.2 nearest k = 7 (0.20546875, index 56), and 1
 * is index 255.
 */
static void test_double_quant(void)
{
	float x[134];
	for (int i = 0; i < 134; i++)
		x[i] = 0.25f * (float)((i % 7) - 3) / 3.0f;
	x[5] = -1.0f;
	x[64 + 9] = 2.0f;
	x[128 + 5] = 4.0f;
	unsigned char *b = quant(x, 134);
	if (!b)
		return;
	struct mg_nf4_layout l = mg_nf4_layout(134);
	float offset, nested;
	memcpy(&offset, b + l.offset, 4);
	memcpy(&nested, b + l.nested_absmax, 4);
	CHECK(offset == (float)(7.0 / 3.0));
	CHECK(nested == 4.0f - (float)(7.0 / 3.0));
	CHECK_INT(b[l.absmax + 0], 14);
	CHECK_INT(b[l.absmax + 1], 56);
	CHECK_INT(b[l.absmax + 2], 255);
	const float *map = mg_nf4_nested_map();
	CHECK(fabsf(map[14] + 0.79609375f) < 1e-6f);
	CHECK(fabsf(map[56] + 0.20546875f) < 1e-6f);
	CHECK(code_at(b, 5) == 0 && code_at(b, 73) == 15);
	CHECK(code_at(b, 133) == 15);
	/* The alignment gap after the 3 absmax bytes and the padding after
	 * the offset are 0. */
	for (size_t i = l.absmax + 3; i < l.nested_absmax; i++)
		CHECK_INT(b[i], 0);
	for (size_t i = l.offset + 4; i < l.bytes; i++)
		CHECK_INT(b[i], 0);

	float y[134];
	CHECK(mg_nf4_dequantize_host(y, b, 134) == 0);
	/* Block 2's absmax decodes to 1 * nested + offset. */
	CHECK(y[133] == nested + offset);
	CHECK(fabsf(y[133] - 4.0f) < 1e-6f);
	CHECK(fabsf(y[5] + (map[14] * nested + offset)) == 0.0f);
	free(b);

	/* One block: its absmax equals the offset, the nested absmax is 0,
	 * and decoding gives the offset back exactly. */
	float one[5] = {0.5f, -3.0f, 1.0f, 0.0f, 2.0f};
	b = quant(one, 5);
	if (b) {
		l = mg_nf4_layout(5);
		memcpy(&offset, b + l.offset, 4);
		memcpy(&nested, b + l.nested_absmax, 4);
		CHECK(offset == 3.0f && nested == 0.0f);
		CHECK(mg_nf4_dequantize_host(y, b, 5) == 0);
		CHECK(y[1] == -3.0f && y[3] == 0.0f);
		free(b);
	}
}

/* An all-zero block stores code 7 (0.0) and decodes to exactly 0 even
 * though its absmax decodes to a small non-zero number. */
static void test_zero_block(void)
{
	float x[192];
	for (int i = 0; i < 192; i++)
		x[i] = i < 64 ? 0.0f : (float)mg_rng_normal(seed, draw++);
	unsigned char *b = quant(x, 192);
	if (!b)
		return;
	for (int i = 0; i < 32; i++)
		CHECK_INT(b[i], 0x77);
	float y[192];
	CHECK(mg_nf4_dequantize_host(y, b, 192) == 0);
	for (int i = 0; i < 64; i++)
		CHECK(y[i] == 0.0f);
	free(b);
}

/*
 * create_dynamic_map(signed=True): 256 ascending values, symmetric about
 * index 127 (0.0), 1.0 at the top; decade i (0..6) holds 2^i values in
 * (10^(i-7), 10^(i-6)) at indices 128 + 2^i - 1 ..; the first is
 * 1e-6 * (0.1 + 1) / 2 = 5.5e-7, the last below 1.0 is 0.99296875 (the
 * mean of 1 - 0.9/64 and 1), the smallest -0.99296875.
 */
static void test_nested_map(void)
{
	const float *m = mg_nf4_nested_map();
	CHECK(m == mg_nf4_nested_map());
	for (int i = 0; i < 255; i++)
		CHECK(m[i] < m[i + 1]);
	CHECK(m[127] == 0.0f && m[255] == 1.0f);
	for (int k = 0; k < 127; k++)
		CHECK(m[126 - k] == -m[128 + k]);
	CHECK(fabs(m[0] + 0.99296875) < 1e-7);
	CHECK(fabs(m[254] - 0.99296875) < 1e-7);
	const float mean0 = (0.1f + 1.0f) / 2.0f;
	CHECK(m[128] == (float)1e-6 * mean0);
	CHECK(fabs(m[129] - 3.25e-6) < 1e-12 && fabs(m[130] - 7.75e-6) < 1e-12);
	/* Decade 5 (33 points, step 0.028125) at 159..190, decade 6 (65
	 * points, step 0.0140625) at 191..254. */
	CHECK(fabs(m[159] - 0.01140625) < 3e-9);
	CHECK(fabs(m[190] - 0.09859375) < 3e-8);
	CHECK(fabs(m[191] - 0.10703125) < 3e-8);
	CHECK(fabs(m[192] - 0.12109375) < 3e-8);
	for (int i = 0; i < 7; i++)
		for (int j = 0; j < (1 << i); j++) {
			double v = m[128 + (1 << i) - 1 + j];
			CHECK(v > pow(10, i - 7) && v < pow(10, i - 6));
		}
	/* Entries of bitsandbytes' map as published (dumps of
	 * create_dynamic_map()) where a linspace without fused
	 * multiply-adds would be one or two ulps off. */
	static const struct {
		int i;
		float v;
	} bnb[] = {
		{18, -0.7398437261581421f},    {20, -0.7117187976837158f},
		{34, -0.5148437023162842f},    {39, -0.44453126192092896f},
		{72, -0.07609374821186066f},   {89, -0.028281250968575478f},
		{116, -0.000493750034365803f}, {117, -0.0003812500217463821f},
	};
	for (size_t k = 0; k < sizeof bnb / sizeof bnb[0]; k++)
		if (m[bnb[k].i] != bnb[k].v)
			fail("nested map [%d] = %.9g, bitsandbytes %.9g",
			     bnb[k].i, m[bnb[k].i], bnb[k].v);
}

/* |x - deq(q(x))| <= absmax_b * (the table's largest half gap) +
 * nested_absmax * (the map's largest half gap), plus f32 rounding, on
 * normal data with a partial last block; the mean relative error is
 * printed. Bytes do not depend on the thread count. */
static void test_roundtrip(void)
{
	const int64_t n = 64 * 600 + 37;
	float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(0.02 * mg_rng_normal(seed, draw++));
	x[777] = 0.9f; /* an outlier: one block with a large absmax */
	omp_set_num_threads(1);
	unsigned char *b1 = quant(x, n);
	omp_set_num_threads(4);
	unsigned char *b4 = quant(x, n);
	if (!b1 || !b4)
		goto out;
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	CHECK(memcmp(b1, b4, l.bytes) == 0);

	float hg4 = 0, hg8 = 0;
	for (int k = 0; k < 15; k++)
		hg4 = fmaxf(hg4, (mg_nf4_code[k + 1] - mg_nf4_code[k]) / 2);
	const float *map = mg_nf4_nested_map();
	for (int k = 0; k < 255; k++)
		hg8 = fmaxf(hg8, (map[k + 1] - map[k]) / 2);
	CHECK(fabsf(hg4 - 0.15190360f) < 1e-6f);
	CHECK(fabsf(hg8 - 0.00703125f) < 1e-6f);

	CHECK(mg_nf4_dequantize_host(y, b1, n) == 0);
	const float *nested = (const float *)(b1 + l.nested_absmax);
	double err = 0, mag = 0, worst = 0;
	for (int64_t bl = 0; bl < l.nblocks; bl++) {
		float a = 0;
		const int64_t i1 = (bl + 1) * 64 < n ? (bl + 1) * 64 : n;
		for (int64_t i = bl * 64; i < i1; i++)
			a = fmaxf(a, fabsf(x[i]));
		const double bound =
			a * hg4 + nested[bl / 256] * hg8 + 1e-6 * a + 1e-9;
		for (int64_t i = bl * 64; i < i1; i++) {
			double e = fabs((double)x[i] - y[i]);
			err += e;
			mag += fabs(x[i]);
			worst = fmax(worst, e / bound);
			if (e > bound)
				fail("element %lld: |%g - %g| = %g > %g",
				     (long long)i, x[i], y[i], e, bound);
		}
	}
	printf("nf4 round trip of %lld normal values: mean relative error "
	       "%.4f (mean |x - deq| / mean |x|), worst error / bound %.3f\n",
	       (long long)n, err / mag, worst);
	CHECK(err / mag < 0.15);
out:
	free(b1);
	free(b4);
	free(x);
	free(y);
}

static void test_errors(void)
{
	float x[70] = {0};
	_Alignas(16) unsigned char blob[256];
	CHECK(mg_nf4_quantize_host(blob, x, 0) != 0);
	CHECK(mg_nf4_quantize_host(NULL, x, 5) != 0);
	x[66] = NAN;
	CHECK(mg_nf4_quantize_host(blob, x, 70) != 0);
	CHECK_HAS(mg_last_error(), "block 1");
	x[66] = INFINITY;
	CHECK(mg_nf4_quantize_host(blob, x, 70) != 0);
	CHECK(mg_nf4_dequantize_host(x, blob, 0) != 0);
	CHECK(mg_nf4_quantize_host(blob + 1, x, 5) != 0);
	CHECK_HAS(mg_last_error(), "aligned");
}

/* The CPU op: F32 equals the host decoder, F16/BF16 its rounding; the
 * argument checks. */
static void test_op(void)
{
	const int64_t n = 3 * 64 * 5 + 1; /* odd, partial block */
	float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)mg_rng_normal(seed, draw++);
	unsigned char *blob = quant(x, n);
	if (!blob)
		goto out;
	CHECK(mg_nf4_dequantize_host(y, blob, n) == 0);
	int64_t ws[2] = {1, n};
	struct mg_tensor w = mg_tensor_make(blob, MG_NF4, MG_DEV_CPU, 2, ws);
	static const enum mg_dtype dts[3] = {MG_F32, MG_F16, MG_BF16};
	for (int d = 0; d < 3; d++) {
		struct mg_tensor o = mk(dts[d], 1, n, 0, 0, 0);
		CHECK_OK(mg_op_nf4_dequantize(&ctx, &w, &o));
		for (int64_t i = 0; i < n; i++) {
			const uint16_t *h = o.data;
			int ok = dts[d] == MG_F32 ? ((float *)o.data)[i] == y[i]
				 : dts[d] == MG_F16
					 ? h[i] == mg_float_to_half(y[i])
					 : h[i] == mg_float_to_bf16(y[i]);
			if (!ok) {
				fail("op %s element %lld",
				     mg_dtype_name(dts[d]), (long long)i);
				break;
			}
		}
		free(o.data);
	}
	struct mg_tensor bad = mk(MG_F64, 1, n, 0, 0, 0);
	CHECK(mg_op_nf4_dequantize(&ctx, &w, &bad) != 0);
	CHECK_HAS(mg_last_error(), "F32, F16 or BF16");
	free(bad.data);
	bad = mk(MG_F32, 1, n - 1, 0, 0, 0);
	CHECK(mg_op_nf4_dequantize(&ctx, &w, &bad) != 0);
	CHECK_HAS(mg_last_error(), "elements");
	struct mg_tensor notq = bad;
	CHECK(mg_op_nf4_dequantize(&ctx, &notq, &bad) != 0);
	CHECK_HAS(mg_last_error(), "expected NF4");
	struct mg_tensor odd = w;
	odd.data = blob + 2;
	CHECK(mg_op_nf4_dequantize(&ctx, &odd, &bad) != 0);
	CHECK_HAS(mg_last_error(), "aligned");
	free(bad.data);
	/* mg_op_nf4_quantize on the CPU: the host quantizer's bytes, for
	 * F16/BF16 those of the values' f32 */
	const size_t bytes = mg_nf4_layout(n).bytes;
	unsigned char *q = malloc(bytes), *ref = malloc(bytes);
	struct mg_tensor wq = mg_tensor_make(q, MG_NF4, MG_DEV_CPU, 2, ws);
	for (int d = 0; d < 3; d++) {
		struct mg_tensor xt = mk(dts[d], 1, n, 0, 0, 0);
		for (int64_t i = 0; i < n; i++) {
			if (dts[d] == MG_F32)
				((float *)xt.data)[i] = x[i];
			else if (dts[d] == MG_F16)
				((uint16_t *)xt.data)[i] =
					mg_float_to_half(x[i]);
			else
				((uint16_t *)xt.data)[i] =
					mg_float_to_bf16(x[i]);
			y[i] = dts[d] == MG_F32 ? x[i]
			       : dts[d] == MG_F16
				       ? mg_half_to_float(
						 mg_float_to_half(x[i]))
				       : mg_bf16_to_float(
						 mg_float_to_bf16(x[i]));
		}
		memset(q, 0xff, bytes);
		CHECK(mg_nf4_quantize_host(ref, y, n) == 0);
		if (mg_op_nf4_quantize(&ctx, &xt, &wq) != 0)
			fail("quantize op %s: %s", mg_dtype_name(dts[d]),
			     mg_last_error());
		else if (memcmp(q, ref, bytes) != 0)
			fail("quantize op %s: bytes differ from the host's",
			     mg_dtype_name(dts[d]));
		free(xt.data);
	}
	struct mg_tensor x64 = mk(MG_F64, 1, n, 0, 0, 0);
	CHECK(mg_op_nf4_quantize(&ctx, &x64, &wq) != 0);
	CHECK_HAS(mg_last_error(), "F32, F16 or BF16");
	free(x64.data);
	free(q);
	free(ref);
out:
	free(blob);
	free(x);
	free(y);
}

/* v is within one ulp of a decision point (an NF4 threshold, or the f32
 * midpoint of adjacent map entries): the only place where two careful
 * implementations may round a scaled value to different sides. */
static int near_midpoint(float v, const float *tab, int len)
{
	for (int k = 0; k + 1 < len; k++) {
		float mid = tab == mg_nf4_code ? bnb_mid[k]
					       : (tab[k] + tab[k + 1]) * 0.5f;
		if (fabsf(v - mid) <= fabsf(nextafterf(mid, 2.0f) - mid))
			return 1;
	}
	return 0;
}

/* Compare mg_nf4_quantize_host's blob of x with bnb_ref.py's: equal bytes,
 * except codes or absmax indices of a value within one ulp of a
 * midpoint (counted and printed). Returns 0, 1 (a difference), or 77. */
static int bnb_case(const char *py, const char *script, const char *dir,
		    const float *x, int64_t n)
{
	char in[512], out[512], cmd[2048];
	snprintf(in, sizeof in, "%s/in.f32", dir);
	snprintf(out, sizeof out, "%s/out.bin", dir);
	FILE *f = fopen(in, "wb");
	if (!f || fwrite(x, 4, (size_t)n, f) != (size_t)n) {
		fail("cannot write %s", in);
		if (f)
			fclose(f);
		return 1;
	}
	fclose(f);
	snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' %lld '%s'", py, script, in,
		 (long long)n, out);
	if (system(cmd) != 0) {
		fail("%s failed", cmd);
		return 1;
	}
	const struct mg_nf4_layout l = mg_nf4_layout(n);
	unsigned char *ref = calloc(1, l.bytes + 1), *got = quant(x, n);
	f = fopen(out, "rb");
	size_t len = f ? fread(ref, 1, l.bytes + 1, f) : 0;
	if (f)
		fclose(f);
	int bad = 0, near = 0;
	if (!got || len != l.bytes) {
		fail("n=%lld: bnb_ref.py wrote %zu bytes, expected %zu",
		     (long long)n, len, l.bytes);
		bad = 1;
	}
	for (size_t i = 0; !bad && i < l.bytes; i++) {
		if (ref[i] == got[i])
			continue;
		int ok = 0;
		if (i < l.absmax) { /* a code byte: elements 2i, 2i + 1 */
			for (int64_t e = 2 * (int64_t)i;
			     e < 2 * (int64_t)i + 2 && e < n; e++) {
				float a = 0;
				const int64_t b0 = e / 64 * 64;
				for (int64_t j = b0; j < b0 + 64 && j < n; j++)
					a = fmaxf(a, fabsf(x[j]));
				ok |= near_midpoint(x[e] * (1.0f / a),
						    mg_nf4_code, 16);
			}
		} else if (i < l.absmax + (size_t)l.nblocks) {
			/* an absmax index: recompute its scaled value */
			const float *nested =
				(const float *)(got + l.nested_absmax);
			float offset;
			memcpy(&offset, got + l.offset, 4);
			const int64_t b = (int64_t)(i - l.absmax);
			float a = 0;
			for (int64_t j = b * 64; j < b * 64 + 64 && j < n; j++)
				a = fmaxf(a, fabsf(x[j]));
			ok = near_midpoint((a - offset) *
						   (1.0f / nested[b / 256]),
					   mg_nf4_nested_map(), 256);
		}
		if (ok) {
			near++;
		} else {
			fail("n=%lld: byte %zu is 0x%02x, bnb_ref.py 0x%02x",
			     (long long)n, i, got[i], ref[i]);
			bad = 1;
		}
	}
	printf("n=%lld: %zu bytes, %s (%d within one ulp of a midpoint)\n",
	       (long long)n, l.bytes, bad ? "DIFFERENT" : "equal", near);
	free(ref);
	free(got);
	return bad;
}

/* bnb_ref.py's bytes against ours on normal data of several sizes (partial
 * blocks, odd n, a partial nested block), a block of exact midpoints and
 * table values (ties), and a zero block. Skips (77) without python3 or
 * NumPy. */
static int test_bnb_ref(const char *script, const char *py)
{
	char cmd[1024];
	if (!py || strstr(py, "NOTFOUND"))
		return 77;
	snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' 2>/dev/null", py);
	if (system(cmd) != 0) {
		printf("test_nf4: no NumPy for %s: skipped\n", py);
		return 77;
	}
	char dir[] = "/tmp/mg_nf4_XXXXXX";
	if (!mkdtemp(dir)) {
		fail("mkdtemp");
		return 1;
	}
	static const int64_t sizes[] = {
		1, 7, 63, 64, 65, 64 * 256, 64 * 256 * 2 + 77, 100001};
	float *x = malloc(100001 * 4);
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		for (int64_t i = 0; i < sizes[s]; i++)
			x[i] = (float)(0.03 * mg_rng_normal(seed, draw++));
		bnb_case(py, script, dir, x, sizes[s]);
	}
	/* ties: absmax 1, then the table, midpoints and neighbours; then a
	 * zero block and a block scaled by 3 */
	memset(x, 0, 256 * 4);
	x[0] = 1.0f;
	for (int k = 0; k < 16; k++)
		x[1 + k] = mg_nf4_code[k];
	for (int k = 0; k < 15; k++) {
		x[17 + 3 * k] = bnb_mid[k];
		x[18 + 3 * k] = nextafterf(bnb_mid[k], 2.0f);
		x[19 + 3 * k] = nextafterf(bnb_mid[k], -2.0f);
	}
	for (int i = 0; i < 64; i++)
		x[128 + i] = 3.0f * x[i];
	bnb_case(py, script, dir, x, 192);
	free(x);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fail("%s", cmd);
	return failures ? 1 : 0;
}

static const struct test_case cases[] = {
	{"layout", test_layout},
	{"table", test_table},
	{"codes", test_codes},
	{"nibbles", test_nibbles},
	{"double_quant", test_double_quant},
	{"zero_block", test_zero_block},
	{"nested_map", test_nested_map},
	{"roundtrip", test_roundtrip},
	{"errors", test_errors},
	{"op", test_op},
};

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "bnb_ref") == 0)
		return test_bnb_ref(argc > 2 ? argv[2] : "bnb_ref.py",
				    argc > 3 ? argv[3] : "python3");
	return test_run_cases("test_nf4", cases, sizeof cases / sizeof cases[0],
			      argc > 1 ? argv[1] : NULL);
}
