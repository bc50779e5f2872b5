/*
 * mbv2.c - MobileNetV2 (Sandler et al. 2018) as torchvision builds it, on
 * the model/strategy contract of model.h.
 *
 * Units (the strategy's wrap/shard granularity): features.0 (stem conv 3x3
 * + BN + ReLU6), one per inverted-residual block, the last 1x1 conv + BN +
 * ReLU6, and the classifier (pool, dropout, linear). Parameter names follow
 * torchvision's state_dict, so "<unit>.<param>" is torchvision's key.
 *
 * Every unit but the classifier is a chain of "stages": conv -> BN ->
 * optional ReLU6, plus the residual add of a block. The model owns only
 * activations: one arena (MG_MEM_ACTIVATIONS) laid out for the current
 * batch shape and reused while it fits. Training keeps each stage's conv
 * output (BN input) and BN/ReLU6 output (the next stage's input and the
 * activation mask) plus the per-channel batch statistics; backward uses
 * three gradient buffers in rotation. Eval keeps nothing: three rotating
 * buffers, BN in place.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mbv2.h"

#define MAX_STAGES 3
/* Key label of the classifier's dropout stream. */
#define DROPOUT_LABEL 0x64726f706f7574ull

/* conv -> BN -> act. Params of the unit at pconv (conv weight) and
 * pconv+1..4 (BN weight, bias, running mean, running var). */
struct stage {
	int cin, cout, k, stride, groups;
	enum mg_act act;
	char conv_name[32], bn_name[32];
	int pconv;
	/* Geometry and arena offsets (bytes) for the current layout. */
	int64_t H, W, OH, OW;
	size_t off_c, off_a, off_mean, off_invstd;
};

struct unit {
	bool head; /* the classifier */
	char name[32];
	int nstages;
	struct stage st[MAX_STAGES];
	bool residual;
	int pw, pb; /* head: linear weight and bias */
};

struct mbv2 {
	struct mbv2_cfg cfg;
	struct mg_ctx *ctx;
	int nunits; /* the last one is the head */
	struct unit *units;
	int feat; /* channels into the classifier */
	struct mg_buf arena, ws;

	/* Current layout. */
	enum mg_dtype dt;
	enum mg_dtype sdt; /* BN saved statistics: F32 for F16/BF16 */
	int64_t n, H, W, fH, fW;
	bool train_layout;
	size_t off_pool, off_drop, off_logits, off_dlogits, off_dpool;
	size_t off_buf[3];

	/* State of the last training forward, for backward. The batch is the
	 * core's; it stays valid until backward has run. */
	bool have_fwd;
	struct mg_tensor input, labels;
	uint64_t drop_key;
	int64_t drop_offset;
};

void mbv2_cfg_default(struct mbv2_cfg *c)
{
	memset(c, 0, sizeof *c);
	c->in_channels = 1;
	c->num_classes = 10;
	c->width_mult = 1.0;
	c->round_nearest = 8;
	c->stem_channels = 32;
	c->stem_stride = 2;
	c->last_channel = 1280;
	c->dropout = 0.2;
	c->bn_momentum = 0.1;
	c->bn_eps = 1e-5;
	snprintf(c->setting, sizeof c->setting, "%s", MBV2_DEFAULT_SETTING);
}

int mbv2_make_divisible(double v, int divisor)
{
	int nv = (int)(v + divisor / 2.0) / divisor * divisor;
	if (nv < divisor)
		nv = divisor;
	if (nv < 0.9 * v) /* never round down by more than 10% */
		nv += divisor;
	return nv;
}

/* Parse "t,c,n,s;t,c,n,s;..." into rows. */
static int parse_setting(const char *s, double *t, int *c, int *n, int *st,
			 int *rows)
{
	*rows = 0;
	const char *p = s;
	while (*p) {
		while (*p == ' ' || *p == ';')
			p++;
		if (!*p)
			break;
		if (*rows == MBV2_MAX_ROWS)
			return mg_error("setting: more than %d rows",
					MBV2_MAX_ROWS);
		char *end;
		double v[4];
		for (int k = 0; k < 4; k++) {
			while (*p == ' ')
				p++;
			v[k] = strtod(p, &end);
			if (end == p)
				return mg_error("setting '%s': expected 4 "
						"numbers t,c,n,s per row "
						"(near '%s')",
						s, p);
			p = end;
			while (*p == ' ')
				p++;
			if (k < 3 && *p++ != ',')
				return mg_error("setting '%s': expected ',' "
						"between t,c,n,s",
						s);
		}
		if (*p && *p != ';')
			return mg_error("setting '%s': expected ';' after a "
					"row (near '%s')",
					s, p);
		int r = *rows;
		t[r] = v[0];
		c[r] = (int)v[1];
		n[r] = (int)v[2];
		st[r] = (int)v[3];
		if (!(v[0] > 0) || v[1] < 1 || v[2] < 1 || v[3] < 1 ||
		    v[1] != c[r] || v[2] != n[r] || v[3] != st[r])
			return mg_error("setting '%s': row %d needs t > 0 and "
					"whole c, n, s >= 1",
					s, r + 1);
		(*rows)++;
	}
	if (*rows == 0)
		return mg_error("setting '%s' has no rows", s);
	return 0;
}

static void set_stage(struct stage *s, int cin, int cout, int k, int stride,
		      int groups, enum mg_act act, const char *conv,
		      const char *bn)
{
	memset(s, 0, sizeof *s);
	s->cin = cin;
	s->cout = cout;
	s->k = k;
	s->stride = stride;
	s->groups = groups;
	s->act = act;
	snprintf(s->conv_name, sizeof s->conv_name, "%s", conv);
	snprintf(s->bn_name, sizeof s->bn_name, "%s", bn);
}

/* The torchvision architecture from cfg. */
static int build(struct mbv2 *m)
{
	const struct mbv2_cfg *c = &m->cfg;
	double t[MBV2_MAX_ROWS];
	int ch[MBV2_MAX_ROWS], rep[MBV2_MAX_ROWS], str[MBV2_MAX_ROWS], rows;
	if (parse_setting(c->setting, t, ch, rep, str, &rows))
		return -1;
	int nblocks = 0;
	for (int r = 0; r < rows; r++)
		nblocks += rep[r];
	m->nunits = nblocks + 3;
	m->units = calloc((size_t)m->nunits, sizeof *m->units);
	if (!m->units)
		return mg_error("out of memory");
	const double w = c->width_mult;
	int inp = mbv2_make_divisible(c->stem_channels * w, c->round_nearest);
	m->feat = mbv2_make_divisible(c->last_channel * (w > 1.0 ? w : 1.0),
				      c->round_nearest);
	struct unit *u = m->units;
	snprintf(u->name, sizeof u->name, "features.0");
	u->nstages = 1;
	set_stage(&u->st[0], c->in_channels, inp, 3, c->stem_stride, 1,
		  MG_ACT_RELU6, "0", "1");
	int idx = 1;
	for (int r = 0; r < rows; r++) {
		const int oup =
			mbv2_make_divisible(ch[r] * w, c->round_nearest);
		for (int i = 0; i < rep[r]; i++, idx++) {
			u = &m->units[idx];
			snprintf(u->name, sizeof u->name, "features.%d", idx);
			const int stride = i == 0 ? str[r] : 1;
			/* Python's int(round(inp * t)): half to even. */
			const int hid = (int)nearbyint(inp * t[r]);
			if (hid < 1)
				return mg_error("setting: expansion %g gives "
						"no channels",
						t[r]);
			char cn[32], bn[32];
			int li = 0, s = 0;
			if (t[r] != 1.0) {
				set_stage(&u->st[s++], inp, hid, 1, 1, 1,
					  MG_ACT_RELU6, "conv.0.0", "conv.0.1");
				li = 1;
			}
			snprintf(cn, sizeof cn, "conv.%d.0", li);
			snprintf(bn, sizeof bn, "conv.%d.1", li);
			set_stage(&u->st[s++], hid, hid, 3, stride, hid,
				  MG_ACT_RELU6, cn, bn);
			snprintf(cn, sizeof cn, "conv.%d", li + 1);
			snprintf(bn, sizeof bn, "conv.%d", li + 2);
			set_stage(&u->st[s++], hid, oup, 1, 1, 1, MG_ACT_NONE,
				  cn, bn);
			u->nstages = s;
			u->residual = stride == 1 && inp == oup;
			inp = oup;
		}
	}
	u = &m->units[idx];
	snprintf(u->name, sizeof u->name, "features.%d", idx);
	u->nstages = 1;
	set_stage(&u->st[0], inp, m->feat, 1, 1, 1, MG_ACT_RELU6, "0", "1");
	u = &m->units[idx + 1];
	snprintf(u->name, sizeof u->name, "classifier");
	u->head = true;
	return 0;
}

int mbv2_create(const struct mbv2_cfg *cfg, struct mg_ctx *ctx, void **self)
{
	const struct mbv2_cfg *c = cfg;
	if (c->in_channels < 1 || c->num_classes < 1 || !(c->width_mult > 0) ||
	    c->round_nearest < 1 || c->stem_channels < 1 ||
	    c->stem_stride < 1 || c->last_channel < 1)
		return mg_error("mobilenetv2: in_channels, num_classes, "
				"width_mult, round_nearest, stem_channels, "
				"stem_stride and last_channel must be "
				"positive");
	if (!(c->dropout >= 0 && c->dropout <= 1) ||
	    !(c->bn_momentum >= 0 && c->bn_momentum <= 1) || !(c->bn_eps > 0))
		return mg_error("mobilenetv2: dropout %g and bn_momentum %g "
				"must be in [0, 1], bn_eps %g > 0",
				c->dropout, c->bn_momentum, c->bn_eps);
	struct mbv2 *m = calloc(1, sizeof *m);
	if (!m)
		return mg_error("out of memory");
	m->cfg = *cfg;
	m->ctx = ctx;
	if (build(m)) {
		mg_error_prefix("mobilenetv2: ");
		mbv2_destroy(m);
		return -1;
	}
	*self = m;
	return 0;
}

void mbv2_destroy(void *self)
{
	struct mbv2 *m = self;
	if (!m)
		return;
	mg_buf_free(m->ctx, &m->arena);
	mg_buf_free(m->ctx, &m->ws);
	free(m->units);
	free(m);
}

/* ------------------------------------------------------------------ */
/* Declaration and initialisation.                                     */

static int add_param(struct mg_model_spec *s, const char *prefix,
		     const char *leaf, int flags, int ndim, int64_t d0,
		     int64_t d1, int64_t d2, int64_t d3)
{
	char name[MG_NAME_MAX];
	int64_t shape[4] = {d0, d1, d2, d3};
	snprintf(name, sizeof name, "%s.%s", prefix, leaf);
	return mg_spec_add_param(s, name, MG_DTYPE_AUTO, flags, ndim, shape);
}

static int mbv2_declare(void *self, struct mg_model_spec *spec)
{
	struct mbv2 *m = self;
	const int TR = MG_P_TRAIN, ND = MG_P_TRAIN | MG_P_NO_DECAY,
		  BN = ND | MG_P_FP32, BUF = MG_P_BUFFER;
	for (int i = 0; i < m->nunits; i++) {
		struct unit *u = &m->units[i];
		if (mg_spec_add_unit(spec, u->name) < 0)
			return -1;
		if (u->head) {
			u->pw = add_param(spec, "1", "weight", TR, 2,
					  m->cfg.num_classes, m->feat, 0, 0);
			u->pb = add_param(spec, "1", "bias", ND, 1,
					  m->cfg.num_classes, 0, 0, 0);
			if (u->pw < 0 || u->pb < 0)
				return -1;
			continue;
		}
		for (int s = 0; s < u->nstages; s++) {
			struct stage *st = &u->st[s];
			const char *cn = st->conv_name, *bn = st->bn_name;
			st->pconv =
				add_param(spec, cn, "weight", TR, 4, st->cout,
					  st->cin / st->groups, st->k, st->k);
			int p1 = add_param(spec, bn, "weight", BN, 1, st->cout,
					   0, 0, 0);
			int p2 = add_param(spec, bn, "bias", BN, 1, st->cout, 0,
					   0, 0);
			int p3 = add_param(spec, bn, "running_mean", BUF, 1,
					   st->cout, 0, 0, 0);
			int p4 = add_param(spec, bn, "running_var", BUF, 1,
					   st->cout, 0, 0, 0);
			if (st->pconv < 0 || p1 != st->pconv + 1 ||
			    p2 != st->pconv + 2 || p3 != st->pconv + 3 ||
			    p4 != st->pconv + 4)
				return p4 < 0 ? -1
					      : mg_error("mobilenetv2: "
							 "unexpected parameter "
							 "index");
		}
	}
	return 0;
}

/* Fill a host tensor: normal(0, std) from the counter stream of key, or
 * the constant v when std == 0. */
static int fill(struct mg_tensor *t, int64_t numel, double std, double v,
		uint64_t key)
{
	if (mg_tensor_numel(t) != numel)
		return mg_error("init: tensor has %lld elements, expected %lld",
				(long long)mg_tensor_numel(t),
				(long long)numel);
	if (t->dtype != MG_F32 && t->dtype != MG_F64)
		return mg_error("init: storage dtype %s is not f32/f64",
				mg_dtype_name(t->dtype));
	for (int64_t i = 0; i < numel; i++) {
		double x = std > 0 ? std * mg_rng_normal(key, (uint64_t)i) : v;
		if (t->dtype == MG_F64)
			((double *)t->data)[i] = x;
		else
			((float *)t->data)[i] = (float)x;
	}
	return 0;
}

/*
 * torchvision's init: conv weights kaiming_normal_(mode="fan_out") with the
 * ReLU gain, std = sqrt(2 / (Cout * kh * kw)); BN weight 1, bias 0, running
 * mean 0, running var 1; linear weight normal(0, 0.01), bias 0. Parameter
 * i of the unit draws from key mg_rng_key(seed, i), element j from counter
 * j: values depend only on (seed, unit, parameter, element).
 */
static int mbv2_init_unit(void *self, int unit, struct mg_tensor *params,
			  uint64_t seed)
{
	struct mbv2 *m = self;
	if (unit < 0 || unit >= m->nunits)
		return mg_error("mobilenetv2: no unit %d", unit);
	const struct unit *u = &m->units[unit];
	int rc = 0;
	if (u->head) {
		const int64_t K = m->cfg.num_classes;
		rc = fill(&params[u->pw], K * m->feat, 0.01, 0,
			  mg_rng_key(seed, (uint64_t)u->pw));
		rc = rc ? rc : fill(&params[u->pb], K, 0, 0, 0);
	}
	for (int s = 0; !rc && s < u->nstages; s++) {
		const struct stage *st = &u->st[s];
		const int p = st->pconv;
		const int64_t wn = (int64_t)st->cout * (st->cin / st->groups) *
				   st->k * st->k;
		const double std =
			sqrt(2.0 / ((double)st->cout * st->k * st->k));
		rc = fill(&params[p], wn, std, 0,
			  mg_rng_key(seed, (uint64_t)p));
		rc = rc ? rc : fill(&params[p + 1], st->cout, 0, 1, 0);
		rc = rc ? rc : fill(&params[p + 2], st->cout, 0, 0, 0);
		rc = rc ? rc : fill(&params[p + 3], st->cout, 0, 0, 0);
		rc = rc ? rc : fill(&params[p + 4], st->cout, 0, 1, 0);
	}
	if (rc)
		return mg_error_prefix("mobilenetv2 %s: ", u->name);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Activation layout.                                                  */

static size_t take(size_t *off, size_t bytes)
{
	size_t at = *off;
	*off = (at + bytes + 63) & ~(size_t)63;
	return at;
}

/*
 * Lay out the arena for a batch [n, C, H, W] of dt: stage geometry, and in
 * training the kept activations; grow the arena if needed.
 */
static int plan(struct mbv2 *m, struct mg_ctx *ctx, int64_t n, int64_t H,
		int64_t W, enum mg_dtype dt, bool training)
{
	const size_t es = mg_dtype_size(dt);
	/* Half-precision runs keep batch-norm statistics and parameters in
	 * F32 (mixed-precision practice; the ops expect it). */
	const enum mg_dtype sdt = dt == MG_F16 || dt == MG_BF16 ? MG_F32 : dt;
	const size_t ss = mg_dtype_size(sdt);
	size_t off = 0;
	int64_t h = H, w = W, max_act = 0;
	for (int i = 0; i < m->nunits - 1; i++) {
		struct unit *u = &m->units[i];
		for (int s = 0; s < u->nstages; s++) {
			struct stage *st = &u->st[s];
			const int pad = (st->k - 1) / 2;
			st->H = h;
			st->W = w;
			st->OH = mg_conv_out_dim(h, st->k, st->stride, pad);
			st->OW = mg_conv_out_dim(w, st->k, st->stride, pad);
			const int64_t act = n * st->cout * st->OH * st->OW;
			if (act > max_act)
				max_act = act;
			if (training) {
				st->off_c = take(&off, (size_t)act * es);
				st->off_a = take(&off, (size_t)act * es);
				st->off_mean =
					take(&off, (size_t)st->cout * ss);
				st->off_invstd =
					take(&off, (size_t)st->cout * ss);
			}
			h = st->OH;
			w = st->OW;
		}
	}
	const int64_t K = m->cfg.num_classes;
	m->fH = h;
	m->fW = w;
	m->off_pool = take(&off, (size_t)(n * m->feat) * es);
	m->off_logits = take(&off, (size_t)(n * K) * es);
	if (training) {
		m->off_drop = take(&off, (size_t)(n * m->feat) * es);
		m->off_dpool = take(&off, (size_t)(n * m->feat) * es);
		m->off_dlogits = take(&off, (size_t)(n * K) * es);
	}
	for (int b = 0; b < 3; b++)
		m->off_buf[b] = take(&off, (size_t)max_act * es);
	m->dt = dt;
	m->sdt = sdt;
	m->n = n;
	m->H = H;
	m->W = W;
	m->train_layout = training;
	return mg_buf_reserve(ctx, &m->arena, off, MG_MEM_ACTIVATIONS);
}

static struct mg_tensor ten(struct mbv2 *m, struct mg_ctx *ctx, size_t off,
			    int ndim, int64_t d0, int64_t d1, int64_t d2,
			    int64_t d3)
{
	struct mg_tensor t;
	memset(&t, 0, sizeof t);
	t.data = (char *)m->arena.ptr + off;
	t.dtype = m->dt;
	t.device = ctx->dev->kind;
	t.ndim = ndim;
	t.shape[0] = d0;
	t.shape[1] = d1;
	t.shape[2] = d2;
	t.shape[3] = d3;
	return t;
}

/* Output (BN/act, residual included) of stage s, training layout. */
static struct mg_tensor stage_out(struct mbv2 *m, struct mg_ctx *ctx,
				  const struct stage *st)
{
	return ten(m, ctx, st->off_a, 4, m->n, st->cout, st->OH, st->OW);
}

/* A rotating buffer index other than a and b. */
static int pick(int a, int b)
{
	for (int i = 0; i < 3; i++)
		if (i != a && i != b)
			return i;
	return -1;
}

static struct mg_conv2d_args conv_args(const struct stage *st)
{
	const int pad = (st->k - 1) / 2;
	struct mg_conv2d_args a = {st->stride, st->stride, pad, pad,
				   st->groups};
	return a;
}

static struct mg_bn_args bn_args(const struct mbv2 *m, const struct stage *st,
				 bool training)
{
	struct mg_bn_args a = {m->cfg.bn_eps, m->cfg.bn_momentum, training,
			       st->act};
	return a;
}

/* Gradient tensor i of a view, or NULL when it has none (frozen). */
static struct mg_tensor *grad_of(struct mg_unit_view *v, int i)
{
	return v->grads && v->grads[i].data ? &v->grads[i] : NULL;
}

/* ------------------------------------------------------------------ */
/* Forward.                                                            */

/*
 * One conv/BN unit. *x is its input; *xbuf the eval buffer holding it
 * (-1: the batch input). On return *x is its output.
 */
static int unit_forward(struct mbv2 *m, struct mg_ctx *ctx,
			const struct unit *u, struct mg_unit_view *v,
			struct mg_tensor *x, int *xbuf, bool tr)
{
	const struct mg_tensor uin = *x;
	struct mg_tensor in = uin;
	int ibuf = *xbuf;
	for (int s = 0; s < u->nstages; s++) {
		const struct stage *st = &u->st[s];
		const int p = st->pconv;
		struct mg_tensor c, a, mean, invstd;
		if (tr) {
			c = ten(m, ctx, st->off_c, 4, m->n, st->cout, st->OH,
				st->OW);
			a = stage_out(m, ctx, st);
			mean = ten(m, ctx, st->off_mean, 1, st->cout, 0, 0, 0);
			invstd = ten(m, ctx, st->off_invstd, 1, st->cout, 0, 0,
				     0);
			mean.dtype = invstd.dtype = m->sdt;
		} else {
			/* Eval: a buffer other than the unit's and the
			 * stage's input; BN in place. */
			ibuf = pick(*xbuf, ibuf);
			c = ten(m, ctx, m->off_buf[ibuf], 4, m->n, st->cout,
				st->OH, st->OW);
			a = c;
		}
		const struct mg_conv2d_args ca = conv_args(st);
		if (mg_op_conv2d(ctx, &ca, &in, &v->params[p], NULL, &c,
				 &m->ws))
			return mg_error_prefix("%s: ", st->conv_name);
		const struct mg_bn_args ba = bn_args(m, st, tr);
		if (mg_op_batchnorm2d(ctx, &ba, &c, &v->params[p + 1],
				      &v->params[p + 2], &v->params[p + 3],
				      &v->params[p + 4], tr ? &mean : NULL,
				      tr ? &invstd : NULL, &a))
			return mg_error_prefix("%s: ", st->bn_name);
		in = a;
	}
	if (u->residual && mg_op_add(ctx, &in, &uin, &in))
		return mg_error_prefix("residual: ");
	*x = in;
	*xbuf = ibuf;
	return 0;
}

/* Pool, dropout (training), linear. */
static int head_forward(struct mbv2 *m, struct mg_ctx *ctx,
			const struct unit *u, struct mg_unit_view *v,
			const struct mg_tensor *x, bool tr,
			struct mg_tensor *logits)
{
	const int64_t n = m->n, C = m->feat;
	struct mg_tensor pool = ten(m, ctx, m->off_pool, 2, n, C, 0, 0);
	if (mg_op_global_avgpool(ctx, x, &pool))
		return -1;
	struct mg_tensor *lin_in = &pool, drop;
	if (tr && m->cfg.dropout > 0) {
		drop = ten(m, ctx, m->off_drop, 2, n, C, 0, 0);
		if (mg_op_dropout(ctx, &pool, &drop, m->cfg.dropout,
				  m->drop_key, m->drop_offset))
			return -1;
		lin_in = &drop;
	}
	*logits = ten(m, ctx, m->off_logits, 2, n, m->cfg.num_classes, 0, 0);
	return mg_op_linear(ctx, lin_in, &v->params[u->pw], &v->params[u->pb],
			    logits);
}

static int check_batch(const struct mbv2 *m, const struct mg_ctx *ctx,
		       const struct mg_batch *b)
{
	const struct mg_tensor *x = &b->input;
	if (x->ndim != 4 || x->shape[0] != b->n || b->n < 1 ||
	    x->shape[1] != m->cfg.in_channels || x->shape[2] < 1 ||
	    x->shape[3] < 1)
		return mg_error("mobilenetv2: input must be [n, %d, H, W] "
				"with n = %lld >= 1 (in_channels = %d)",
				m->cfg.in_channels, (long long)b->n,
				m->cfg.in_channels);
	if (x->dtype != ctx->compute_dtype)
		return mg_error("mobilenetv2: input is %s; the compute dtype "
				"is %s",
				mg_dtype_name(x->dtype),
				mg_dtype_name(ctx->compute_dtype));
	if (b->labels.dtype != MG_I32 || mg_tensor_numel(&b->labels) != b->n)
		return mg_error("mobilenetv2: labels must be %lld i32 values",
				(long long)b->n);
	return 0;
}

static int mbv2_forward(void *self, struct mg_ctx *ctx,
			const struct mg_batch *b, struct mg_tensor *metrics)
{
	struct mbv2 *m = self;
	const bool tr = ctx->training;
	m->have_fwd = false;
	if (check_batch(m, ctx, b))
		return -1;
	const struct mg_tensor *in = &b->input;
	if (plan(m, ctx, b->n, in->shape[2], in->shape[3], in->dtype, tr))
		return mg_error_prefix("mobilenetv2 activations: ");
	if (tr) {
		/* The op mixes in the step itself (on the device on a
		 * GPU, so replayed CUDA graphs draw new masks). */
		m->drop_key = mg_rng_key(ctx->seed, DROPOUT_LABEL);
		m->drop_offset = b->global_offset * m->feat;
	}
	const enum mg_phase ph = tr ? MG_PHASE_FORWARD : MG_PHASE_EVAL;
	struct mg_tensor x = *in, logits;
	int xbuf = -1;
	for (int i = 0; i < m->nunits; i++) {
		const struct unit *u = &m->units[i];
		struct mg_unit_view *v = mg_acquire(ctx, i, ph);
		if (!v)
			return mg_error_prefix("mobilenetv2 %s: ", u->name);
		int rc = u->head ? head_forward(m, ctx, u, v, &x, tr, &logits)
				 : unit_forward(m, ctx, u, v, &x, &xbuf, tr);
		mg_release(ctx, i, ph);
		if (rc)
			return mg_error_prefix("mobilenetv2 %s: ", u->name);
	}
	if (mg_op_softmax_xent(ctx, &logits, &b->labels, metrics))
		return mg_error_prefix("mobilenetv2 loss: ");
	if (tr) {
		m->input = *in;
		m->labels = b->labels;
		m->have_fwd = true;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Backward.                                                           */

static int head_backward(struct mbv2 *m, struct mg_ctx *ctx,
			 const struct unit *u, struct mg_unit_view *v)
{
	const int64_t n = m->n, C = m->feat, K = m->cfg.num_classes;
	struct mg_tensor logits = ten(m, ctx, m->off_logits, 2, n, K, 0, 0);
	struct mg_tensor dlog = ten(m, ctx, m->off_dlogits, 2, n, K, 0, 0);
	if (mg_op_softmax_xent_backward(ctx, &logits, &m->labels,
					&ctx->grad_scale, &dlog))
		return -1;
	const bool drop = m->cfg.dropout > 0;
	struct mg_tensor x =
		ten(m, ctx, drop ? m->off_drop : m->off_pool, 2, n, C, 0, 0);
	struct mg_tensor dpool = ten(m, ctx, m->off_dpool, 2, n, C, 0, 0);
	if (mg_op_linear_backward(ctx, &x, &v->params[u->pw], &dlog, &dpool,
				  grad_of(v, u->pw), grad_of(v, u->pb)))
		return -1;
	if (drop && mg_op_dropout_backward(ctx, &dpool, &dpool, m->cfg.dropout,
					   m->drop_key, m->drop_offset))
		return -1;
	struct mg_tensor g = ten(m, ctx, m->off_buf[0], 4, n, C, m->fH, m->fW);
	return mg_op_global_avgpool_backward(ctx, &dpool, &g);
}

/*
 * One conv/BN unit: *gbuf holds the gradient of its output on entry and of
 * its input on return. A residual unit keeps that buffer untouched until
 * the skip gradient is added at the end.
 */
static int unit_backward(struct mbv2 *m, struct mg_ctx *ctx, int ui,
			 struct mg_unit_view *v, int *gbuf)
{
	const struct unit *u = &m->units[ui];
	const int hold = u->residual ? *gbuf : -1;
	int g = *gbuf;
	for (int s = u->nstages - 1; s >= 0; s--) {
		const struct stage *st = &u->st[s];
		const int p = st->pconv;
		const int64_t n = m->n;
		struct mg_tensor c =
			ten(m, ctx, st->off_c, 4, n, st->cout, st->OH, st->OW);
		struct mg_tensor a = stage_out(m, ctx, st);
		struct mg_tensor mean =
			ten(m, ctx, st->off_mean, 1, st->cout, 0, 0, 0);
		struct mg_tensor invstd =
			ten(m, ctx, st->off_invstd, 1, st->cout, 0, 0, 0);
		mean.dtype = invstd.dtype = m->sdt;
		/* BN (+ReLU6) backward, in place unless g must be kept. */
		const int zb = g == hold ? pick(g, -1) : g;
		struct mg_tensor dy = ten(m, ctx, m->off_buf[g], 4, n, st->cout,
					  st->OH, st->OW);
		struct mg_tensor dz = ten(m, ctx, m->off_buf[zb], 4, n,
					  st->cout, st->OH, st->OW);
		const struct mg_bn_args ba = bn_args(m, st, true);
		if (mg_op_batchnorm2d_backward(
			    ctx, &ba, &c, &a, &dy, &v->params[p + 1], &mean,
			    &invstd, &dz, grad_of(v, p + 1), grad_of(v, p + 2)))
			return mg_error_prefix("%s: ", st->bn_name);
		/* Conv backward; the stem's input needs no gradient. */
		struct mg_tensor x;
		if (s > 0)
			x = stage_out(m, ctx, &u->st[s - 1]);
		else if (ui > 0)
			x = stage_out(
				m, ctx,
				&m->units[ui - 1]
					 .st[m->units[ui - 1].nstages - 1]);
		else
			x = m->input;
		const int xb = pick(zb, hold);
		struct mg_tensor dx = ten(m, ctx, m->off_buf[xb], 4, n, st->cin,
					  st->H, st->W);
		const struct mg_conv2d_args ca = conv_args(st);
		if (mg_op_conv2d_backward(ctx, &ca, &x, &v->params[p], &dz,
					  ui == 0 && s == 0 ? NULL : &dx,
					  grad_of(v, p), NULL, &m->ws))
			return mg_error_prefix("%s: ", st->conv_name);
		g = xb;
	}
	if (u->residual) {
		const struct stage *st = &u->st[0];
		struct mg_tensor d = ten(m, ctx, m->off_buf[g], 4, m->n,
					 st->cin, st->H, st->W);
		struct mg_tensor skip = ten(m, ctx, m->off_buf[hold], 4, m->n,
					    st->cin, st->H, st->W);
		if (mg_op_add(ctx, &d, &skip, &d))
			return mg_error_prefix("residual: ");
	}
	*gbuf = g;
	return 0;
}

static int mbv2_backward(void *self, struct mg_ctx *ctx)
{
	struct mbv2 *m = self;
	if (!m->have_fwd || !m->train_layout)
		return mg_error("mobilenetv2: backward() needs a training "
				"forward() first");
	m->have_fwd = false;
	int g = 0;
	for (int i = m->nunits - 1; i >= 0; i--) {
		const struct unit *u = &m->units[i];
		struct mg_unit_view *v = mg_acquire(ctx, i, MG_PHASE_BACKWARD);
		if (!v)
			return mg_error_prefix("mobilenetv2 %s: ", u->name);
		int rc = u->head ? head_backward(m, ctx, u, v)
				 : unit_backward(m, ctx, i, v, &g);
		if (!rc)
			rc = mg_grads_ready(ctx, i);
		mg_release(ctx, i, MG_PHASE_BACKWARD);
		if (rc)
			return mg_error_prefix("mobilenetv2 %s backward: ",
					       u->name);
	}
	return 0;
}

const struct mg_model_ops mbv2_model_ops = {
	.declare = mbv2_declare,
	.init_unit = mbv2_init_unit,
	.forward = mbv2_forward,
	.backward = mbv2_backward,
};
