/*
 * mobilenetv2.c - the plugin descriptor of the MobileNetV2 model: its
 * option schema (what `mgrun --help-plugin mobilenetv2` prints) and the
 * create/destroy glue around mbv2.c.
 */
#include <stdio.h>

#include "mbv2.h"

static const struct mg_option mbv2_options[] = {
	MG_OPT_I("in_channels", "1", 1, 4096,
		 "channels of the input images (1 for MNIST, 3 for RGB)"),
	MG_OPT_I("num_classes", "10", 1, 10000000,
		 "output classes of the classifier"),
	MG_OPT_F("width_mult", "1.0", 0.05, 10.0,
		 "channel multiplier: every layer's width is scaled by it and "
		 "rounded to a multiple of round_nearest (the paper uses "
		 "0.35 to 1.4)"),
	MG_OPT_I("round_nearest", "8", 1, 1024,
		 "channel counts are rounded to multiples of this "
		 "(torchvision's _make_divisible)"),
	MG_OPT_I("stem_channels", "32", 1, 65536,
		 "output channels of the first 3x3 conv, before width_mult"),
	MG_OPT_I("stem_stride", "2", 1, 8,
		 "stride of the first conv; 1 keeps more resolution on tiny "
		 "images such as 28x28 MNIST"),
	MG_OPT_I("last_channel", "1280", 1, 1048576,
		 "channels of the last 1x1 conv, scaled by max(1, "
		 "width_mult)"),
	MG_OPT_F("dropout", "0.2", 0.0, 1.0,
		 "dropout probability before the classifier (training only)"),
	MG_OPT_F("bn_momentum", "0.1", 0.0, 1.0,
		 "batch-norm running statistics momentum (PyTorch "
		 "convention: running = (1 - m) * running + m * batch)"),
	MG_OPT_F("bn_eps", "1e-5", 1e-12, 1.0,
		 "batch-norm epsilon added to the variance"),
	MG_OPT_S("setting", MBV2_DEFAULT_SETTING,
		 "inverted-residual table: rows 't,c,n,s' separated by ';' "
		 "(expansion, output channels, repeats, first stride)"),
	MG_OPT_END,
};

static int mbv2_plugin_create(const struct mg_opts *o, struct mg_ctx *ctx,
			      void **self)
{
	struct mbv2_cfg c;
	mbv2_cfg_default(&c);
	c.in_channels = (int)mg_opt_int(o, "in_channels");
	c.num_classes = (int)mg_opt_int(o, "num_classes");
	c.width_mult = mg_opt_float(o, "width_mult");
	c.round_nearest = (int)mg_opt_int(o, "round_nearest");
	c.stem_channels = (int)mg_opt_int(o, "stem_channels");
	c.stem_stride = (int)mg_opt_int(o, "stem_stride");
	c.last_channel = (int)mg_opt_int(o, "last_channel");
	c.dropout = mg_opt_float(o, "dropout");
	c.bn_momentum = mg_opt_float(o, "bn_momentum");
	c.bn_eps = mg_opt_float(o, "bn_eps");
	const char *s = mg_opt_str(o, "setting");
	if (snprintf(c.setting, sizeof c.setting, "%s", s) >=
	    (int)sizeof c.setting)
		return mg_error("mobilenetv2: setting longer than %d "
				"characters",
				MBV2_SETTING_MAX - 1);
	return mbv2_create(&c, ctx, self);
}

static const struct mg_plugin mbv2_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_MODEL,
	.name = "mobilenetv2",
	.version = "1.0",
	.description = "MobileNetV2 as torchvision builds it (inverted "
		       "residuals, ReLU6, BN), any input size and channels",
	.options = mbv2_options,
	.create = mbv2_plugin_create,
	.destroy = mbv2_destroy,
	.ops = &mbv2_model_ops,
};

MG_PLUGIN_DEFINE(mbv2_plugin)
