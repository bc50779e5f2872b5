/*
 * test_ops_llm.c - checks of the CPU LLM ops (ops_llm.h).
 *
 *   test_ops_llm embedding|rmsnorm|rope|attention|decode|swiglu|precision|
 *                errors|determinism
 *
 * Forwards against naive direct formulas (attention materialises the
 * repeated key/value heads and the document mask), backwards against
 * central finite differences in fp64 of L = sum(y * R) for a fixed random
 * R, fp32 against fp64, argument errors, and bit-identical results with
 * one thread and with all. Activation gradients start as NaN (they must
 * be written), parameter gradients random (they must accumulate). Inputs
 * are random from a seed that MG_TEST_SEED overrides; failures print it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MG_OP_TEST_SEED 20250301
#include "../common/op_test_util.h"
#include "mg/mg.h"

/* ------------------------------------------------------------------ */
/* Host tensors.                                                       */

static int32_t *I(const struct mg_tensor *t)
{
	return t->data;
}

static void fill_nan(struct mg_tensor *t)
{
	for (int64_t i = 0; i < N_(t); i++)
		D(t)[i] = NAN;
}

/* Analytic parameter gradient: the change of an accumulated buffer. */
static double *delta(const struct mg_tensor *after,
		     const struct mg_tensor *before)
{
	double *d = malloc((size_t)(N_(after) ? N_(after) : 1) * sizeof *d);
	for (int64_t i = 0; i < N_(after); i++)
		d[i] = D(after)[i] - D(before)[i];
	return d;
}

#define FD_TOL 1e-6

/* ------------------------------------------------------------------ */
/* Embedding.                                                          */

struct emb_fd {
	struct mg_tensor *ids, *table, *y, *R;
};

static double emb_loss(void *arg)
{
	struct emb_fd *f = arg;
	if (mg_op_embedding(&ctx, f->ids, f->table, f->y))
		return NAN;
	return dot(f->y, f->R);
}

static void test_embedding(void)
{
	const int64_t V = 7, Dm = 6, N = 3, T = 5;
	struct mg_tensor ids = mk(MG_I32, 2, N, T, 0, 0);
	for (int64_t i = 0; i < N * T; i++)
		I(&ids)[i] = (int32_t)(urand() * (double)(V - 1));
	I(&ids)[3] = I(&ids)[7] = I(&ids)[11] = (int32_t)(V - 1); /* repeats */
	struct mg_tensor table = mk(MG_F64, 2, V, Dm, 0, 0);
	struct mg_tensor y = mk(MG_F64, 3, N, T, Dm, 0);
	struct mg_tensor R = clone(&y);
	fill_rand(&table, 1), fill_rand(&R, 1), fill_nan(&y);
	CHECK_OK(mg_op_embedding(&ctx, &ids, &table, &y));
	double *want = malloc((size_t)N_(&y) * sizeof *want);
	for (int64_t r = 0; r < N * T; r++)
		for (int64_t d = 0; d < Dm; d++)
			want[r * Dm + d] = D(&table)[I(&ids)[r] * Dm + d];
	expect_close("embedding forward", D(&y), want, N_(&y), 0);
	struct mg_tensor dt = mk(MG_F64, 2, V, Dm, 0, 0);
	fill_rand(&dt, 1);
	struct mg_tensor dt0 = clone(&dt);
	CHECK_OK(mg_op_embedding_backward(&ctx, &ids, &R, &dt));
	double *ana = delta(&dt, &dt0);
	double *naive = calloc((size_t)N_(&dt), sizeof *naive);
	for (int64_t r = 0; r < N * T; r++)
		for (int64_t d = 0; d < Dm; d++)
			naive[I(&ids)[r] * Dm + d] += D(&R)[r * Dm + d];
	expect_close("embedding backward (direct sums)", ana, naive, N_(&dt),
		     1e-12);
	struct emb_fd f = {&ids, &table, &y, &R};
	fd_check("embedding dtable", &table, ana, emb_loss, &f, 0, FD_TOL);
	free(want), free(ana), free(naive);
	del(&ids), del(&table), del(&y), del(&R), del(&dt), del(&dt0);
}

/* ------------------------------------------------------------------ */
/* RMSNorm.                                                            */

struct rms_fd {
	struct mg_tensor *x, *w, *y, *R;
	double eps;
};

static double rms_loss(void *arg)
{
	struct rms_fd *f = arg;
	if (mg_op_rmsnorm(&ctx, f->x, f->w, f->eps, f->y, NULL))
		return NAN;
	return dot(f->y, f->R);
}

static void rms_case(int64_t A, int64_t B, int64_t Dm, double eps)
{
	char name[64];
	snprintf(name, sizeof name, "rmsnorm [%lld, %lld, %lld]", (long long)A,
		 (long long)B, (long long)Dm);
	struct mg_tensor x = mk(MG_F64, 3, A, B, Dm, 0), y = clone(&x),
			 R = clone(&x), dx = clone(&x);
	struct mg_tensor w = mk(MG_F64, 1, Dm, 0, 0, 0);
	struct mg_tensor rstd = mk(MG_F64, 2, A, B, 0, 0);
	fill_rand(&x, 2), fill_rand(&R, 1), fill_nan(&y), fill_nan(&dx);
	for (int64_t i = 0; i < Dm; i++)
		D(&w)[i] = 1 + 0.5 * srand1();
	CHECK_OK(mg_op_rmsnorm(&ctx, &x, &w, eps, &y, &rstd));
	const int64_t Rn = A * B;
	double *want = malloc((size_t)N_(&x) * sizeof *want);
	double *wr = malloc((size_t)Rn * sizeof *wr);
	for (int64_t r = 0; r < Rn; r++) {
		double ss = 0;
		for (int64_t i = 0; i < Dm; i++)
			ss += D(&x)[r * Dm + i] * D(&x)[r * Dm + i];
		wr[r] = 1 / sqrt(ss / (double)Dm + eps);
		for (int64_t i = 0; i < Dm; i++)
			want[r * Dm + i] = D(&x)[r * Dm + i] * wr[r] * D(&w)[i];
	}
	char buf[128];
	snprintf(buf, sizeof buf, "%s forward", name);
	expect_close(buf, D(&y), want, N_(&y), 1e-13);
	snprintf(buf, sizeof buf, "%s rstd", name);
	expect_close(buf, D(&rstd), wr, Rn, 1e-13);
	/* y may alias x */
	struct mg_tensor xa = clone(&x);
	CHECK_OK(mg_op_rmsnorm(&ctx, &xa, &w, eps, &xa, NULL));
	snprintf(buf, sizeof buf, "%s in place", name);
	expect_close(buf, D(&xa), D(&y), N_(&y), 0);
	/* w in F32 with F64 data */
	struct mg_tensor w32 = to_f32(&w), y2 = clone(&y);
	CHECK_OK(mg_op_rmsnorm(&ctx, &x, &w32, eps, &y2, NULL));
	snprintf(buf, sizeof buf, "%s F32 weight", name);
	expect_close(buf, D(&y2), D(&y), N_(&y), 1e-6);

	struct mg_tensor dw = clone(&w);
	fill_rand(&dw, 1);
	struct mg_tensor dw0 = clone(&dw);
	CHECK_OK(mg_op_rmsnorm_backward(&ctx, &x, &w, &rstd, &R, &dx, &dw));
	double *adw = delta(&dw, &dw0);
	struct rms_fd f = {&x, &w, &y, &R, eps};
	snprintf(buf, sizeof buf, "%s dx", name);
	fd_check(buf, &x, D(&dx), rms_loss, &f, 0, FD_TOL);
	snprintf(buf, sizeof buf, "%s dw", name);
	fd_check(buf, &w, adw, rms_loss, &f, 0, FD_TOL);
	/* dx only, and dx aliasing dy */
	struct mg_tensor Ra = clone(&R);
	CHECK_OK(mg_op_rmsnorm_backward(&ctx, &x, &w, &rstd, &Ra, &Ra, NULL));
	snprintf(buf, sizeof buf, "%s dx aliasing dy", name);
	expect_close(buf, D(&Ra), D(&dx), N_(&dx), 1e-15);
	free(want), free(wr), free(adw);
	del(&x), del(&y), del(&R), del(&dx), del(&w), del(&rstd), del(&xa);
	del(&w32), del(&y2), del(&dw), del(&dw0), del(&Ra);
}

static void test_rmsnorm(void)
{
	rms_case(2, 3, 10, 1e-6);
	rms_case(1, 5, 16, 1e-5);
	rms_case(3, 1, 7, 0.1);
}

/* ------------------------------------------------------------------ */
/* Positions: row 0 one document, row 1 two packed documents, row 2 a
 * document then padding (position 0), further rows random documents.  */

static struct mg_tensor make_positions(int64_t N, int64_t T)
{
	struct mg_tensor p = mk(MG_I32, 2, N, T, 0, 0);
	for (int64_t n = 0; n < N; n++) {
		int32_t *r = I(&p) + n * T;
		const int64_t cut = T / 2 - 1 > 0 ? T / 2 - 1 : 1;
		for (int64_t t = 0; t < T; t++) {
			switch (n % 4) {
			case 0:
				r[t] = (int32_t)t;
				break;
			case 1:
				r[t] = (int32_t)(t < cut ? t : t - cut);
				break;
			case 2:
				r[t] = (int32_t)(t < cut + 1 ? t : 0);
				break;
			default:
				r[t] = t == 0 || urand() < 0.25 ? 0
								: r[t - 1] + 1;
			}
		}
	}
	return p;
}

/* rd / 2 frequencies of rd rotary dims (rd < head_dim: partial). */
static struct mg_tensor make_inv_freq_rot(int64_t rd)
{
	struct mg_tensor f = mk(MG_F32, 1, rd / 2, 0, 0, 0);
	for (int64_t j = 0; j < rd / 2; j++)
		((float *)f.data)[j] =
			(float)(1.0 /
				pow(10000.0, 2.0 * (double)j / (double)rd));
	return f;
}

static struct mg_tensor make_inv_freq(int64_t hd)
{
	return make_inv_freq_rot(hd);
}

/* ------------------------------------------------------------------ */
/* RoPE.                                                               */

struct rope_fd {
	struct mg_tensor *x, *pos, *f, *R;
	double scale;
};

static double rope_loss(void *arg)
{
	struct rope_fd *f = arg;
	struct mg_tensor y = clone(f->x);
	double l = mg_op_rope_scaled(&ctx, &y, f->pos, f->f, f->scale)
			   ? NAN
			   : dot(&y, f->R);
	del(&y);
	return l;
}

/* rd: rotary dims of a head; rd < hd is partial rotary (transformers'
 * Phi-3: rotate_half of x[..., :rd], x[..., rd:] passed as it is);
 * scale: cos and sin times it (longrope's attention factor; 1: the
 * plain op, mg_op_rope). */
static void rope_case(int64_t N, int64_t T, int64_t H, int64_t hd, int64_t rd,
		      double scale)
{
	char name[96], buf[160];
	snprintf(name, sizeof name,
		 "rope [%lld, %lld, %lld, %lld] rot %lld scale %g",
		 (long long)N, (long long)T, (long long)H, (long long)hd,
		 (long long)rd, scale);
	struct mg_tensor x = mk(MG_F64, 4, N, T, H, hd), R = clone(&x);
	struct mg_tensor pos = make_positions(N, T), f = make_inv_freq_rot(rd);
	fill_rand(&x, 1), fill_rand(&R, 1);
	struct mg_tensor y = clone(&x);
	if (scale == 1)
		CHECK_OK(mg_op_rope(&ctx, &y, &pos, &f));
	else
		CHECK_OK(mg_op_rope_scaled(&ctx, &y, &pos, &f, scale));
	double *want = malloc((size_t)N_(&x) * sizeof *want);
	const int64_t h2 = rd / 2;
	const float sc = (float)scale;
	for (int64_t r = 0; r < N * T; r++)
		for (int64_t h = 0; h < H; h++)
			for (int64_t j = 0; j < hd; j++) {
				const double *xr = D(&x) + (r * H + h) * hd;
				if (j >= rd) {
					want[(r * H + h) * hd + j] = xr[j];
					continue;
				}
				const int64_t jj = j % h2;
				const float a = (float)I(&pos)[r] *
						((float *)f.data)[jj];
				const double c = cosf(a) * sc, s = sinf(a) * sc;
				want[(r * H + h) * hd + j] =
					xr[j] * c +
					(j < h2 ? -xr[j + h2] : xr[j - h2]) * s;
			}
	snprintf(buf, sizeof buf, "%s forward", name);
	expect_close(buf, D(&y), want, N_(&y), 1e-14);
	/* backward: the adjoint, by finite differences */
	struct mg_tensor g = clone(&R);
	if (scale == 1)
		CHECK_OK(mg_op_rope_backward(&ctx, &g, &pos, &f));
	else
		CHECK_OK(mg_op_rope_scaled_backward(&ctx, &g, &pos, &f, scale));
	struct rope_fd fd = {&x, &pos, &f, &R, scale};
	snprintf(buf, sizeof buf, "%s backward", name);
	fd_check(buf, &x, D(&g), rope_loss, &fd, 0, FD_TOL);
	/* backward undoes forward (a rotation: up to the scale squared on
	 * the rotary dims) */
	if (scale == 1) {
		CHECK_OK(mg_op_rope_backward(&ctx, &y, &pos, &f));
		snprintf(buf, sizeof buf, "%s backward(forward(x)) = x", name);
		expect_close(buf, D(&y), D(&x), N_(&x), 1e-6);
	}
	free(want);
	del(&x), del(&y), del(&R), del(&pos), del(&f), del(&g);
}

static void test_rope(void)
{
	rope_case(3, 7, 2, 8, 8, 1);
	rope_case(4, 13, 3, 16, 16, 1);
	/* partial rotary: 3/4 of the head (Phi-4-mini), an odd pair
	 * count, one pair; longrope's attention factor */
	rope_case(2, 9, 3, 16, 12, 1);
	rope_case(3, 5, 2, 14, 10, 1);
	rope_case(1, 6, 1, 6, 2, 1);
	rope_case(2, 7, 3, 16, 12, 1.1902380714238083);
	rope_case(1, 5, 2, 8, 8, 0.7);
}

/* ------------------------------------------------------------------ */
/* Attention.                                                          */

struct attn_case {
	int64_t N, T, Hq, Hkv, hd;
	int64_t window; /* sliding window, 0: none */
	double cap;	/* score soft-capping (Gemma 2), 0: none */
};

/* Naive: repeated heads materialised, mask from the positions. */
static void ref_attention(const struct attn_case *c, const double *q,
			  const double *k, const double *v, const int32_t *pos,
			  double scale, double *o, double *lse)
{
	const int64_t T = c->T, hd = c->hd, G = c->Hq / c->Hkv;
	double *kr = malloc((size_t)(c->N * T * c->Hq * hd) * sizeof *kr);
	double *vr = malloc((size_t)(c->N * T * c->Hq * hd) * sizeof *vr);
	for (int64_t nt = 0; nt < c->N * T; nt++)
		for (int64_t h = 0; h < c->Hq; h++)
			for (int64_t d = 0; d < hd; d++) {
				kr[(nt * c->Hq + h) * hd + d] =
					k[(nt * c->Hkv + h / G) * hd + d];
				vr[(nt * c->Hq + h) * hd + d] =
					v[(nt * c->Hkv + h / G) * hd + d];
			}
	double *sc = malloc((size_t)T * sizeof *sc);
	for (int64_t n = 0; n < c->N; n++)
		for (int64_t h = 0; h < c->Hq; h++)
			for (int64_t t = 0; t < T; t++) {
				double m = -INFINITY;
				for (int64_t s = 0; s < T; s++) {
					const bool on =
						s <= t &&
						s >= t - pos[n * T + t] &&
						(!c->window ||
						 t - s < c->window);
					double a = 0;
					for (int64_t d = 0; d < hd; d++)
						a += q[((n * T + t) * c->Hq +
							h) * hd +
						       d] *
						     kr[((n * T + s) * c->Hq +
							 h) * hd +
							d];
					a *= scale;
					if (c->cap > 0)
						a = c->cap * tanh(a / c->cap);
					sc[s] = on ? a : -INFINITY;
					m = fmax(m, sc[s]);
				}
				double l = 0;
				for (int64_t s = 0; s < T; s++)
					l += exp(sc[s] - m);
				for (int64_t d = 0; d < hd; d++) {
					double a = 0;
					for (int64_t s = 0; s < T; s++)
						a += exp(sc[s] - m) / l *
						     vr[((n * T + s) * c->Hq +
							 h) * hd +
							d];
					o[((n * T + t) * c->Hq + h) * hd + d] =
						a;
				}
				lse[(n * c->Hq + h) * T + t] = m + log(l);
			}
	free(kr), free(vr), free(sc);
}

struct attn_fd {
	struct mg_tensor *q, *k, *v, *pos, *o, *R;
	struct mg_attn_opts a;
};

static double attn_loss(void *arg)
{
	struct attn_fd *f = arg;
	if (mg_op_attention_opts(&ctx, f->q, f->k, f->v, f->pos, &f->a, f->o,
				 NULL))
		return NAN;
	return dot(f->o, f->R);
}

static void attn_case(const struct attn_case *c)
{
	char name[96], buf[160];
	snprintf(name, sizeof name,
		 "attention N%lld T%lld Hq%lld Hkv%lld hd%lld W%lld cap%g",
		 (long long)c->N, (long long)c->T, (long long)c->Hq,
		 (long long)c->Hkv, (long long)c->hd, (long long)c->window,
		 c->cap);
	struct mg_tensor q = mk(MG_F64, 4, c->N, c->T, c->Hq, c->hd);
	struct mg_tensor k = mk(MG_F64, 4, c->N, c->T, c->Hkv, c->hd);
	struct mg_tensor v = clone(&k), o = clone(&q), R = clone(&q),
			 dq = clone(&q), dk = clone(&k), dv = clone(&k);
	struct mg_tensor lse = mk(MG_F64, 3, c->N, c->Hq, c->T, 0);
	struct mg_tensor pos = make_positions(c->N, c->T);
	const double scale = 1 / sqrt((double)c->hd);
	const struct mg_attn_opts a =
		MG_ATTN_OPTS_CAP(scale, c->window, c->cap);
	fill_rand(&q, 2), fill_rand(&k, 2), fill_rand(&v, 1), fill_rand(&R, 1);
	fill_nan(&o), fill_nan(&lse), fill_nan(&dq), fill_nan(&dk);
	fill_nan(&dv);
	CHECK_OK(mg_op_attention_opts(&ctx, &q, &k, &v, &pos, &a, &o, &lse));
	double *wo = malloc((size_t)N_(&q) * sizeof *wo);
	double *wl = malloc((size_t)N_(&lse) * sizeof *wl);
	ref_attention(c, D(&q), D(&k), D(&v), I(&pos), scale, wo, wl);
	snprintf(buf, sizeof buf, "%s forward", name);
	expect_close(buf, D(&o), wo, N_(&o), 1e-12);
	snprintf(buf, sizeof buf, "%s lse", name);
	expect_close(buf, D(&lse), wl, N_(&lse), 1e-12);
	CHECK_OK(mg_op_attention_opts_backward(&ctx, &q, &k, &v, &pos, &a, &o,
					       &lse, &R, &dq, &dk, &dv));
	struct attn_fd f = {&q, &k, &v, &pos, &o, &R, a};
	snprintf(buf, sizeof buf, "%s dq", name);
	fd_check(buf, &q, D(&dq), attn_loss, &f, 0, FD_TOL);
	snprintf(buf, sizeof buf, "%s dk", name);
	fd_check(buf, &k, D(&dk), attn_loss, &f, 0, FD_TOL);
	snprintf(buf, sizeof buf, "%s dv", name);
	fd_check(buf, &v, D(&dv), attn_loss, &f, 0, FD_TOL);
	/* the forward's o and lse again (fd_check reran it without lse) */
	CHECK_OK(mg_op_attention_opts(&ctx, &q, &k, &v, &pos, &a, &o, &lse));
	/* only dk: same values, others untouched */
	struct mg_tensor dk2 = clone(&k);
	fill_nan(&dk2);
	CHECK_OK(mg_op_attention_opts_backward(&ctx, &q, &k, &v, &pos, &a, &o,
					       &lse, &R, NULL, &dk2, NULL));
	snprintf(buf, sizeof buf, "%s dk alone", name);
	expect_close(buf, D(&dk2), D(&dk), N_(&dk), 0);
	free(wo), free(wl);
	del(&q), del(&k), del(&v), del(&o), del(&R), del(&dq), del(&dk);
	del(&dv), del(&lse), del(&pos), del(&dk2);
}

static void test_attention(void)
{
	static const struct attn_case cases[] = {
		{4, 7, 4, 2, 8, 0, 0},	 /* GQA 2:1, T odd */
		{4, 11, 4, 1, 16, 0, 0}, /* multi-query */
		{2, 5, 2, 2, 8, 0, 0},	 /* plain multi-head */
		{3, 1, 4, 2, 8, 0, 0},	 /* one token */
		/* sliding windows shorter than the documents (Mistral's),
		 * of one key, and longer than the rows (no effect) */
		{4, 11, 4, 2, 8, 3, 0},
		{4, 7, 4, 1, 8, 1, 0},
		{2, 5, 2, 2, 8, 9, 0},
		/* soft-capped scores (Gemma 2), with a window too */
		{4, 7, 4, 2, 8, 0, 0.6},
		{4, 11, 4, 1, 16, 3, 1.5},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		attn_case(&cases[i]);
}

/* ------------------------------------------------------------------ */
/* Attention over a key/value cache (decoding).                        */

static void expect_error(const char *what, int rc, const char *needle);

/* One document of L tokens: decoding its last n queries at pos = L - n
 * against a cache of max_len > L rows (rows from L on are NaN, so a read
 * past the valid rows shows) must give mg_op_attention's last n rows;
 * F32 must stay close to F64, and the result must not depend on the
 * thread count. */
static void decode_case(int64_t L, int64_t n, int64_t Hq, int64_t Hkv,
			int64_t hd, int64_t window)
{
	char name[112], buf[176];
	snprintf(name, sizeof name,
		 "attention_decode L%lld n%lld Hq%lld Hkv%lld hd%lld W%lld",
		 (long long)L, (long long)n, (long long)Hq, (long long)Hkv,
		 (long long)hd, (long long)window);
	const int64_t max_len = L + 3, pos = L - n;
	struct mg_tensor q = mk(MG_F64, 4, 1, L, Hq, hd);
	struct mg_tensor k = mk(MG_F64, 4, 1, L, Hkv, hd);
	struct mg_tensor v = clone(&k), o = clone(&q);
	struct mg_tensor pos_t = mk(MG_I32, 2, 1, L, 0, 0);
	for (int64_t t = 0; t < L; t++)
		I(&pos_t)[t] = (int32_t)t;
	const struct mg_attn_opts a =
		MG_ATTN_OPTS(1 / sqrt((double)hd), window);
	fill_rand(&q, 2), fill_rand(&k, 2), fill_rand(&v, 1);
	CHECK_OK(mg_op_attention_opts(&ctx, &q, &k, &v, &pos_t, &a, &o, NULL));
	struct mg_tensor kc = mk(MG_F64, 3, max_len, Hkv, hd, 0);
	struct mg_tensor vc = clone(&kc);
	fill_nan(&kc), fill_nan(&vc);
	memcpy(kc.data, k.data, mg_tensor_bytes(&k));
	memcpy(vc.data, v.data, mg_tensor_bytes(&v));
	struct mg_tensor qn = mk(MG_F64, 3, n, Hq, hd, 0), on = clone(&qn);
	memcpy(qn.data, D(&q) + pos * Hq * hd, mg_tensor_bytes(&qn));
	fill_nan(&on);
	CHECK_OK(
		mg_op_attention_decode_opts(&ctx, &qn, &kc, &vc, pos, &a, &on));
	snprintf(buf, sizeof buf, "%s vs attention", name);
	expect_close(buf, D(&on), D(&o) + pos * Hq * hd, N_(&on), 1e-13);
	/* F32 against F64 */
	struct mg_tensor q32 = to_f32(&qn), k32 = to_f32(&kc),
			 v32 = to_f32(&vc), o32 = to_f32(&on);
	CHECK_OK(mg_op_attention_decode_opts(&ctx, &q32, &k32, &v32, pos, &a,
					     &o32));
	snprintf(buf, sizeof buf, "%s f32", name);
	expect_close32(buf, &o32, &on, 1e-5);
	/* one thread and all: bit-identical */
	struct mg_tensor o1 = clone(&o32);
	dev.threads = 1;
	CHECK_OK(mg_op_attention_decode_opts(&ctx, &q32, &k32, &v32, pos, &a,
					     &o1));
	dev.threads = 0;
	if (memcmp(o1.data, o32.data, mg_tensor_bytes(&o1)))
		fail("%s: differs between thread counts", name);
	struct mg_tensor *all[] = {&q,	&k,  &v,   &o,	 &pos_t, &kc,  &vc,
				   &qn, &on, &q32, &k32, &v32,	 &o32, &o1};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		del(all[i]);
}

static void test_decode(void)
{
	decode_case(9, 9, 4, 2, 8, 0);	 /* prefill of a whole prompt, GQA */
	decode_case(9, 1, 4, 2, 8, 0);	 /* one token after eight */
	decode_case(12, 3, 4, 1, 16, 0); /* multi-query, a few tokens */
	decode_case(1, 1, 2, 2, 8, 0);	 /* the first token alone */
	decode_case(40, 1, 6, 3, 32, 0); /* a longer cache, GQA 2:1 */
	/* sliding windows: a prefill longer than the window, one token
	 * past it, a window of one */
	decode_case(12, 12, 4, 2, 8, 5);
	decode_case(40, 1, 6, 3, 32, 7);
	decode_case(9, 3, 4, 2, 8, 1);
	/* argument errors */
	struct mg_tensor q = mk(MG_F64, 3, 2, 4, 8, 0), o = clone(&q);
	struct mg_tensor kc = mk(MG_F64, 3, 5, 2, 8, 0);
	struct mg_tensor k3 = mk(MG_F64, 3, 5, 3, 8, 0);
	struct mg_tensor kd = mk(MG_F64, 3, 5, 2, 4, 0);
	struct mg_tensor k32 = mk(MG_F32, 3, 5, 2, 8, 0);
	expect_error("attention_decode past the cache",
		     mg_op_attention_decode(&ctx, &q, &kc, &kc, 4, 1, &o),
		     "2 new tokens at position 4 do not fit the cache of 5");
	expect_error("attention_decode negative position",
		     mg_op_attention_decode(&ctx, &q, &kc, &kc, -1, 1, &o),
		     "position -1");
	expect_error("attention_decode heads",
		     mg_op_attention_decode(&ctx, &q, &k3, &k3, 0, 1, &o),
		     "multiple of the key/value heads");
	expect_error("attention_decode head dim",
		     mg_op_attention_decode(&ctx, &q, &kd, &kd, 0, 1, &o),
		     "head dimension");
	expect_error("attention_decode dtypes",
		     mg_op_attention_decode(&ctx, &q, &k32, &k32, 0, 1, &o),
		     "k_cache is F32");
	struct mg_tensor *all[] = {&q, &o, &kc, &k3, &kd, &k32};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		del(all[i]);
}

/* ------------------------------------------------------------------ */
/* SwiGLU.                                                             */

struct swi_fd {
	struct mg_tensor *g, *u, *h, *R;
};

static double swi_loss(void *arg)
{
	struct swi_fd *f = arg;
	if (mg_op_swiglu(&ctx, f->g, f->u, f->h))
		return NAN;
	return dot(f->h, f->R);
}

static void test_swiglu(void)
{
	struct mg_tensor g = mk(MG_F64, 2, 5, 7, 0, 0), u = clone(&g),
			 h = clone(&g), R = clone(&g), dg = clone(&g),
			 du = clone(&g);
	fill_rand(&g, 4), fill_rand(&u, 1), fill_rand(&R, 1), fill_nan(&h);
	fill_nan(&dg), fill_nan(&du);
	CHECK_OK(mg_op_swiglu(&ctx, &g, &u, &h));
	double *want = malloc((size_t)N_(&g) * sizeof *want);
	for (int64_t i = 0; i < N_(&g); i++)
		want[i] = D(&g)[i] / (1 + exp(-D(&g)[i])) * D(&u)[i];
	expect_close("swiglu forward", D(&h), want, N_(&g), 1e-14);
	CHECK_OK(mg_op_swiglu_backward(&ctx, &g, &u, &R, &dg, &du));
	struct swi_fd f = {&g, &u, &h, &R};
	fd_check("swiglu dg", &g, D(&dg), swi_loss, &f, 0, FD_TOL);
	fd_check("swiglu du", &u, D(&du), swi_loss, &f, 0, FD_TOL);
	/* h aliasing g; dg aliasing dh (h again: fd_check left it at a
	 * perturbed g) */
	CHECK_OK(mg_op_swiglu(&ctx, &g, &u, &h));
	struct mg_tensor ga = clone(&g), Ra = clone(&R);
	CHECK_OK(mg_op_swiglu(&ctx, &ga, &u, &ga));
	expect_close("swiglu h aliasing g", D(&ga), D(&h), N_(&g), 0);
	CHECK_OK(mg_op_swiglu_backward(&ctx, &g, &u, &Ra, &Ra, NULL));
	expect_close("swiglu dg aliasing dh", D(&Ra), D(&dg), N_(&g), 0);
	free(want);
	del(&g), del(&u), del(&h), del(&R), del(&dg), del(&du), del(&ga);
	del(&Ra);
}

/* ------------------------------------------------------------------ */
/* Gemma's element-wise ops (ABI 1.13): GeGLU with the tanh GELU, logit */
/* soft-capping, y = a x + b.                                          */

static double gelu_tanh(double x)
{
	return 0.5 * x *
	       (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double geg_loss(void *arg)
{
	struct swi_fd *f = arg;
	if (mg_op_geglu(&ctx, f->g, f->u, f->h))
		return NAN;
	return dot(f->h, f->R);
}

static double cap_loss(void *arg)
{
	struct swi_fd *f = arg;
	if (mg_op_softcap(&ctx, f->g, 1.7, f->h))
		return NAN;
	return dot(f->h, f->R);
}

static void test_gemma(void)
{
	struct mg_tensor g = mk(MG_F64, 2, 5, 7, 0, 0), u = clone(&g),
			 h = clone(&g), R = clone(&g), dg = clone(&g),
			 du = clone(&g);
	fill_rand(&g, 4), fill_rand(&u, 1), fill_rand(&R, 1), fill_nan(&h);
	fill_nan(&dg), fill_nan(&du);
	CHECK_OK(mg_op_geglu(&ctx, &g, &u, &h));
	double *want = malloc((size_t)N_(&g) * sizeof *want);
	for (int64_t i = 0; i < N_(&g); i++)
		want[i] = gelu_tanh(D(&g)[i]) * D(&u)[i];
	expect_close("geglu forward", D(&h), want, N_(&g), 1e-14);
	CHECK_OK(mg_op_geglu_backward(&ctx, &g, &u, &R, &dg, &du));
	struct swi_fd f = {&g, &u, &h, &R};
	fd_check("geglu dg", &g, D(&dg), geg_loss, &f, 0, FD_TOL);
	fd_check("geglu du", &u, D(&du), geg_loss, &f, 0, FD_TOL);
	CHECK_OK(mg_op_softcap(&ctx, &g, 1.7, &h));
	for (int64_t i = 0; i < N_(&g); i++)
		want[i] = 1.7 * tanh(D(&g)[i] / 1.7);
	expect_close("softcap forward", D(&h), want, N_(&g), 1e-14);
	fill_nan(&dg);
	CHECK_OK(mg_op_softcap_backward(&ctx, &g, 1.7, &R, &dg));
	fd_check("softcap dx", &g, D(&dg), cap_loss, &f, 0, FD_TOL);
	CHECK_OK(mg_op_scale_shift(&ctx, &g, 3, 1, &h));
	for (int64_t i = 0; i < N_(&g); i++)
		want[i] = 3 * D(&g)[i] + 1;
	expect_close("scale_shift", D(&h), want, N_(&g), 0);
	expect_error("softcap cap 0", mg_op_softcap(&ctx, &g, 0, &h),
		     "need a finite cap > 0");
	free(want);
	del(&g), del(&u), del(&h), del(&R), del(&dg), del(&du);
}

/* ------------------------------------------------------------------ */
/* fp32 against fp64: every op, forward and backward, on one set of     */
/* inputs (rounded to f32 first so only the arithmetic differs).       */

static void round32(struct mg_tensor *t)
{
	for (int64_t i = 0; i < N_(t); i++)
		D(t)[i] = (float)D(t)[i];
}

static void test_precision(void)
{
	const double tol = 1e-4;
	const struct attn_case c = {4, 13, 4, 2, 16, 0, 0};
	struct mg_tensor q = mk(MG_F64, 4, c.N, c.T, c.Hq, c.hd);
	struct mg_tensor k = mk(MG_F64, 4, c.N, c.T, c.Hkv, c.hd);
	struct mg_tensor v = clone(&k), o = clone(&q), dout = clone(&q),
			 dq = clone(&q), dk = clone(&k), dv = clone(&k);
	struct mg_tensor lse = mk(MG_F64, 3, c.N, c.Hq, c.T, 0);
	struct mg_tensor pos = make_positions(c.N, c.T),
			 fr = make_inv_freq(c.hd);
	fill_rand(&q, 2), fill_rand(&k, 2), fill_rand(&v, 1);
	fill_rand(&dout, 1);
	round32(&q), round32(&k), round32(&v), round32(&dout);
	struct mg_tensor q32 = to_f32(&q), k32 = to_f32(&k), v32 = to_f32(&v),
			 o32 = to_f32(&o), dout32 = to_f32(&dout),
			 dq32 = to_f32(&dq), dk32 = to_f32(&dk),
			 dv32 = to_f32(&dv), lse32 = to_f32(&lse);
	const double sc = 1 / sqrt((double)c.hd);
	/* rope on q and k, then attention and its backward */
	CHECK_OK(mg_op_rope(&ctx, &q, &pos, &fr));
	CHECK_OK(mg_op_rope(&ctx, &q32, &pos, &fr));
	expect_close32("f32 vs f64 rope", &q32, &q, tol);
	CHECK_OK(mg_op_attention(&ctx, &q, &k, &v, &pos, sc, &o, &lse));
	CHECK_OK(mg_op_attention(&ctx, &q32, &k32, &v32, &pos, sc, &o32,
				 &lse32));
	expect_close32("f32 vs f64 attention o", &o32, &o, tol);
	expect_close32("f32 vs f64 attention lse", &lse32, &lse, tol);
	CHECK_OK(mg_op_attention_backward(&ctx, &q, &k, &v, &pos, sc, &o, &lse,
					  &dout, &dq, &dk, &dv));
	CHECK_OK(mg_op_attention_backward(&ctx, &q32, &k32, &v32, &pos, sc,
					  &o32, &lse32, &dout32, &dq32, &dk32,
					  &dv32));
	expect_close32("f32 vs f64 attention dq", &dq32, &dq, tol);
	expect_close32("f32 vs f64 attention dk", &dk32, &dk, tol);
	expect_close32("f32 vs f64 attention dv", &dv32, &dv, tol);
	CHECK_OK(mg_op_rope_backward(&ctx, &dq, &pos, &fr));
	CHECK_OK(mg_op_rope_backward(&ctx, &dq32, &pos, &fr));
	expect_close32("f32 vs f64 rope_backward", &dq32, &dq, tol);

	/* rmsnorm over o's rows (hd wide), with an f32 weight for both */
	struct mg_tensor w = mk(MG_F64, 1, c.hd, 0, 0, 0);
	for (int64_t i = 0; i < c.hd; i++)
		D(&w)[i] = (float)(1 + 0.5 * srand1());
	struct mg_tensor w32 = to_f32(&w), dw = mk(MG_F64, 1, c.hd, 0, 0, 0),
			 dw32 = to_f32(&dw);
	struct mg_tensor x = to_f32(&o); /* f32 copy used as both inputs */
	struct mg_tensor x64 = clone(&o);
	for (int64_t i = 0; i < N_(&o); i++)
		D(&x64)[i] = ((float *)x.data)[i];
	struct mg_tensor y = clone(&x64), y32 = to_f32(&y), dx = clone(&x64),
			 dx32 = to_f32(&dx);
	struct mg_tensor rs = mk(MG_F64, 3, c.N, c.T, c.Hq, 0),
			 rs32 = to_f32(&rs);
	CHECK_OK(mg_op_rmsnorm(&ctx, &x64, &w, 1e-6, &y, &rs));
	CHECK_OK(mg_op_rmsnorm(&ctx, &x, &w32, 1e-6, &y32, &rs32));
	expect_close32("f32 vs f64 rmsnorm", &y32, &y, tol);
	CHECK_OK(mg_op_rmsnorm_backward(&ctx, &x64, &w, &rs, &dout, &dx, &dw));
	CHECK_OK(mg_op_rmsnorm_backward(&ctx, &x, &w32, &rs32, &dout32, &dx32,
					&dw32));
	expect_close32("f32 vs f64 rmsnorm dx", &dx32, &dx, tol);
	expect_close32("f32 vs f64 rmsnorm dw", &dw32, &dw, tol);

	/* swiglu on (q, o) */
	struct mg_tensor h = clone(&q), h32 = to_f32(&h);
	CHECK_OK(mg_op_swiglu(&ctx, &x64, &y, &h));
	CHECK_OK(mg_op_swiglu(&ctx, &x, &y32, &h32));
	expect_close32("f32 vs f64 swiglu", &h32, &h, tol);
	CHECK_OK(mg_op_swiglu_backward(&ctx, &x64, &y, &dout, &dx, &h));
	CHECK_OK(mg_op_swiglu_backward(&ctx, &x, &y32, &dout32, &dx32, &h32));
	expect_close32("f32 vs f64 swiglu dg", &dx32, &dx, tol);
	expect_close32("f32 vs f64 swiglu du", &h32, &h, tol);

	/* embedding of rows of a table built from o */
	struct mg_tensor ids = mk(MG_I32, 2, 3, 9, 0, 0);
	const int64_t V = c.N * c.T * c.Hq;
	for (int64_t i = 0; i < 27; i++)
		I(&ids)[i] = (int32_t)(urand() * (double)V);
	struct mg_tensor tab = x64, tab32 = x;
	tab.ndim = tab32.ndim = 2;
	tab.shape[0] = tab32.shape[0] = V;
	tab.shape[1] = tab32.shape[1] = c.hd;
	struct mg_tensor e = mk(MG_F64, 3, 3, 9, c.hd, 0), e32 = to_f32(&e);
	CHECK_OK(mg_op_embedding(&ctx, &ids, &tab, &e));
	CHECK_OK(mg_op_embedding(&ctx, &ids, &tab32, &e32));
	expect_close32("f32 vs f64 embedding", &e32, &e, 0);
	struct mg_tensor gt = mk(MG_F64, 2, V, c.hd, 0, 0), gt32 = to_f32(&gt);
	struct mg_tensor ed = clone(&e);
	fill_rand(&ed, 1);
	round32(&ed);
	struct mg_tensor ed32 = to_f32(&ed);
	CHECK_OK(mg_op_embedding_backward(&ctx, &ids, &ed, &gt));
	CHECK_OK(mg_op_embedding_backward(&ctx, &ids, &ed32, &gt32));
	expect_close32("f32 vs f64 embedding_backward", &gt32, &gt, tol);

	struct mg_tensor *all[] = {
		&q,    &k,     &v,    &o,   &dout, &dq,	  &dk,	   &dv,	  &lse,
		&pos,  &fr,    &q32,  &k32, &v32,  &o32,  &dout32, &dq32, &dk32,
		&dv32, &lse32, &w,    &w32, &dw,   &dw32, &x,	   &x64,  &y,
		&y32,  &dx,    &dx32, &rs,  &rs32, &h,	  &h32,	   &ids,  &e,
		&e32,  &gt,    &gt32, &ed,  &ed32};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		del(all[i]);
}

/* ------------------------------------------------------------------ */
/* Argument errors.                                                    */

static void expect_error(const char *what, int rc, const char *needle)
{
	if (rc == 0)
		fail("%s: accepted", what);
	else if (!strstr(mg_last_error(), needle))
		fail("%s: error '%s' does not mention '%s'", what,
		     mg_last_error(), needle);
}

static void test_errors(void)
{
	struct mg_tensor ids = mk(MG_I32, 2, 2, 3, 0, 0);
	struct mg_tensor tab = mk(MG_F64, 2, 5, 4, 0, 0);
	struct mg_tensor y = mk(MG_F64, 3, 2, 3, 4, 0);
	struct mg_tensor ybad = mk(MG_F64, 3, 2, 3, 5, 0);
	struct mg_tensor y32 = mk(MG_F32, 3, 2, 3, 4, 0);
	expect_error("embedding wrong y",
		     mg_op_embedding(&ctx, &ids, &tab, &ybad),
		     "embedding: y has shape [2, 3, 5], expected [2, 3, 4]");
	expect_error("embedding mixed dtypes",
		     mg_op_embedding(&ctx, &ids, &tab, &y32), "y is F32");
	struct mg_tensor idf = mk(MG_F64, 2, 2, 3, 0, 0);
	expect_error("embedding float ids",
		     mg_op_embedding(&ctx, &idf, &tab, &y), "ids is F64");
	I(&ids)[4] = 5;
	expect_error("embedding id out of range",
		     mg_op_embedding(&ctx, &ids, &tab, &y), "ids[4] = 5");
	expect_error("embedding_backward id out of range",
		     mg_op_embedding_backward(&ctx, &ids, &y, &tab),
		     "embedding_backward: ids[4]");
	struct mg_tensor x = mk(MG_F64, 2, 3, 4, 0, 0),
			 w = mk(MG_F64, 1, 5, 0, 0, 0);
	struct mg_tensor x2 = clone(&x);
	expect_error("rmsnorm weight size",
		     mg_op_rmsnorm(&ctx, &x, &w, 1e-6, &x2, NULL),
		     "rmsnorm: w must be [4]");
	struct mg_tensor xh = mk(MG_BF16, 2, 3, 4, 0, 0);
	expect_error("rmsnorm bf16 on the CPU",
		     mg_op_rmsnorm(&ctx, &xh, &w, 1e-6, &xh, NULL),
		     "x is BF16");
	struct mg_tensor q = mk(MG_F64, 4, 1, 3, 3, 8);
	struct mg_tensor k = mk(MG_F64, 4, 1, 3, 2, 8);
	struct mg_tensor pos = mk(MG_I32, 2, 1, 3, 0, 0);
	struct mg_tensor o = clone(&q);
	expect_error("attention heads",
		     mg_op_attention(&ctx, &q, &k, &k, &pos, 1, &o, NULL),
		     "multiple of the key/value heads");
	struct mg_tensor pbad = mk(MG_I32, 2, 1, 4, 0, 0);
	struct mg_tensor k1 = mk(MG_F64, 4, 1, 3, 1, 8);
	expect_error("attention positions",
		     mg_op_attention(&ctx, &q, &k1, &k1, &pbad, 1, &o, NULL),
		     "positions has shape [1, 4], expected [1, 3]");
	struct mg_tensor lbad = mk(MG_F64, 3, 1, 3, 4, 0);
	expect_error("attention lse",
		     mg_op_attention(&ctx, &q, &k1, &k1, &pos, 1, &o, &lbad),
		     "lse has shape");
	const struct mg_attn_opts wneg = MG_ATTN_OPTS(1, -2);
	expect_error(
		"attention negative window",
		mg_op_attention_opts(&ctx, &q, &k1, &k1, &pos, &wneg, &o, NULL),
		"window -2");
	struct mg_attn_opts wsmall = MG_ATTN_OPTS(1, 0);
	wsmall.size = 4;
	expect_error("attention options without a size",
		     mg_op_attention_opts(&ctx, &q, &k1, &k1, &pos, &wsmall, &o,
					  NULL),
		     "MG_ATTN_OPTS");
	expect_error(
		"attention no options",
		mg_op_attention_opts(&ctx, &q, &k1, &k1, &pos, NULL, &o, NULL),
		"no options");
	struct mg_tensor f = mk(MG_F32, 1, 5, 0, 0, 0);
	expect_error("rope inv_freq", mg_op_rope(&ctx, &q, &pos, &f),
		     "holds 1 to 4 rotary pairs");
	struct mg_tensor f4 = mk(MG_F32, 1, 4, 0, 0, 0);
	expect_error("rope scale", mg_op_rope_scaled(&ctx, &q, &pos, &f4, 0),
		     "scale 0 is not a positive number");
	del(&f4);
	struct mg_tensor u = mk(MG_F64, 1, 7, 0, 0, 0);
	expect_error("swiglu sizes", mg_op_swiglu(&ctx, &x, &u, &x2),
		     "swiglu: shape mismatch");
	const enum mg_device_kind other = (enum mg_device_kind)7;
	struct mg_device odev = {.kind = other};
	struct mg_ctx c2 = ctx;
	c2.dev = &odev;
	struct mg_tensor xo = x, x2o = x2;
	xo.device = x2o.device = other;
	expect_error("swiglu on a device without an implementation",
		     mg_op_swiglu(&c2, &xo, &xo, &x2o), "no implementation");
	struct mg_tensor *all[] = {&ids,  &tab, &y,    &ybad, &y32, &idf, &x,
				   &w,	  &x2,	&xh,   &q,    &k,   &pos, &o,
				   &pbad, &k1,	&lbad, &f,    &u};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		del(all[i]);
}

/* ------------------------------------------------------------------ */
/* Bit-identical with one thread and with all (F32, sizes large enough */
/* for the parallel paths).                                            */

static void test_determinism(void)
{
	const int64_t N = 2, T = 70, Hq = 4, Hkv = 2, hd = 16, V = 50, Dm = 300;
	struct mg_tensor q = mk(MG_F32, 4, N, T, Hq, hd);
	struct mg_tensor k = mk(MG_F32, 4, N, T, Hkv, hd);
	struct mg_tensor v = mk(MG_F32, 4, N, T, Hkv, hd);
	struct mg_tensor dout = mk(MG_F32, 4, N, T, Hq, hd);
	struct mg_tensor pos = make_positions(N, T), fr = make_inv_freq(hd);
	struct mg_tensor ids = mk(MG_I32, 2, N, T, 0, 0);
	struct mg_tensor x = mk(MG_F32, 2, N * T, Dm, 0, 0),
			 dy = mk(MG_F32, 2, N * T, Dm, 0, 0),
			 w = mk(MG_F32, 1, Dm, 0, 0, 0);
	fill_rand(&q, 2), fill_rand(&k, 2), fill_rand(&v, 1);
	fill_rand(&dout, 1), fill_rand(&x, 1), fill_rand(&dy, 1);
	fill_rand(&w, 1);
	for (int64_t i = 0; i < N * T; i++)
		I(&ids)[i] = (int32_t)(urand() * 5); /* many repeats */
	enum { NO = 12 };
	struct mg_tensor out[2][NO];
	static const char *names[NO] = {"rope",		 "attention o",
					"attention lse", "attention dq",
					"attention dk",	 "attention dv",
					"rmsnorm y",	 "rmsnorm dx",
					"rmsnorm dw",	 "embedding dtable",
					"swiglu dg",	 "swiglu du"};
	for (int run = 0; run < 2; run++) {
		dev.threads = run == 0 ? 0 : 1;
		struct mg_tensor *r = out[run];
		r[0] = clone(&q);
		r[1] = mk(MG_F32, 4, N, T, Hq, hd);
		r[2] = mk(MG_F32, 3, N, Hq, T, 0);
		r[3] = clone(&r[1]), r[4] = clone(&k), r[5] = clone(&k);
		r[6] = clone(&x), r[7] = clone(&x);
		r[8] = mk(MG_F32, 1, Dm, 0, 0, 0);
		r[9] = mk(MG_F32, 2, V, Dm, 0, 0);
		r[10] = clone(&x), r[11] = clone(&x);
		struct mg_tensor rs = mk(MG_F32, 1, N * T, 0, 0, 0);
		CHECK_OK(mg_op_rope(&ctx, &r[0], &pos, &fr));
		CHECK_OK(mg_op_attention(&ctx, &r[0], &k, &v, &pos, 0.25, &r[1],
					 &r[2]));
		CHECK_OK(mg_op_attention_backward(&ctx, &r[0], &k, &v, &pos,
						  0.25, &r[1], &r[2], &dout,
						  &r[3], &r[4], &r[5]));
		CHECK_OK(mg_op_rmsnorm(&ctx, &x, &w, 1e-5, &r[6], &rs));
		CHECK_OK(mg_op_rmsnorm_backward(&ctx, &x, &w, &rs, &dy, &r[7],
						&r[8]));
		struct mg_tensor dyr = dy;
		dyr.ndim = 3;
		dyr.shape[0] = N, dyr.shape[1] = T, dyr.shape[2] = Dm;
		CHECK_OK(mg_op_embedding_backward(&ctx, &ids, &dyr, &r[9]));
		CHECK_OK(mg_op_swiglu_backward(&ctx, &x, &dy, &dy, &r[10],
					       &r[11]));
		del(&rs);
	}
	dev.threads = 0;
	for (int i = 0; i < NO; i++) {
		if (memcmp(out[0][i].data, out[1][i].data,
			   mg_tensor_bytes(&out[0][i])))
			fail("determinism: %s differs between thread counts",
			     names[i]);
		del(&out[0][i]), del(&out[1][i]);
	}
	struct mg_tensor *all[] = {&q,	&k,   &v, &dout, &pos,
				   &fr, &ids, &x, &dy,	 &w};
	for (size_t i = 0; i < sizeof all / sizeof *all; i++)
		del(all[i]);
}

int main(int argc, char **argv)
{
	fail_context = op_test_context;
	static const struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {
		{"embedding", test_embedding},
		{"rmsnorm", test_rmsnorm},
		{"rope", test_rope},
		{"attention", test_attention},
		{"decode", test_decode},
		{"swiglu", test_swiglu},
		{"gemma", test_gemma},
		{"precision", test_precision},
		{"errors", test_errors},
		{"determinism", test_determinism},
	};
	const char *env = getenv("MG_TEST_SEED");
	if (env)
		seed = strtoull(env, NULL, 0);
	int ran = 0;
	for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
		if (argc > 1 && strcmp(argv[1], tests[i].name))
			continue;
		draw = 0;
		int before = failures;
		tests[i].fn();
		printf("%s: %s\n", tests[i].name,
		       failures == before ? "ok" : "FAILED");
		ran++;
	}
	if (!ran) {
		fprintf(stderr, "unknown test '%s'\n", argv[1]);
		return 2;
	}
	return failures ? 1 : 0;
}
