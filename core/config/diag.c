/*
 * diag.c - diagnostics collected while reading and validating the
 * experiment file, printed all at once in file/line order; and the
 * edit-distance "did you mean" helper.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config.h"
#include "config/util.h"

void mg_diag_add(struct mg_diag *d, const struct mg_loc *loc,
		 const char *section, const char *key, const char *fmt, ...)
{
	struct mg_diag_item *it;
	va_list ap;

	if (d->n == d->cap) {
		d->cap = d->cap ? 2 * d->cap : 16;
		d->items = mgc_realloc(d->items, d->cap * sizeof(*d->items));
	}
	it = &d->items[d->n];
	memset(it, 0, sizeof(*it));
	if (loc) {
		it->loc.file = mgc_strdup_or_null(loc->file);
		it->loc.line = loc->line;
		it->loc.set = mgc_strdup_or_null(loc->set);
	}
	it->section = mgc_strdup_or_null(section);
	it->key = mgc_strdup_or_null(key);
	va_start(ap, fmt);
	it->message = mgc_vasprintf(fmt, ap);
	va_end(ap);
	it->seq = d->n++;
}

size_t mg_diag_count(const struct mg_diag *d)
{
	return d ? d->n : 0;
}

/* The most problems printed: a file of garbage (or 100,000 unknown
 * keys) gives the first ones in file order and a count, not a flood. */
#define MG_DIAG_PRINT_MAX 50

/* 0: in a file, 1: from --set, 2: nowhere. */
static int loc_group(const struct mg_loc *l)
{
	if (l->set)
		return 1;
	return l->file ? 0 : 2;
}

static int item_cmp(const void *pa, const void *pb)
{
	const struct mg_diag_item *a = *(const struct mg_diag_item *const *)pa;
	const struct mg_diag_item *b = *(const struct mg_diag_item *const *)pb;
	int ga = loc_group(&a->loc), gb = loc_group(&b->loc);

	if (ga != gb)
		return ga < gb ? -1 : 1;
	if (ga == 0) {
		int c = strcmp(a->loc.file, b->loc.file);

		if (c)
			return c;
	}
	if (ga < 2 && a->loc.line != b->loc.line)
		return a->loc.line < b->loc.line ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static void item_print(FILE *f, const struct mg_diag_item *it)
{
	if (it->loc.set)
		fprintf(f, "--set %s: ", it->loc.set);
	else if (it->loc.file && it->loc.line > 0)
		fprintf(f, "%s:%d: ", it->loc.file, it->loc.line);
	else if (it->loc.file)
		fprintf(f, "%s: ", it->loc.file);
	if (it->section)
		fprintf(f, "[%s] ", it->section);
	if (it->key)
		fprintf(f, "%s: ", it->key);
	fprintf(f, "%s\n", it->message);
}

void mg_diag_print(FILE *f, const struct mg_diag *d)
{
	const struct mg_diag_item **order;
	size_t i;

	if (!d || !d->n)
		return;
	order = mgc_malloc(d->n * sizeof(*order));
	for (i = 0; i < d->n; i++)
		order[i] = &d->items[i];
	qsort(order, d->n, sizeof(*order), item_cmp);
	for (i = 0; i < d->n && i < MG_DIAG_PRINT_MAX; i++)
		item_print(f, order[i]);
	if (d->n > MG_DIAG_PRINT_MAX)
		fprintf(f, "... and %zu more (the first %d shown)\n",
			d->n - MG_DIAG_PRINT_MAX, MG_DIAG_PRINT_MAX);
	free(order);
}

void mg_diag_free(struct mg_diag *d)
{
	size_t i;

	if (!d)
		return;
	for (i = 0; i < d->n; i++) {
		struct mg_diag_item *it = &d->items[i];

		free((char *)it->loc.file);
		free((char *)it->loc.set);
		free(it->section);
		free(it->key);
		free(it->message);
	}
	free(d->items);
	d->items = NULL;
	d->n = d->cap = 0;
}

/* Optimal string alignment distance (Levenshtein plus adjacent
 * transpositions), case-insensitive. */
static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j, r;
	size_t *d;

	if (la > 64 || lb > 64)
		return SIZE_MAX; /* not a typo of a key name */
	d = mgc_malloc((la + 1) * (lb + 1) * sizeof(*d));
#define D(i, j) d[(i) * (lb + 1) + (j)]
	for (i = 0; i <= la; i++)
		D(i, 0) = i;
	for (j = 0; j <= lb; j++)
		D(0, j) = j;
	for (i = 1; i <= la; i++) {
		for (j = 1; j <= lb; j++) {
			int ca = tolower((unsigned char)a[i - 1]);
			int cb = tolower((unsigned char)b[j - 1]);
			size_t best = D(i - 1, j - 1) + (ca != cb);

			if (D(i - 1, j) + 1 < best)
				best = D(i - 1, j) + 1;
			if (D(i, j - 1) + 1 < best)
				best = D(i, j - 1) + 1;
			if (i > 1 && j > 1 &&
			    ca == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == cb &&
			    D(i - 2, j - 2) + 1 < best)
				best = D(i - 2, j - 2) + 1;
			D(i, j) = best;
		}
	}
	r = D(la, lb);
#undef D
	free(d);
	return r;
}

/* One is a prefix of the other and the shorter has 4+ characters:
 * "batch" for "batch_size". */
static bool prefix_of(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t m = la < lb ? la : lb;

	return m >= 4 && strncasecmp(a, b, m) == 0;
}

const char *mg_suggest(const char *word, const char *const *candidates,
		       size_t n)
{
	const char *best = NULL;
	size_t best_d = SIZE_MAX, i;

	if (!word || !*word)
		return NULL;
	for (i = 0; i < n; i++) {
		const char *c = candidates[i];
		size_t dist, limit;

		if (!c || strcmp(c, word) == 0)
			continue;
		dist = edit_distance(word, c);
		limit = strlen(c) / 3;
		if (limit < 1)
			limit = 1;
		if (limit > 3)
			limit = 3;
		if (dist > limit) {
			if (!prefix_of(word, c))
				continue;
			dist = limit + 1; /* weaker than any typo match */
		}
		if (dist < best_d) {
			best_d = dist;
			best = c;
		}
	}
	return best;
}
