/*
 * td_corpus.c - rendered samples to ids on all cores, the token cache,
 * and rows for read_tokens.
 *
 * Tokenizing is the only slow step of a text dataset, so it happens once
 * at load (OpenMP over samples; the tokenizer is thread-safe) and its
 * result is cached under ctx->cache_dir keyed by everything that changes
 * the ids; read_tokens then only copies.
 */
#include <errno.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mg/mg.h"
#include "textdata.h"

void td_corpus_free(struct td_corpus *c)
{
	free(c->off);
	free(c->ids);
	free(c->train);
	free(c->src);
	memset(c, 0, sizeof *c);
}

/* One sample's ids and target flags (flags in *tr, grown with ids). */
static int encode_one(const struct td_tok *t, const struct td_sample *s,
		      struct mg_ids *ids, uint8_t **tr, int64_t *trcap)
{
	ids->n = 0;
	for (int k = 0; k < s->nseg; k++) {
		const struct td_seg *g = &s->seg[k];
		int64_t n0 = ids->n;
		const char *p = s->text + g->off;
		size_t len = g->len;
		if (g->kind == TD_SEG_CONTROL) {
			char name[256];
			snprintf(name, sizeof name, "%.*s", (int)len, p);
			int32_t id = t->token_id(t->self, name);
			if (id < 0)
				return mg_error("the template's token \"%s\" "
						"is not in the tokenizer's "
						"vocabulary (choose another "
						"template =)",
						name);
			if (ids->n == ids->cap) {
				int64_t nc = ids->cap ? ids->cap * 2 : 256;
				int32_t *v = realloc(ids->v, (size_t)nc * 4);
				if (!v)
					return mg_error("out of memory");
				ids->v = v;
				ids->cap = nc;
			}
			ids->v[ids->n++] = id;
		} else if (g->kind == TD_SEG_RENDERED) {
			/* a chat template's text, special tokens matched */
			if (!t->encode_rendered)
				return mg_error(
					"a rendered chat template needs "
					"the tokenizer's own encoder");
			/* a cut piece's leading space as below */
			if (t->prepend_space && k > 0 && len && p[0] == ' ')
				p++, len--;
			if (len && t->encode_rendered(t->self, p, len, ids))
				return -1;
		} else {
			/* A SentencePiece-style tokenizer starts every
			 * encode with a word boundary ("▁"): a piece that
			 * continues text after a space ("[/INST] answer")
			 * gets that boundary from the tokenizer, not twice. */
			if (t->prepend_space && k > 0 && len && p[0] == ' ')
				p++, len--;
			if (len && t->encode(t->self, p, len, ids))
				return -1;
		}
		if (ids->n > *trcap) {
			int64_t nc = ids->cap > ids->n ? ids->cap : ids->n;
			uint8_t *q = realloc(*tr, (size_t)nc);
			if (!q)
				return mg_error("out of memory");
			*tr = q;
			*trcap = nc;
		}
		memset(*tr + n0, g->train, (size_t)(ids->n - n0));
	}
	return 0;
}

enum { ST_OK = 0, ST_DROPPED, ST_UNLABELED, ST_ERROR };

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int td_encode_samples(const struct td_tok *t, const struct td_sample *samples,
		      int64_t n, int64_t max_len, bool drop, bool train_all,
		      const char *progress, struct td_corpus *out)
{
	memset(out, 0, sizeof *out);
	int32_t **rid = calloc((size_t)n, sizeof *rid);
	uint8_t **rtr = calloc((size_t)n, sizeof *rtr);
	int64_t *rn = calloc((size_t)n, sizeof *rn);
	uint8_t *st = calloc((size_t)n, 1), *cut = calloc((size_t)n, 1);
	if (!rid || !rtr || !rn || !st || !cut) {
		free(rid), free(rtr), free(rn), free(st), free(cut);
		return mg_error("out of memory");
	}
	size_t bytes = 0;
	for (int64_t i = 0; i < n; i++)
		bytes += samples[i].len;
	bool show = progress && bytes > (1u << 20);
	atomic_llong done = 0;
	int64_t first_err = -1;
	char errmsg[1024] = "";
	double t0 = now(), last = t0;

#pragma omp parallel
	{
		struct mg_ids ids = {0};
		uint8_t *tr = NULL;
		int64_t trcap = 0;
#pragma omp for schedule(dynamic, 16)
		for (int64_t i = 0; i < n; i++) {
			if (encode_one(t, &samples[i], &ids, &tr, &trcap)) {
#pragma omp critical(td_err)
				if (first_err < 0 || i < first_err) {
					first_err = i;
					snprintf(errmsg, sizeof errmsg, "%s",
						 mg_last_error());
				}
				st[i] = ST_ERROR;
				continue;
			}
			int64_t len = ids.n;
			if (max_len > 0 && len > max_len) {
				if (drop) {
					st[i] = ST_DROPPED;
					goto next;
				}
				len = max_len;
				cut[i] = 1;
			}
			if (train_all)
				memset(tr, 1, (size_t)len);
			bool any = false;
			for (int64_t k = 1; k < len && !any; k++)
				any = tr[k];
			if (!any) {
				st[i] = ST_UNLABELED;
				goto next;
			}
			rid[i] = malloc((size_t)len * 4);
			rtr[i] = malloc((size_t)len);
			if (rid[i] && rtr[i]) {
				memcpy(rid[i], ids.v, (size_t)len * 4);
				memcpy(rtr[i], tr, (size_t)len);
				rn[i] = len;
			} else {
				st[i] = ST_ERROR;
#pragma omp critical(td_err)
				if (first_err < 0 || i < first_err) {
					first_err = i;
					snprintf(errmsg, sizeof errmsg,
						 "out of memory");
				}
			}
		next:;
			long long d = atomic_fetch_add(&done, 1) + 1;
			if (show && omp_get_thread_num() == 0 &&
			    now() - last > 0.5) {
				last = now();
				fprintf(stderr,
					"\r%s: tokenizing %lld/%lld samples "
					"(%.0f%%, %d threads)",
					progress, d, (long long)n,
					100.0 * (double)d / (double)n,
					omp_get_num_threads());
				fflush(stderr);
			}
		}
		free(ids.v);
		free(tr);
	}
	if (show)
		fprintf(stderr,
			"\r%s: tokenized %lld samples, %.1f MB in %.1f s\n",
			progress, (long long)n, bytes / 1e6, now() - t0);

	int rc = 0;
	if (first_err >= 0)
		rc = mg_error("sample %lld: %s", (long long)first_err, errmsg);
	int64_t ntok = 0, kept = 0;
	for (int64_t i = 0; !rc && i < n; i++) {
		ntok += rn[i];
		kept += st[i] == ST_OK;
	}
	if (!rc) {
		out->off = malloc((size_t)(kept + 1) * sizeof *out->off);
		out->ids = malloc((size_t)(ntok ? ntok : 1) * 4);
		out->train = malloc((size_t)(ntok ? ntok : 1));
		out->src = malloc((size_t)(kept ? kept : 1) * sizeof *out->src);
		if (!out->off || !out->ids || !out->train || !out->src)
			rc = mg_error("out of memory");
	}
	if (!rc) {
		out->off[0] = 0;
		for (int64_t i = 0; i < n; i++) {
			out->truncated += cut[i] && st[i] == ST_OK;
			out->dropped += st[i] == ST_DROPPED;
			out->unlabeled += st[i] == ST_UNLABELED;
			if (st[i] != ST_OK)
				continue;
			int64_t a = out->off[out->n];
			memcpy(out->ids + a, rid[i], (size_t)rn[i] * 4);
			memcpy(out->train + a, rtr[i], (size_t)rn[i]);
			out->src[out->n] = i;
			out->off[++out->n] = a + rn[i];
		}
	}
	for (int64_t i = 0; i < n; i++) {
		free(rid[i]);
		free(rtr[i]);
	}
	free(rid), free(rtr), free(rn), free(st), free(cut);
	if (rc)
		td_corpus_free(out);
	return rc;
}

/* ---- hashing: two 64-bit FNV-1a style lanes with different bases ---- */

void td_hash_init(struct td_hash *h)
{
	h->a = 0xcbf29ce484222325ull;
	h->b = 0x84222325cbf29ce4ull ^ 0x9e3779b97f4a7c15ull;
}

void td_hash_add(struct td_hash *h, const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t a = h->a, b = h->b;
	for (size_t i = 0; i < n; i++) {
		a = (a ^ s[i]) * 0x100000001b3ull;
		b = (b ^ s[i] ^ (b >> 29)) * 0xff51afd7ed558ccdull;
	}
	h->a = a;
	h->b = b;
}

void td_hash_str(struct td_hash *h, const char *s)
{
	uint64_t n = s ? strlen(s) : ~0ull;
	td_hash_add(h, &n, sizeof n);
	if (s)
		td_hash_add(h, s, (size_t)n);
}

void td_hash_hex(const struct td_hash *h, char out[33])
{
	snprintf(out, 33, "%016llx%016llx", (unsigned long long)mg_fmix64(h->a),
		 (unsigned long long)mg_fmix64(h->b ^ h->a));
}

/* ---- cache file ------------------------------------------------------ */

static const char MAGIC[8] = "MGTOKC1\n";

struct cache_head {
	char magic[8];
	uint64_t n, ntok, truncated, dropped, unlabeled;
};

static void payload_hash(const struct td_corpus *c, char out[33])
{
	struct td_hash h;
	td_hash_init(&h);
	td_hash_add(&h, c->off, (size_t)(c->n + 1) * sizeof *c->off);
	td_hash_add(&h, c->ids, (size_t)c->off[c->n] * 4);
	td_hash_add(&h, c->train, (size_t)c->off[c->n]);
	td_hash_hex(&h, out);
}

int td_cache_load(const char *cache_dir, const char *key, struct td_corpus *c)
{
	char path[4096];
	memset(c, 0, sizeof *c);
	snprintf(path, sizeof path, "%s/tokens/%s.bin", cache_dir, key);
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	struct stat st;
	struct cache_head h;
	char sum[33], want[33];
	const char *why = NULL;
	if (fstat(fileno(f), &st) || fread(&h, sizeof h, 1, f) != 1 ||
	    memcmp(h.magic, MAGIC, 8))
		why = "not a token cache";
	else if (h.n > (1ull << 40) || h.ntok > (1ull << 40) ||
		 (uint64_t)st.st_size !=
			 sizeof h + (h.n + 1) * 8 + h.ntok * 5 + 32)
		why = "wrong size (cut short?)";
	if (!why) {
		c->n = (int64_t)h.n;
		c->off = malloc((h.n + 1) * 8);
		c->ids = malloc(h.ntok * 4 + 4);
		c->train = malloc(h.ntok + 1);
		if (!c->off || !c->ids || !c->train) {
			fclose(f);
			td_corpus_free(c);
			return mg_error("out of memory");
		}
		if (fread(c->off, 8, h.n + 1, f) != h.n + 1 ||
		    fread(c->ids, 4, h.ntok, f) != h.ntok ||
		    fread(c->train, 1, h.ntok, f) != h.ntok ||
		    fread(sum, 1, 32, f) != 32)
			why = "read error";
	}
	if (!why) {
		sum[32] = 0;
		bool ok = c->off[0] == 0 && (uint64_t)c->off[c->n] == h.ntok;
		for (int64_t i = 0; ok && i < c->n; i++)
			ok = c->off[i] <= c->off[i + 1];
		if (ok)
			payload_hash(c, want);
		if (!ok || strcmp(sum, want))
			why = "checksum mismatch";
	}
	fclose(f);
	if (why) {
		mg_warn("token cache %s: %s; rebuilding it", path, why);
		td_corpus_free(c);
		return 0;
	}
	c->truncated = (int64_t)h.truncated;
	c->dropped = (int64_t)h.dropped;
	c->unlabeled = (int64_t)h.unlabeled;
	return 1;
}

int td_cache_store(const char *cache_dir, const char *key,
		   const struct td_corpus *c)
{
	char dir[4096], path[4200], tmp[4300];
	snprintf(dir, sizeof dir, "%s/tokens", cache_dir);
	if (mg_mkdir_p(dir))
		return -1;
	snprintf(path, sizeof path, "%s/%s.bin", dir, key);
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "wb");
	if (!f)
		return mg_error("%s: %s", tmp, strerror(errno));
	struct cache_head h = {.n = (uint64_t)c->n,
			       .ntok = (uint64_t)c->off[c->n],
			       .truncated = (uint64_t)c->truncated,
			       .dropped = (uint64_t)c->dropped,
			       .unlabeled = (uint64_t)c->unlabeled};
	memcpy(h.magic, MAGIC, 8);
	char sum[33];
	payload_hash(c, sum);
	bool ok = fwrite(&h, sizeof h, 1, f) == 1 &&
		  fwrite(c->off, 8, (size_t)c->n + 1, f) == (size_t)c->n + 1 &&
		  fwrite(c->ids, 4, h.ntok, f) == h.ntok &&
		  fwrite(c->train, 1, h.ntok, f) == h.ntok &&
		  fwrite(sum, 1, 32, f) == 32;
	ok = (fclose(f) == 0) && ok;
	if (!ok || rename(tmp, path)) {
		int e = errno;
		unlink(tmp);
		return mg_error("%s: cannot write (%s)", path, strerror(e));
	}
	return 0;
}

/* ---- rows --------------------------------------------------------------- */

void td_rows_free(struct td_rows *r)
{
	free(r->off);
	free(r->ids);
	free(r->labels);
	free(r->pos);
	memset(r, 0, sizeof *r);
}

static int rows_alloc(struct td_rows *r, int64_t maxrows, int64_t ntok)
{
	r->off = malloc((size_t)(maxrows + 1) * sizeof *r->off);
	r->ids = malloc((size_t)(ntok + 1) * 4);
	r->labels = malloc((size_t)(ntok + 1) * 4);
	r->pos = malloc((size_t)(ntok + 1) * 4);
	if (!r->off || !r->ids || !r->labels || !r->pos) {
		td_rows_free(r);
		return mg_error("out of memory");
	}
	r->off[0] = 0;
	return 0;
}

int td_rows_samples(const struct td_corpus *c, const int64_t *sel, int64_t nsel,
		    int64_t seq_len, bool packed, struct td_rows *out)
{
	memset(out, 0, sizeof *out);
	out->seq_len = seq_len;
	int64_t ntok = 0;
	for (int64_t k = 0; k < nsel; k++) {
		int64_t len = c->off[sel[k] + 1] - c->off[sel[k]];
		if (len > seq_len)
			return mg_error("sample of %lld tokens is longer than "
					"the rows (%lld)",
					(long long)len, (long long)seq_len);
		ntok += len;
	}
	if (rows_alloc(out, nsel, ntok))
		return -1;
	int64_t t = 0, rowstart = 0;
	for (int64_t k = 0; k < nsel; k++) {
		int64_t a = c->off[sel[k]], len = c->off[sel[k] + 1] - a;
		/* A new row unless packing and the sample still fits. */
		if (k > 0 && (!packed || t - rowstart + len > seq_len)) {
			out->off[++out->n] = t;
			rowstart = t;
		}
		for (int64_t j = 0; j < len; j++) {
			out->ids[t + j] = c->ids[a + j];
			out->pos[t + j] = (int32_t)j;
			out->labels[t + j] = j + 1 < len && c->train[a + j + 1]
						     ? c->ids[a + j + 1]
						     : MG_IGNORE_INDEX;
		}
		t += len;
	}
	if (nsel > 0)
		out->off[++out->n] = t;
	return 0;
}

int td_rows_blocks(const struct td_corpus *c, const int64_t *sel, int64_t nsel,
		   int64_t seq_len, int32_t bos, int32_t eos,
		   struct td_rows *out)
{
	memset(out, 0, sizeof *out);
	out->seq_len = seq_len;
	int64_t ntok = 0;
	for (int64_t k = 0; k < nsel; k++)
		ntok += c->off[sel[k] + 1] - c->off[sel[k]] + (bos >= 0) +
			(eos >= 0);
	int32_t *stream = malloc((size_t)(ntok + 1) * 4);
	if (!stream)
		return mg_error("out of memory");
	int64_t t = 0;
	for (int64_t k = 0; k < nsel; k++) {
		int64_t a = c->off[sel[k]], len = c->off[sel[k] + 1] - a;
		if (bos >= 0)
			stream[t++] = bos;
		memcpy(stream + t, c->ids + a, (size_t)len * 4);
		t += len;
		if (eos >= 0)
			stream[t++] = eos;
	}
	int64_t nrows = (ntok + seq_len - 1) / seq_len;
	if (rows_alloc(out, nrows, ntok)) {
		free(stream);
		return -1;
	}
	int64_t w = 0;
	for (int64_t s = 0; s < ntok; s += seq_len) {
		int64_t len = ntok - s < seq_len ? ntok - s : seq_len;
		if (len < 2)
			break; /* a lone token has no target */
		for (int64_t j = 0; j < len; j++) {
			out->ids[w + j] = stream[s + j];
			out->pos[w + j] = (int32_t)j;
			out->labels[w + j] = j + 1 < len ? stream[s + j + 1]
							 : MG_IGNORE_INDEX;
		}
		w += len;
		out->off[++out->n] = w;
	}
	free(stream);
	return 0;
}

int td_rows_read(const struct td_rows *r, const int64_t *idx, int64_t n,
		 const struct mg_token_rows *out)
{
	for (int64_t i = 0; i < n; i++) {
		if (idx[i] < 0 || idx[i] >= r->n)
			return mg_error("row %lld of %lld", (long long)idx[i],
					(long long)r->n);
		int64_t a = r->off[idx[i]], len = r->off[idx[i] + 1] - a;
		int32_t *x = out->ids + i * out->stride,
			*y = out->labels + i * out->stride,
			*p = out->positions + i * out->stride;
		memcpy(x, r->ids + a, (size_t)len * 4);
		memcpy(y, r->labels + a, (size_t)len * 4);
		memcpy(p, r->pos + a, (size_t)len * 4);
		for (int64_t t = len; t < r->seq_len; t++) {
			x[t] = 0;
			y[t] = MG_IGNORE_INDEX;
			p[t] = 0;
		}
		out->lens[i] = (int32_t)len;
	}
	return 0;
}

void td_split(int64_t n, double fraction, uint64_t seed, uint8_t *is_val)
{
	int64_t nval = 0, lo = -1, hi = -1;
	uint64_t ulo = UINT64_MAX, uhi = 0;
	for (int64_t i = 0; i < n; i++) {
		uint64_t u = mg_rng_u64(seed * 0x632be59bd9b4e019ull ^
						mg_rng_u64((uint64_t)i, 0),
					0);
		is_val[i] = fraction > 0 && (double)u < fraction * 0x1p64;
		nval += is_val[i];
		if (u <= ulo)
			ulo = u, lo = i;
		if (u >= uhi)
			uhi = u, hi = i;
	}
	if (fraction > 0 && n >= 2 && nval == 0)
		is_val[lo] = 1;
	if (fraction > 0 && n >= 2 && nval == n)
		is_val[hi] = 0;
}
