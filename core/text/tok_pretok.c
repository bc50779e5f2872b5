/*
 * tok_pretok.c - pre-tokenizers: Split (a PCRE2 regex or a literal, with
 * tokenizers' delimiter behaviours), ByteLevel (add_prefix_space and its
 * GPT-2 regex; the byte -> character map itself is left to the BPE model,
 * which looks bytes up directly), Metaspace. Pieces are (offset, length)
 * into the per-call arena; s->p[0] holds the current list.
 */
#include <string.h>
#include <time.h>

#include "mg/log.h"
#include "tok_internal.h"

pcre2_code *tok_regex_compile(const char *pat, const char *what)
{
	int err;
	PCRE2_SIZE eoff;
	pcre2_code *re =
		pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
			      PCRE2_UTF | PCRE2_UCP, &err, &eoff, NULL);
	if (!re) {
		PCRE2_UCHAR msg[256];
		pcre2_get_error_message(err, msg, sizeof msg);
		mg_error("%s: regex /%s/ at offset %zu: %s", what, pat,
			 (size_t)eoff, (char *)msg);
		return NULL;
	}
	/* JIT where the platform has it; pcre2_match uses it by itself. */
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	return re;
}

/* Fold (range, is_match) entries (is_match in .first) as tokenizers'
 * SplitDelimiterBehavior does; returns the new count. */
static size_t apply_behavior(struct tok_piece *v, size_t n, enum tok_behavior b)
{
	size_t k = 0;
	int prev = 0;
	switch (b) {
	case TOK_ISOLATED:
		return n;
	case TOK_REMOVED:
		for (size_t i = 0; i < n; i++)
			if (!v[i].first)
				v[k++] = v[i];
		return k;
	case TOK_MERGED_PREV:
		for (size_t i = 0; i < n; i++) {
			int m = v[i].first;
			if (m && !prev && k)
				v[k - 1].len =
					v[i].off + v[i].len - v[k - 1].off;
			else
				v[k++] = v[i];
			prev = m;
		}
		return k;
	case TOK_MERGED_NEXT: {
		/* right to left, then the survivors are already in order
		 * when packed to the end; move them to the front */
		size_t w = n;
		for (size_t i = n; i-- > 0;) {
			int m = v[i].first;
			if (m && !prev && w < n) {
				size_t end = v[w].off + v[w].len;
				v[w].off = v[i].off;
				v[w].len = end - v[i].off;
			} else {
				v[--w] = v[i];
			}
			prev = m;
		}
		memmove(v, v + w, (n - w) * sizeof *v);
		return n - w;
	}
	case TOK_CONTIGUOUS:
		for (size_t i = 0; i < n; i++) {
			int m = v[i].first;
			if (m == prev && k)
				v[k - 1].len =
					v[i].off + v[i].len - v[k - 1].off;
			else
				v[k++] = v[i];
			prev = m;
		}
		return k;
	}
	return n;
}

/* This thread's CPU time: the budget counts work, not a busy host's waits. */
static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The regex's limits for a piece of len bytes. PCRE2's default match
 * limit (10 million steps a call) refused a run of 10 million spaces
 * under Llama 3's pattern, whose \s*[\r\n]+ backtracks over the whole
 * run at each try (HF tokenizes it): the limit grows with the piece, and
 * so does the JIT's stack. A pattern can still be quadratic within the
 * limit of every call (a lookahead that scans to the end of the piece
 * from each start), so the piece's work also has a time budget,
 * TOK_REGEX_BASE_S plus TOK_REGEX_PER_BYTE_S a byte: a hundred times
 * what real pre-tokenizer patterns take. */
#define TOK_REGEX_BASE_S 2.0
#define TOK_REGEX_PER_BYTE_S 2e-6
static int regex_limits(struct tok_scratch *s, size_t len)
{
	if (!s->md && !(s->md = pcre2_match_data_create(1, NULL)))
		return mg_error("tokenizer: out of memory");
	if (!s->mctx && !(s->mctx = pcre2_match_context_create(NULL)))
		return mg_error("tokenizer: out of memory");
	double lim = 1e7 + 64.0 * (double)len;
	pcre2_set_match_limit(s->mctx, lim > 4e9 ? 4000000000u : (uint32_t)lim);
	if (len > (1u << 16) && !s->jit) {
		s->jit = pcre2_jit_stack_create(32 << 10, 64 << 20, NULL);
		if (!s->jit)
			return mg_error("tokenizer: out of memory");
		pcre2_jit_stack_assign(s->mctx, NULL, s->jit);
	}
	return 0;
}

/* Split arena[base..base+len) by re (or the literal when re is NULL)
 * into out; t and pattern name the tokenizer and the regex in errors. */
static int split_piece(const struct mg_tokenizer *t, pcre2_code *re,
		       const char *pattern, const char *lit,
		       struct tok_scratch *s, size_t base, size_t len,
		       enum tok_behavior b, int invert, int first,
		       struct tok_pieces *out)
{
	size_t k0 = out->n, prev = 0, pos = 0;
	const char *p = s->arena + base;
	if (re && regex_limits(s, len))
		return -1;
	const double t0 = re ? cpu_s() : 0,
		     budget = TOK_REGEX_BASE_S +
			      TOK_REGEX_PER_BYTE_S * (double)len;
	unsigned calls = 0;
	size_t ll = lit ? strlen(lit) : 0;
	while (pos < len) {
		size_t ms, me;
		if (re) {
			int rc =
				pcre2_match(re, (PCRE2_SPTR)p, len, pos,
					    PCRE2_NO_UTF_CHECK, s->md, s->mctx);
			if (rc == PCRE2_ERROR_NOMATCH)
				break;
			if (rc < 0 ||
			    (++calls % 64 == 0 && cpu_s() - t0 > budget)) {
				PCRE2_UCHAR msg[256] = "more than its time "
						       "budget";
				if (rc < 0)
					pcre2_get_error_message(rc, msg,
								sizeof msg);
				return mg_error(
					"tokenizer %s: pre-tokenizer regex "
					"/%.200s/ on a piece of %zu bytes "
					"(at byte %zu): %s",
					t->path ? t->path : "", pattern, len,
					pos, (char *)msg);
			}
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
			ms = ov[0];
			me = ov[1];
		} else {
			const char *h =
				ll ? memmem(p + pos, len - pos, lit, ll) : NULL;
			if (!h)
				break;
			ms = (size_t)(h - p);
			me = ms + ll;
		}
		if (me == ms) { /* empty match: step one character */
			uint32_t cp;
			pos = me +
			      (size_t)tok_utf8_decode(p + me, len - me, &cp);
			continue;
		}
		if (ms > prev &&
		    tok_pieces_push(out, base + prev, ms - prev, invert))
			return -1;
		if (tok_pieces_push(out, base + ms, me - ms, !invert))
			return -1;
		prev = pos = me;
	}
	if (prev < len && tok_pieces_push(out, base + prev, len - prev, invert))
		return -1;
	out->n = k0 + apply_behavior(out->v + k0, out->n - k0, b);
	for (size_t i = k0; i < out->n; i++)
		out->v[i].first = first && out->v[i].off == base;
	return 0;
}

/* Prefix arena[off..off+len) with pre, as a new arena string. */
static int prefixed(struct tok_scratch *s, const char *pre, size_t off,
		    size_t len, size_t *noff)
{
	size_t pl = strlen(pre);
	if (tok_arena_reserve(s, pl + len))
		return -1;
	memcpy(s->arena + s->alen, pre, pl);
	memcpy(s->arena + s->alen + pl, s->arena + off, len);
	*noff = s->alen;
	s->alen += pl + len;
	return 0;
}

/* Metaspace: spaces -> replacement, the prepend scheme, then split before
 * every replacement character (MergedWithNext). */
static int metaspace(const struct tok_pre *m, struct tok_scratch *s,
		     const struct tok_piece *in, struct tok_pieces *out)
{
	size_t rl = strlen(m->rep), n = 0;
	const char *p;
	for (size_t i = 0; i < in->len; i++)
		n += s->arena[in->off + i] == ' ';
	if (tok_arena_reserve(s, in->len + n * rl + rl))
		return -1;
	p = s->arena + in->off;
	char *d = s->arena + s->alen;
	size_t o = 0;
	int starts = in->len &&
		     (p[0] == ' ' || (in->len >= rl && !memcmp(p, m->rep, rl)));
	if (in->len && !starts &&
	    (m->prepend_scheme == TOK_PREPEND_ALWAYS ||
	     (m->prepend_scheme == TOK_PREPEND_FIRST && in->first))) {
		memcpy(d, m->rep, rl);
		o = rl;
	}
	for (size_t i = 0; i < in->len; i++) {
		if (p[i] == ' ') {
			memcpy(d + o, m->rep, rl);
			o += rl;
		} else {
			d[o++] = p[i];
		}
	}
	size_t base = s->alen;
	s->alen += o;
	if (!m->split)
		return o ? tok_pieces_push(out, base, o, in->first) : 0;
	return split_piece(NULL, NULL, NULL, m->rep, s, base, o,
			   TOK_MERGED_NEXT, 0, in->first, out);
}

int tok_pretokenize(const struct mg_tokenizer *t, struct tok_scratch *s)
{
	for (int k = 0; k < t->npre; k++) {
		const struct tok_pre *m = &t->pre[k];
		struct tok_pieces *in = &s->p[0], *out = &s->p[1];
		out->n = 0;
		for (size_t i = 0; i < in->n; i++) {
			struct tok_piece pc = in->v[i];
			switch (m->type) {
			case TOK_P_SPLIT:
				if (split_piece(t, m->re, m->pattern,
						m->literal, s, pc.off, pc.len,
						m->behavior, m->invert,
						pc.first, out))
					return -1;
				break;
			case TOK_P_BYTELEVEL:
				if (m->add_prefix_space && pc.len &&
				    s->arena[pc.off] != ' ') {
					if (prefixed(s, " ", pc.off, pc.len,
						     &pc.off))
						return -1;
					pc.len++;
				}
				if (m->re) {
					if (split_piece(t, m->re, m->pattern,
							NULL, s, pc.off, pc.len,
							TOK_ISOLATED, 0,
							pc.first, out))
						return -1;
				} else if (tok_pieces_push(out, pc.off, pc.len,
							   pc.first)) {
					return -1;
				}
				break;
			case TOK_P_METASPACE:
				if (metaspace(m, s, &pc, out))
					return -1;
				break;
			}
		}
		struct tok_pieces tmp = s->p[0];
		s->p[0] = s->p[1];
		s->p[1] = tmp;
	}
	return 0;
}
