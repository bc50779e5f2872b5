/*
 * test_convert.c - the CPU float conversions (the oracle for the CUDA
 * ones) on bit patterns worked out from IEEE 754: rounding to nearest
 * even, overflow to infinity, subnormals, NaN; and mg_op_convert on the
 * CPU device against them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mg/mg.h"

static int fails;

static void expect_u16(const char *what, float f, uint16_t got, uint16_t want)
{
	if (got != want) {
		printf("FAIL %s(%.9g): 0x%04x, expected 0x%04x\n", what, f, got,
		       want);
		fails++;
	}
}

int main(void)
{
	/* F16: 1, max normal, the rounding boundary to infinity. */
	expect_u16("half", 1.0f, mg_float_to_half(1.0f), 0x3c00);
	expect_u16("half", -2.0f, mg_float_to_half(-2.0f), 0xc000);
	expect_u16("half", 65504.0f, mg_float_to_half(65504.0f), 0x7bff);
	expect_u16("half", 65519.0f, mg_float_to_half(65519.0f), 0x7bff);
	expect_u16("half", 65520.0f, mg_float_to_half(65520.0f), 0x7c00);
	expect_u16("half", INFINITY, mg_float_to_half(INFINITY), 0x7c00);
	/* Ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10. */
	expect_u16("half", 1.0f + 0x1p-11f, mg_float_to_half(1.0f + 0x1p-11f),
		   0x3c00);
	expect_u16("half", 1.0f + 3 * 0x1p-11f,
		   mg_float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
	/* Subnormals: 2^-24 is the smallest, 2^-25 ties to 0 (even). */
	expect_u16("half", 0x1p-24f, mg_float_to_half(0x1p-24f), 0x0001);
	expect_u16("half", 0x1p-25f, mg_float_to_half(0x1p-25f), 0x0000);
	expect_u16("half", 3 * 0x1p-25f, mg_float_to_half(3 * 0x1p-25f),
		   0x0002);
	expect_u16("half", 0x1p-14f, mg_float_to_half(0x1p-14f), 0x0400);
	if (!isnan(mg_half_to_float(mg_float_to_half(NAN)))) {
		printf("FAIL half NaN\n");
		fails++;
	}
	/* BF16: truncation point with ties to even. */
	expect_u16("bf16", 1.0f, mg_float_to_bf16(1.0f), 0x3f80);
	expect_u16("bf16", 1.0f + 0x1p-8f, mg_float_to_bf16(1.0f + 0x1p-8f),
		   0x3f80);
	expect_u16("bf16", 1.0f + 3 * 0x1p-8f,
		   mg_float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
	/* Round trips of every F16 value that is not NaN. */
	for (uint32_t h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
			continue;
		uint16_t back = mg_float_to_half(mg_half_to_float((uint16_t)h));
		if (back != h) {
			printf("FAIL half round trip 0x%04x -> 0x%04x\n", h,
			       back);
			fails++;
			break;
		}
	}
	/* mg_op_convert on the CPU device agrees with the scalar ones. */
	struct mg_device dev = {.kind = MG_DEV_CPU};
	struct mg_ctx ctx = {.struct_size = sizeof ctx, .dev = &dev};
	float in[5] = {1.0f, 65520.0f, 0x1p-25f, -3.5f, 1.0f + 0x1p-11f};
	uint16_t h[5], b[5];
	float out[5];
	if (mg_op_convert(&ctx, h, MG_F16, in, MG_F32, 5) ||
	    mg_op_convert(&ctx, b, MG_BF16, in, MG_F32, 5) ||
	    mg_op_convert(&ctx, out, MG_F32, h, MG_F16, 5)) {
		printf("FAIL mg_op_convert: %s\n", mg_last_error());
		return 1;
	}
	for (int i = 0; i < 5; i++) {
		expect_u16("op half", in[i], h[i], mg_float_to_half(in[i]));
		expect_u16("op bf16", in[i], b[i], mg_float_to_bf16(in[i]));
		if (out[i] != mg_half_to_float(h[i])) {
			printf("FAIL op half->float %d\n", i);
			fails++;
		}
	}
	if (mg_op_convert(&ctx, out, MG_F32, h, MG_I32, 5) == 0) {
		printf("FAIL: I32 source accepted\n");
		fails++;
	}
	printf("%s\n", fails ? "convert: FAILED" : "convert: all passed");
	return fails != 0;
}
