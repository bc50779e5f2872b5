/*
 * mbv2.h - the MobileNetV2 model behind the plugin descriptor: its
 * configuration as plain values, so tests can build a model without the
 * core's option parser, and the model callbacks.
 */
#ifndef MBV2_H
#define MBV2_H

#include "mg/mg.h"

/* Longest inverted-residual table accepted ("t,c,n,s;..."). */
#define MBV2_SETTING_MAX 512
#define MBV2_MAX_ROWS 32

/* The torchvision table: expansion t, channels c, repeats n, stride s. */
#define MBV2_DEFAULT_SETTING                                                   \
	"1,16,1,1;6,24,2,2;6,32,3,2;6,64,4,2;6,96,3,1;6,160,3,2;6,320,1,1"

struct mbv2_cfg {
	int in_channels;
	int num_classes;
	double width_mult;
	int round_nearest; /* channel counts are multiples of this */
	int stem_channels; /* before width scaling (32) */
	int stem_stride;   /* 2 in torchvision; 1 suits tiny images */
	int last_channel;  /* before width scaling (1280) */
	double dropout;	   /* classifier dropout probability */
	double bn_momentum;
	double bn_eps;
	char setting[MBV2_SETTING_MAX];
};

/* torchvision's defaults, with 1 input channel and 10 classes. */
void mbv2_cfg_default(struct mbv2_cfg *c);

/* torchvision's _make_divisible(v, divisor). */
int mbv2_make_divisible(double v, int divisor);

int mbv2_create(const struct mbv2_cfg *cfg, struct mg_ctx *ctx, void **self);
void mbv2_destroy(void *self);

extern const struct mg_model_ops mbv2_model_ops;

#endif
