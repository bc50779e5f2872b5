/*
 * test_qat.c - the fake-quantization ops of quantization-aware training
 * (mg/ops_quant.h, mg/int4.h: torchao's 8da4w) on the CPU against values
 * worked out by hand: int4 weight groups with exact scales (ties to even,
 * the +absmax clamp, -absmax reaching -8, zero and tiny groups), int8
 * tokens with both zero-point branches, a tie in the zero point and a
 * clamped code; the straight-through masks; other dtypes reading f32;
 * packed int4 (nibble order, dequantized equal to the fake-quantized
 * weight bit for bit); the argument errors.
 *
 * Usage: test_qat [case]   (no case: all of them)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MG_OP_TEST_SEED 777
#include "../common/op_test_util.h"

#include "mg/int4.h"

/* Two groups of 32 with exact scales: absmax 15 (scale 2, inv 0.5) and
 * absmax 7.5 (scale 1); want = the fake-quantized value, keep = mask. */
static const float w_in[64] = {
	15.0f, -15.0f, 3.0f,  5.0f,  1.0f,   -1.0f, 7.0f,  0.2f,	-3.0f,
	-5.0f, 9.0f,   11.0f, 13.0f, -13.0f, 0.0f,  2.9f,  [32] = 7.5f, -7.5f,
	2.5f,  3.5f,   -0.5f, 0.5f,  6.6f,   1.49f, -6.5f, 4.5f,
};
static const float w_want[64] = {
	14.0f, -16.0f, 4.0f,  4.0f,  0.0f,   0.0f, 8.0f,  0.0f,	       -4.0f,
	-4.0f, 8.0f,   12.0f, 12.0f, -12.0f, 0.0f, 2.0f,  [32] = 7.0f, -8.0f,
	2.0f,  4.0f,   0.0f,  0.0f,  7.0f,   1.0f, -6.0f, 4.0f,
};

static void test_weight_hand(void)
{
	struct mg_tensor w = mk(MG_F32, 2, 2, 32, 0, 0),
			 o = mk(MG_F32, 2, 2, 32, 0, 0);
	memcpy(w.data, w_in, sizeof w_in);
	CHECK_OK(mg_op_fq_int4_weight(&ctx, &w, 32, &o));
	const float *y = o.data;
	for (int i = 0; i < 64; i++)
		if (y[i] != w_want[i])
			fail("weight element %d: %.9g -> %.9g, want %.9g", i,
			     (double)w_in[i], (double)y[i], (double)w_want[i]);
	/* -0.5 * 1 rounds to -0.0: the value is a zero either way */
	CHECK(y[36] == 0.0f);
	/* A zero group and a tiny one: scale FLT_EPSILON, all zero; a tiny
	 * group whose values are multiples of eps keeps them. */
	float z[32] = {0};
	z[3] = 1e-12f;
	z[5] = -3.0f * FLT_EPSILON;
	struct mg_tensor zt = mk(MG_F32, 1, 32, 0, 0, 0);
	memcpy(zt.data, z, sizeof z);
	CHECK_OK(mg_op_fq_int4_weight(&ctx, &zt, 32, &zt)); /* in place */
	const float *zy = zt.data;
	CHECK(zy[3] == 0.0f && zy[0] == 0.0f);
	CHECK(zy[5] == -3.0f * FLT_EPSILON);
	/* The scale formula itself. */
	CHECK(mg_int4_scale(15.0f) == 2.0f &&
	      mg_int4_scale(0.0f) == FLT_EPSILON);
	del(&w);
	del(&o);
	del(&zt);
}

/* Row 0: lo -99.5, hi 155.5: scale 1, zero point -128 + 99.5 = -28.5,
 * a tie, rounded to -28; 155.5 -> round 156 (even) - 28 = 128, clamped
 * to 127: 155 and no gradient. Row 1: lo -200.5, hi 54.5: the max
 * branch (-328.5 + 181.5 < 0), zero point 127 - 54.5 = 72.5 -> 72.
 * Row 2: all positive, lo = 0: zero point -128. */
static const float x_in[3][8] = {
	{-99.5f, 155.5f, 0.5f, 1.5f, -2.5f, 10.25f, 10.75f, 0.0f},
	{-200.5f, 54.5f, 0.5f, -1.5f, 2.5f, -0.5f, 3.0f, 54.0f},
	{255.0f, 1.0f, 2.5f, 3.5f, 127.5f, 0.0f, 100.0f, 0.25f},
};
static const float x_want[3][8] = {
	{-100.0f, 155.0f, 0.0f, 2.0f, -2.0f, 10.0f, 11.0f, 0.0f},
	{-200.0f, 54.0f, 0.0f, -2.0f, 2.0f, 0.0f, 3.0f, 54.0f},
	{255.0f, 1.0f, 2.0f, 4.0f, 128.0f, 0.0f, 100.0f, 0.0f},
};

static void test_act_hand(void)
{
	float s, zp;
	mg_int8_token_qparams(-99.5f, 155.5f, &s, &zp);
	CHECK(s == 1.0f && zp == -28.0f);
	mg_int8_token_qparams(-200.5f, 54.5f, &s, &zp);
	CHECK(s == 1.0f && zp == 72.0f);
	mg_int8_token_qparams(0.0f, 255.0f, &s, &zp);
	CHECK(s == 1.0f && zp == -128.0f);
	mg_int8_token_qparams(0.0f, 0.0f, &s, &zp); /* all zero: max branch */
	CHECK(s == FLT_EPSILON && zp == 127.0f);
	struct mg_tensor x = mk(MG_F32, 2, 3, 8, 0, 0),
			 o = mk(MG_F32, 2, 3, 8, 0, 0);
	memcpy(x.data, x_in, sizeof x_in);
	CHECK_OK(mg_op_fq_int8_token(&ctx, &x, &o));
	const float *y = o.data;
	for (int i = 0; i < 24; i++)
		if (y[i] != x_want[i / 8][i % 8])
			fail("token %d element %d: %.9g -> %.9g, want %.9g",
			     i / 8, i % 8, (double)x_in[i / 8][i % 8],
			     (double)y[i], (double)x_want[i / 8][i % 8]);
	del(&x);
	del(&o);
}

/* dy = 1 + element index; the masks of the hand cases. */
static void test_ste(void)
{
	static const enum mg_dtype dts[2] = {MG_F32, MG_F64};
	for (int d = 0; d < 2; d++) {
		const enum mg_dtype dt = dts[d];
		struct mg_tensor w = mk(dt, 2, 2, 32, 0, 0),
				 g = mk(dt, 2, 2, 32, 0, 0);
		for (int i = 0; i < 64; i++) {
			if (dt == MG_F64) {
				((double *)w.data)[i] = w_in[i];
				((double *)g.data)[i] = 1 + i;
			} else {
				((float *)w.data)[i] = w_in[i];
				((float *)g.data)[i] = (float)(1 + i);
			}
		}
		/* dw aliases dy */
		CHECK_OK(mg_op_fq_int4_weight_backward(&ctx, &w, 32, &g, &g));
		for (int i = 0; i < 64; i++) {
			const double got = dt == MG_F64 ? ((double *)g.data)[i]
							: ((float *)g.data)[i];
			/* clamped: +absmax of each group (elements 0, 32) */
			const double want = i == 0 || i == 32 ? 0.0 : 1 + i;
			if (got != want)
				fail("%s weight STE element %d: %g, want %g",
				     mg_dtype_name(dt), i, got, want);
		}
		struct mg_tensor x = mk(dt, 2, 3, 8, 0, 0),
				 gy = mk(dt, 2, 3, 8, 0, 0),
				 gx = mk(dt, 2, 3, 8, 0, 0);
		for (int i = 0; i < 24; i++) {
			if (dt == MG_F64) {
				((double *)x.data)[i] = x_in[i / 8][i % 8];
				((double *)gy.data)[i] = -0.5 * (1 + i);
			} else {
				((float *)x.data)[i] = x_in[i / 8][i % 8];
				((float *)gy.data)[i] = -0.5f * (float)(1 + i);
			}
		}
		CHECK_OK(mg_op_fq_int8_token_backward(&ctx, &x, &gy, &gx));
		for (int i = 0; i < 24; i++) {
			const double got = dt == MG_F64 ? ((double *)gx.data)[i]
							: ((float *)gx.data)[i];
			/* row 0's 155.5 was clamped (128 -> 127) */
			const double want = i == 1 ? 0.0 : -0.5 * (1 + i);
			if (got != want)
				fail("%s token STE element %d: %g, want %g",
				     mg_dtype_name(dt), i, got, want);
		}
		/* A value beyond the group's grid on the negative side is
		 * never clamped: -absmax codes to -8 exactly. */
		del(&w);
		del(&g);
		del(&x);
		del(&gy);
		del(&gx);
	}
}

/* Every dtype computes on its values read as f32: F64, F16 and BF16
 * outputs equal the F32 op on the converted inputs, rounded once. */
static void test_dtypes(void)
{
	const int64_t rows = 5, cols = 96;
	struct mg_tensor x = mk(MG_F32, 2, rows, cols, 0, 0);
	fill_rand(&x, 3.0);
	static const enum mg_dtype dts[3] = {MG_F64, MG_F16, MG_BF16};
	for (int d = 0; d < 3; d++) {
		const enum mg_dtype dt = dts[d];
		struct mg_tensor xd = mk(dt, 2, rows, cols, 0, 0),
				 od = mk(dt, 2, rows, cols, 0, 0),
				 xf = mk(MG_F32, 2, rows, cols, 0, 0),
				 of = mk(MG_F32, 2, rows, cols, 0, 0);
		float *f = xf.data;
		for (int64_t i = 0; i < rows * cols; i++) {
			float v = ((float *)x.data)[i];
			if (dt == MG_F64) {
				((double *)xd.data)[i] = v;
			} else {
				uint16_t h = dt == MG_F16 ? mg_float_to_half(v)
							  : mg_float_to_bf16(v);
				((uint16_t *)xd.data)[i] = h;
				v = dt == MG_F16 ? mg_half_to_float(h)
						 : mg_bf16_to_float(h);
			}
			f[i] = v;
		}
		for (int op = 0; op < 2; op++) {
			if (op == 0) {
				CHECK_OK(mg_op_fq_int4_weight(&ctx, &xd, 32,
							      &od));
				CHECK_OK(mg_op_fq_int4_weight(&ctx, &xf, 32,
							      &of));
			} else {
				CHECK_OK(mg_op_fq_int8_token(&ctx, &xd, &od));
				CHECK_OK(mg_op_fq_int8_token(&ctx, &xf, &of));
			}
			const float *r = of.data;
			int64_t bad = -1;
			for (int64_t i = 0; i < rows * cols && bad < 0; i++) {
				if (dt == MG_F64)
					bad = ((double *)od.data)[i] ==
							      (double)r[i]
						      ? -1
						      : i;
				else if (((uint16_t *)od.data)[i] !=
					 (dt == MG_F16
						  ? mg_float_to_half(r[i])
						  : mg_float_to_bf16(r[i])))
					bad = i;
			}
			if (bad >= 0)
				fail("%s %s differs from F32 at %lld",
				     op ? "fq_int8_token" : "fq_int4_weight",
				     mg_dtype_name(dt), (long long)bad);
		}
		del(&xd);
		del(&od);
		del(&xf);
		del(&of);
	}
	del(&x);
}

/* Packed int4: nibble order by hand, and a random weight's dequantized
 * values equal to the fake-quantized ones bit for bit. */
static void test_pack(void)
{
	uint8_t p[32];
	float sc[2], back[64];
	CHECK_OK(mg_int4_quantize_host(w_in, 2, 32, 32, p, sc));
	CHECK(sc[0] == 2.0f && sc[1] == 1.0f);
	/* 15 -> code 7 (clamped) low, -15 -> -8 high: 0x87 */
	CHECK(p[0] == 0x87);
	/* 3 -> 2, 5 -> 2: 0x22; 1 -> 0, -1 -> -0 = 0: 0x00 */
	CHECK(p[1] == 0x22 && p[2] == 0x00);
	/* 7 -> 4 low, 0.2 -> 0 high; -3 -> -2 (0xe), -5 -> -2: 0xee */
	CHECK(p[3] == 0x04 && p[4] == 0xee);
	CHECK_OK(mg_int4_dequantize_host(p, sc, 2, 32, 32, back));
	CHECK(memcmp(back, w_want, sizeof back) == 0);

	const int64_t rows = 24, cols = 160, g = 32;
	struct mg_tensor w = mk(MG_F32, 2, rows, cols, 0, 0),
			 o = mk(MG_F32, 2, rows, cols, 0, 0);
	fill_rand(&w, 0.05);
	CHECK_OK(mg_op_fq_int4_weight(&ctx, &w, g, &o));
	uint8_t *pk = malloc((size_t)(rows * cols / 2));
	float *s = malloc((size_t)(rows * cols / g) * 4),
	      *d = malloc((size_t)(rows * cols) * 4);
	CHECK_OK(mg_int4_quantize_host(w.data, rows, cols, g, pk, s));
	CHECK_OK(mg_int4_dequantize_host(pk, s, rows, cols, g, d));
	CHECK(memcmp(d, o.data, (size_t)(rows * cols) * 4) == 0);
	/* the scales are the groups' absmax / 7.5 */
	const float *wf = w.data;
	int bad = 0;
	for (int64_t gi = 0; gi < rows * cols / g; gi++) {
		float a = 0;
		for (int64_t i = 0; i < g; i++)
			a = fmaxf(a, fabsf(wf[gi * g + i]));
		bad += s[gi] != a / 7.5f;
	}
	CHECK(bad == 0);
	CHECK(mg_int4_quantize_host(w.data, rows, cols, 48, pk, s) != 0);
	CHECK_HAS(mg_last_error(), "groups of 48");
	free(pk);
	free(s);
	free(d);
	del(&w);
	del(&o);
}

static void test_errors(void)
{
	struct mg_tensor w = mk(MG_F32, 2, 2, 48, 0, 0),
			 o = mk(MG_F32, 2, 2, 48, 0, 0),
			 o2 = mk(MG_F32, 2, 2, 32, 0, 0),
			 h = mk(MG_F64, 2, 2, 48, 0, 0);
	fill_rand(&w, 1.0);
	CHECK(mg_op_fq_int4_weight(&ctx, &w, 32, &o) != 0);
	CHECK_HAS(mg_last_error(), "fq_int4_weight: group 32 does not divide");
	CHECK(mg_op_fq_int4_weight(&ctx, &w, 0, &o) != 0);
	CHECK_HAS(mg_last_error(), "group 0 < 1");
	CHECK(mg_op_fq_int4_weight(&ctx, &w, 16, &o2) != 0);
	CHECK(mg_op_fq_int4_weight(&ctx, &w, 16, &h) != 0);
	CHECK(mg_op_fq_int8_token_backward(&ctx, &w, &o, &w) != 0);
	CHECK_HAS(mg_last_error(), "dx may alias dy, not x");
	struct mg_tensor i32 = w;
	i32.dtype = MG_I32;
	CHECK(mg_op_fq_int8_token(&ctx, &i32, &o) != 0);
	CHECK_HAS(mg_last_error(), "F32, F64, F16 or BF16");
	CHECK_OK(mg_op_fq_int4_weight(&ctx, &w, 16, &o));
	del(&w);
	del(&o);
	del(&o2);
	del(&h);
}

static const struct test_case cases[] = {
	{"weight_hand", test_weight_hand},
	{"act_hand", test_act_hand},
	{"ste", test_ste},
	{"dtypes", test_dtypes},
	{"pack", test_pack},
	{"errors", test_errors},
};

int main(int argc, char **argv)
{
	return test_run_cases("test_qat", cases, sizeof cases / sizeof cases[0],
			      argc > 1 ? argv[1] : NULL);
}
