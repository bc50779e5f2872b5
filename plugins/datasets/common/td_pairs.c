/*
 * td_pairs.c - preference data (DPO) for the instruct dataset: records of
 * prompt / chosen / rejected as two rendered samples, their encoding with
 * the truncation rules for a pair, and rows holding one pair each.
 *
 * Why one row per pair: [prompt + chosen | prompt + rejected] packed as
 * two documents (positions restart where the rejected sequence starts,
 * so attention never crosses) is an ordinary token row to the core, so
 * the sampler, every strategy and gradient accumulation keep a pair
 * together without knowing about pairs; the model's DPO objective reads
 * the two documents back from the positions.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/mg.h"
#include "textdata.h"

/* An error about sample i, prefixed with its file and line. */
static int perr(const struct td_records *r, int64_t i, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (r->line[i])
		return mg_error("%s:%lld: sample %lld: %s", r->path,
				(long long)r->line[i], (long long)i, msg);
	return mg_error("%s: sample %lld: %s", r->path, (long long)i, msg);
}

static const char *json_kind(const cJSON *j)
{
	return cJSON_IsString(j)   ? "a string"
	       : cJSON_IsArray(j)  ? "a list"
	       : cJSON_IsNumber(j) ? "a number"
	       : cJSON_IsObject(j) ? "an object"
	       : cJSON_IsBool(j)   ? "a boolean"
				   : "null";
}

static void reset(struct td_sample *s)
{
	s->len = 0;
	s->nseg = 0;
	if (s->text)
		s->text[0] = 0;
}

/* Has message list m an assistant reply after its prompt? */
static bool has_reply(const struct td_msg *m, int64_t n)
{
	for (int64_t k = 0; k < n; k++)
		if (m[k].role == TD_ROLE_ASSISTANT && !m[k].prompt)
			return true;
	return false;
}

/* prompt messages p[0..np) then m[0..n), as one list. */
static struct td_msg *join(const struct td_msg *p, int64_t np,
			   const struct td_msg *m, int64_t n)
{
	struct td_msg *o = malloc((size_t)(np + n + 1) * sizeof *o);
	if (!o)
		return NULL;
	for (int64_t k = 0; k < np; k++) {
		o[k] = p[k];
		o[k].prompt = true;
	}
	memcpy(o + np, m, (size_t)n * sizeof *m);
	return o;
}

static int render_lists(const struct td_records *r, int64_t i,
			enum td_template tpl, const struct td_columns *c,
			const struct td_tok *tok, const cJSON *jp,
			const cJSON *jc, const cJSON *jr,
			struct td_sample *out[2])
{
	const char *name[3] = {td_column(c, "chosen"), td_column(c, "rejected"),
			       td_column(c, "prompt")};
	struct td_msg *m[2] = {NULL, NULL}, *p = NULL, *full[2] = {NULL, NULL};
	int64_t n[2] = {0, 0}, np = 0;
	int rc = td_messages(r, i, jc, name[0], TD_FMT_MESSAGES, c, true, &m[0],
			     &n[0]) ||
		 td_messages(r, i, jr, name[1], TD_FMT_MESSAGES, c, true, &m[1],
			     &n[1]);
	if (!rc && jp)
		rc = td_messages(r, i, jp, name[2], TD_FMT_MESSAGES, c, true,
				 &p, &np);
	if (!rc && !jp) {
		/* Implicit prompt: the messages both lists share. */
		int64_t k = 0;
		while (k < n[0] && k < n[1] && m[0][k].role == m[1][k].role &&
		       !strcmp(m[0][k].content, m[1][k].content))
			k++;
		for (int64_t j = 0; j < k; j++)
			m[0][j].prompt = m[1][j].prompt = true;
	}
	for (int d = 0; !rc && d < 2; d++) {
		full[d] = join(p, np, m[d], n[d]);
		if (!full[d])
			rc = mg_error("out of memory");
		else if (!has_reply(full[d], np + n[d]))
			rc = perr(r, i,
				  "\"%s\" has no assistant reply after the "
				  "prompt%s",
				  name[d],
				  jp ? ""
				     : " (the messages it shares with "
				       "the other list)");
		else
			rc = td_render_chat(tpl, tok, full[d], np + n[d],
					    out[d]);
	}
	free(m[0]), free(m[1]), free(p), free(full[0]), free(full[1]);
	return rc;
}

int td_render_pair(const struct td_records *r, int64_t i, enum td_template tpl,
		   const struct td_columns *c, const struct td_tok *tok,
		   struct td_sample *chosen, struct td_sample *rejected)
{
	const char *bos = tok ? tok->bos : NULL, *eos = tok ? tok->eos : NULL;
	reset(chosen);
	reset(rejected);
	const cJSON *o = r->rec[i];
	const char *fc = td_column(c, "chosen"), *fr = td_column(c, "rejected"),
		   *fp = td_column(c, "prompt");
	const cJSON *jc = cJSON_GetObjectItemCaseSensitive(o, fc),
		    *jr = cJSON_GetObjectItemCaseSensitive(o, fr),
		    *jp = cJSON_GetObjectItemCaseSensitive(o, fp);
	if (jp && cJSON_IsNull(jp))
		jp = NULL;
	if (!jc || cJSON_IsNull(jc) || !jr || cJSON_IsNull(jr))
		return perr(r, i, "has no field \"%s\"",
			    !jc || cJSON_IsNull(jc) ? fc : fr);
	if (cJSON_IsString(jc) && cJSON_IsString(jr)) {
		if (!jp)
			return perr(r, i,
				    "has no field \"%s\" (string \"%s\" and "
				    "\"%s\" need a string prompt)",
				    fp, fc, fr);
		if (!cJSON_IsString(jp))
			return perr(r, i,
				    "field \"%s\" is %s, not a string like "
				    "\"%s\"",
				    fp, json_kind(jp), fc);
		return td_render_single(chosen, bos, eos, jp->valuestring,
					jc->valuestring) ||
		       td_render_single(rejected, bos, eos, jp->valuestring,
					jr->valuestring);
	}
	if (cJSON_IsArray(jc) && cJSON_IsArray(jr)) {
		if (jp && !cJSON_IsArray(jp))
			return perr(r, i,
				    "field \"%s\" is %s, not a message list "
				    "like \"%s\"",
				    fp, json_kind(jp), fc);
		struct td_sample *out[2] = {chosen, rejected};
		return render_lists(r, i, tpl, c, tok, jp, jc, jr, out);
	}
	return perr(r, i,
		    "\"%s\" is %s and \"%s\" %s: both must be strings (with a "
		    "\"%s\") or both message lists",
		    fc, json_kind(jc), fr, json_kind(jr), fp);
}

/* Prompt length of a document: the tokens before its first target. */
static int64_t prompt_len(const uint8_t *tr, int64_t len)
{
	int64_t p = 0;
	while (p < len && !tr[p])
		p++;
	return p;
}

/* Append doc [a, a + len) of raw to out, its prompt of P tokens cut to
 * keep (its first token and its last keep - 1) and its response to resp
 * tokens. */
static void put(const struct td_corpus *raw, int64_t a, int64_t P, int64_t keep,
		int64_t resp, struct td_corpus *out)
{
	int64_t w = out->off[out->n];
	for (int64_t j = 0; j < P; j++) {
		if (j > 0 && j < P - (keep - 1))
			continue; /* cut from the prompt's start, after BOS */
		out->ids[w] = raw->ids[a + j];
		out->train[w++] = raw->train[a + j];
	}
	memcpy(out->ids + w, raw->ids + a + P, (size_t)resp * 4);
	memcpy(out->train + w, raw->train + a + P, (size_t)resp);
	w += resp;
	out->off[++out->n] = w;
}

/* A target at position >= 1 (position 0 has no token before it). */
static bool labeled(const uint8_t *tr, int64_t len)
{
	for (int64_t j = 1; j < len; j++)
		if (tr[j])
			return true;
	return false;
}

int td_encode_pairs(const struct td_tok *t, const struct td_sample *samples,
		    int64_t n, int64_t max_len, int64_t max_prompt, bool drop,
		    const char *progress, struct td_corpus *out)
{
	memset(out, 0, sizeof *out);
	struct td_corpus raw;
	if (td_encode_samples(t, samples, 2 * n, 0, false, false, progress,
			      &raw))
		return -1;
	int64_t *at = malloc((size_t)(2 * n + 1) * sizeof *at);
	out->off = malloc((size_t)(raw.n + 1) * sizeof *out->off);
	out->ids = malloc((size_t)(raw.off[raw.n] + 1) * 4);
	out->train = malloc((size_t)(raw.off[raw.n] + 1));
	if (!at || !out->off || !out->ids || !out->train) {
		free(at);
		td_corpus_free(&raw);
		td_corpus_free(out);
		return mg_error("out of memory");
	}
	for (int64_t k = 0; k < 2 * n; k++)
		at[k] = -1;
	for (int64_t j = 0; j < raw.n; j++)
		at[raw.src[j]] = j;
	out->off[0] = 0;
	/* A cut prompt keeps at most pmax tokens, so that at least two are
	 * left to the responses. */
	int64_t pmax = max_prompt > 0 ? max_prompt : max_len / 4;
	if (pmax > (max_len - 2) / 2)
		pmax = (max_len - 2) / 2;
	if (pmax < 1)
		pmax = 1;
	for (int64_t k = 0; k < n; k++) {
		const int64_t d[2] = {at[2 * k], at[2 * k + 1]};
		if (d[0] < 0 || d[1] < 0) {
			out->unlabeled++;
			continue;
		}
		int64_t a[2], len[2], P[2], keep[2], resp[2];
		for (int s = 0; s < 2; s++) {
			a[s] = raw.off[d[s]];
			len[s] = raw.off[d[s] + 1] - a[s];
			P[s] = prompt_len(raw.train + a[s], len[s]);
			keep[s] = P[s];
			resp[s] = len[s] - P[s];
		}
		if (len[0] + len[1] > max_len) {
			if (drop) {
				out->dropped++;
				continue;
			}
			out->truncated++;
			for (int s = 0; s < 2; s++)
				keep[s] = P[s] < pmax ? P[s] : pmax;
			int64_t budget = max_len - keep[0] - keep[1];
			if (resp[0] + resp[1] > budget) {
				/* the longer response gives way first */
				int lo = resp[0] <= resp[1] ? 0 : 1;
				if (resp[lo] > budget / 2) {
					resp[0] = budget / 2;
					resp[1] = budget - budget / 2;
				} else {
					resp[1 - lo] = budget - resp[lo];
				}
			}
		}
		int64_t n0 = out->n;
		for (int s = 0; s < 2; s++)
			put(&raw, a[s], P[s], keep[s], resp[s], out);
		bool ok = true;
		for (int64_t j = n0; j < out->n; j++)
			ok = ok && labeled(out->train + out->off[j],
					   out->off[j + 1] - out->off[j]);
		if (!ok) { /* a response cut to nothing: leave the pair out */
			out->n = n0;
			out->truncated--;
			out->unlabeled++;
		}
	}
	free(at);
	td_corpus_free(&raw);
	return 0;
}

int td_rows_pairs(const struct td_corpus *c, const int64_t *sel, int64_t nsel,
		  int64_t seq_len, struct td_rows *out)
{
	memset(out, 0, sizeof *out);
	out->seq_len = seq_len;
	int64_t ntok = 0;
	for (int64_t k = 0; k < nsel; k++) {
		int64_t len = c->off[2 * sel[k] + 2] - c->off[2 * sel[k]];
		if (len > seq_len)
			return mg_error("pair of %lld tokens is longer than "
					"the rows (%lld)",
					(long long)len, (long long)seq_len);
		ntok += len;
	}
	out->off = malloc((size_t)(nsel + 1) * sizeof *out->off);
	out->ids = malloc((size_t)(ntok + 1) * 4);
	out->labels = malloc((size_t)(ntok + 1) * 4);
	out->pos = malloc((size_t)(ntok + 1) * 4);
	if (!out->off || !out->ids || !out->labels || !out->pos) {
		td_rows_free(out);
		return mg_error("out of memory");
	}
	int64_t t = 0;
	out->off[0] = 0;
	for (int64_t k = 0; k < nsel; k++) {
		for (int64_t s = 0; s < 2; s++) {
			int64_t a = c->off[2 * sel[k] + s],
				len = c->off[2 * sel[k] + s + 1] - a;
			for (int64_t j = 0; j < len; j++) {
				out->ids[t + j] = c->ids[a + j];
				out->pos[t + j] = (int32_t)j;
				out->labels[t + j] =
					j + 1 < len && c->train[a + j + 1]
						? c->ids[a + j + 1]
						: MG_IGNORE_INDEX;
			}
			t += len;
		}
		out->off[++out->n] = t;
	}
	return 0;
}
