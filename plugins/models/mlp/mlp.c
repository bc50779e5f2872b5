/*
 * mlp.c - a multilayer perceptron model plugin: flattened image -> linear
 * -> ReLU6 -> ... -> linear -> softmax cross-entropy, one unit per layer.
 *
 * Why it exists next to MobileNetV2: it has no batch statistics, so a
 * batch split over N ranks computes exactly what one rank computes on the
 * whole batch (up to summation order). The strategy equivalence tests
 * rely on that, and it is the smallest complete example of the model
 * side of the model/strategy contract (acquire, release, grads_ready).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"

#define MLP_MAX_LAYERS 16

struct mlp {
	int nlayers; /* linear layers, the last one is "out" */
	int64_t dim[MLP_MAX_LAYERS + 1]; /* dim[0] inputs, dim[L] classes */
	struct mg_ctx *ctx;
	struct mg_buf arena; /* activations: y_l and a_l per layer, grads */
	int64_t n;	     /* rows the arena is laid out for */
	bool have_fwd;
	struct mg_tensor input, labels;
};

static const struct mg_option mlp_options[] = {
	MG_OPT_I("in_features", "784", 1, 1 << 30,
		 "inputs per sample: channels x height x width of the "
		 "dataset's images"),
	MG_OPT_S("hidden", "128,64",
		 "hidden layer widths, comma-separated (empty: a linear "
		 "classifier)"),
	MG_OPT_I("num_classes", "10", 2, 1 << 24, "output classes"),
	MG_OPT_END,
};

static int parse_hidden(struct mlp *m, const char *s)
{
	int L = 0;
	while (*s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (end == s || v < 1 || v > (1L << 24))
			return mg_error("mlp: hidden: '%s' is not a list of "
					"positive widths",
					s);
		if (L + 2 > MLP_MAX_LAYERS)
			return mg_error("mlp: hidden: at most %d layers",
					MLP_MAX_LAYERS - 1);
		m->dim[++L] = v;
		s = end;
		while (*s == ' ')
			s++;
		if (*s == ',')
			s++;
		else if (*s)
			return mg_error("mlp: hidden: unexpected '%s'", s);
	}
	m->nlayers = L + 1;
	return 0;
}

static int mlp_create(const struct mg_opts *o, struct mg_ctx *ctx, void **self)
{
	struct mlp *m = calloc(1, sizeof *m);
	if (!m)
		return mg_error("out of memory");
	m->ctx = ctx;
	m->dim[0] = mg_opt_int(o, "in_features");
	if (parse_hidden(m, mg_opt_str(o, "hidden"))) {
		free(m);
		return -1;
	}
	m->dim[m->nlayers] = mg_opt_int(o, "num_classes");
	*self = m;
	return 0;
}

static void mlp_destroy(void *self)
{
	struct mlp *m = self;
	mg_buf_free(m->ctx, &m->arena);
	free(m);
}

static int mlp_declare(void *self, struct mg_model_spec *spec)
{
	struct mlp *m = self;
	for (int l = 0; l < m->nlayers; l++) {
		char name[32];
		if (l + 1 == m->nlayers)
			snprintf(name, sizeof name, "out");
		else
			snprintf(name, sizeof name, "fc%d", l);
		int64_t w[2] = {m->dim[l + 1], m->dim[l]};
		if (mg_spec_add_unit(spec, name) < 0 ||
		    mg_spec_add_param(spec, "weight", MG_DTYPE_AUTO, MG_P_TRAIN,
				      2, w) < 0 ||
		    mg_spec_add_param(spec, "bias", MG_DTYPE_AUTO,
				      MG_P_TRAIN | MG_P_NO_DECAY, 1, w) < 0)
			return -1;
	}
	return 0;
}

/* PyTorch's nn.Linear default: weight and bias uniform in
 * +-1/sqrt(fan_in). Parameter i of the unit draws from mg_rng_key(seed, i). */
static int mlp_init_unit(void *self, int unit, struct mg_tensor *params,
			 uint64_t seed)
{
	struct mlp *m = self;
	if (unit < 0 || unit >= m->nlayers)
		return mg_error("mlp: no unit %d", unit);
	const double bound = 1.0 / sqrt((double)m->dim[unit]);
	for (int i = 0; i < 2; i++) {
		struct mg_tensor *t = &params[i];
		uint64_t key = mg_rng_key(seed, (uint64_t)i);
		int64_t n = mg_tensor_numel(t);
		if (t->dtype != MG_F32 && t->dtype != MG_F64)
			return mg_error("mlp: storage dtype %s is not f32/f64",
					mg_dtype_name(t->dtype));
		for (int64_t j = 0; j < n; j++) {
			double x = bound *
				   (2 * mg_rng_uniform(key, (uint64_t)j) - 1);
			if (t->dtype == MG_F64)
				((double *)t->data)[j] = x;
			else
				((float *)t->data)[j] = (float)x;
		}
	}
	return 0;
}

/* Arena layout for n rows: per layer l its output y_l [n, dim[l+1]] and,
 * for hidden layers, the activation a_l; then two gradient buffers of the
 * widest layer. */
static size_t act_elems(const struct mlp *m, int64_t n)
{
	int64_t e = 0, widest = 0;
	for (int l = 1; l <= m->nlayers; l++) {
		e += 2 * n * m->dim[l];
		if (m->dim[l - 1] > widest)
			widest = m->dim[l - 1];
		if (m->dim[l] > widest)
			widest = m->dim[l];
	}
	return (size_t)(e + 2 * n * widest);
}

static struct mg_tensor rows(const struct mlp *m, void *base, int64_t off,
			     int64_t n, int64_t d)
{
	int64_t shape[2] = {n, d};
	size_t es = mg_dtype_size(m->ctx->compute_dtype);
	return mg_tensor_make((char *)base + (size_t)off * es,
			      m->ctx->compute_dtype, m->ctx->dev->kind, 2,
			      shape);
}

/* Offsets in the arena: y of layer l, a of layer l, gradient buffer k. */
static int64_t off_y(const struct mlp *m, int l)
{
	int64_t o = 0;
	for (int k = 0; k < l; k++)
		o += 2 * m->n * m->dim[k + 1];
	return o;
}

static int64_t off_a(const struct mlp *m, int l)
{
	return off_y(m, l) + m->n * m->dim[l + 1];
}

static int64_t off_g(const struct mlp *m, int k)
{
	int64_t widest = 0;
	for (int l = 0; l <= m->nlayers; l++)
		if (m->dim[l] > widest)
			widest = m->dim[l];
	return off_y(m, m->nlayers) + k * m->n * widest;
}

static int mlp_forward(void *self, struct mg_ctx *ctx, const struct mg_batch *b,
		       struct mg_tensor *metrics)
{
	struct mlp *m = self;
	const struct mg_tensor *in = &b->input;
	m->have_fwd = false;
	int64_t feat = b->n > 0 ? mg_tensor_numel(in) / b->n : 0;
	if (b->n < 1 || in->shape[0] != b->n || feat != m->dim[0])
		return mg_error("mlp: the input has %lld features per sample, "
				"model.in_features is %lld (channels x height "
				"x width of the dataset's images)",
				(long long)feat, (long long)m->dim[0]);
	if (in->dtype != ctx->compute_dtype)
		return mg_error("mlp: input is %s, compute dtype is %s",
				mg_dtype_name(in->dtype),
				mg_dtype_name(ctx->compute_dtype));
	size_t bytes = act_elems(m, b->n) * mg_dtype_size(ctx->compute_dtype);
	if (mg_buf_reserve(ctx, &m->arena, bytes, MG_MEM_ACTIVATIONS))
		return mg_error_prefix("mlp activations");
	m->n = b->n;
	const enum mg_phase ph =
		ctx->training ? MG_PHASE_FORWARD : MG_PHASE_EVAL;
	struct mg_tensor x = rows(m, in->data, 0, b->n, m->dim[0]);
	for (int l = 0; l < m->nlayers; l++) {
		struct mg_unit_view *v = mg_acquire(ctx, l, ph);
		if (!v)
			return -1;
		struct mg_tensor y =
			rows(m, m->arena.ptr, off_y(m, l), b->n, m->dim[l + 1]);
		int rc =
			mg_op_linear(ctx, &x, &v->params[0], &v->params[1], &y);
		mg_release(ctx, l, ph);
		if (rc)
			return mg_error_prefix("mlp layer %d", l);
		x = y;
		if (l + 1 < m->nlayers) {
			x = rows(m, m->arena.ptr, off_a(m, l), b->n,
				 m->dim[l + 1]);
			if (mg_op_relu6(ctx, &y, &x))
				return -1;
		}
	}
	if (mg_op_softmax_xent(ctx, &x, &b->labels, metrics))
		return mg_error_prefix("mlp loss");
	if (ctx->training) {
		m->input = rows(m, in->data, 0, b->n, m->dim[0]);
		m->labels = b->labels;
		m->have_fwd = true;
	}
	return 0;
}

static int mlp_backward(void *self, struct mg_ctx *ctx)
{
	struct mlp *m = self;
	if (!m->have_fwd)
		return mg_error("mlp: backward() needs a training forward()");
	m->have_fwd = false;
	const int L = m->nlayers;
	const int64_t n = m->n;
	int g = 0; /* gradient buffer holding d(loss)/d(y_l) */
	struct mg_tensor dy = rows(m, m->arena.ptr, off_g(m, g), n, m->dim[L]);
	struct mg_tensor logits =
		rows(m, m->arena.ptr, off_y(m, L - 1), n, m->dim[L]);
	if (mg_op_softmax_xent_backward(ctx, &logits, &m->labels,
					&ctx->grad_scale, &dy))
		return mg_error_prefix("mlp loss backward");
	for (int l = L - 1; l >= 0; l--) {
		struct mg_unit_view *v = mg_acquire(ctx, l, MG_PHASE_BACKWARD);
		if (!v)
			return -1;
		struct mg_tensor x =
			l == 0 ? m->input
			       : rows(m, m->arena.ptr, off_a(m, l - 1), n,
				      m->dim[l]);
		struct mg_tensor dx =
			rows(m, m->arena.ptr, off_g(m, 1 - g), n, m->dim[l]);
		int rc = mg_op_linear_backward(ctx, &x, &v->params[0], &dy,
					       l == 0 ? NULL : &dx,
					       &v->grads[0], &v->grads[1]);
		if (!rc)
			rc = mg_grads_ready(ctx, l);
		mg_release(ctx, l, MG_PHASE_BACKWARD);
		if (rc)
			return mg_error_prefix("mlp layer %d backward", l);
		if (l == 0)
			break;
		/* Through ReLU6, from its output a_{l-1}. */
		if (mg_op_relu6_backward(ctx, &x, &dx, &dx))
			return -1;
		g = 1 - g;
		dy = dx;
	}
	return 0;
}

static const struct mg_model_ops mlp_ops = {
	.declare = mlp_declare,
	.init_unit = mlp_init_unit,
	.forward = mlp_forward,
	.backward = mlp_backward,
};

static const struct mg_plugin mlp_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_MODEL,
	.name = "mlp",
	.version = "1.0",
	.description = "multilayer perceptron (linear + ReLU6), no batch "
		       "statistics: the reference model of strategy "
		       "equivalence tests",
	.options = mlp_options,
	.create = mlp_create,
	.destroy = mlp_destroy,
	.ops = &mlp_ops,
};

MG_PLUGIN_DEFINE(mlp_plugin)
