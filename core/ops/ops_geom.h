/*
 * ops_geom.h - sizes the op dispatchers (core/ops/FAMILY.c) compute while
 * checking the arguments and hand to a backend, so the backend does not
 * derive them again. Backends (core/ops/cpu, core/ops/cuda) may include
 * this header; it depends on nothing but <stdint.h> and <stdbool.h>.
 */
#ifndef MG_OPS_GEOM_H
#define MG_OPS_GEOM_H

#include <stdbool.h>
#include <stdint.h>

/* A validated 2-D convolution's sizes (ops/conv.c fills it). */
struct mgo_conv_geom {
	int64_t N, C, H, W; /* input */
	int64_t K, OH, OW;  /* output channels and extent */
	int64_t kh, kw;	    /* window */
	int64_t sh, sw;	    /* stride */
	int64_t ph, pw;	    /* padding */
	int64_t groups;
	int64_t Cg, Kg; /* channels per group in and out */
	int64_t krow;	/* GEMM depth per group: Cg * kh * kw */
	int64_t HW, OHW;
	bool pointwise; /* 1x1, stride 1, no padding: im2col is a copy */
};

#endif
