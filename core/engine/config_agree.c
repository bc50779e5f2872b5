/*
 * config_agree.c - ranks started with different configurations (another
 * batch size, model width or plugin build on one node) would otherwise
 * hang in a collective of another size or abort in MPI with
 * MPI_ERR_TRUNCATE and no word about why. Before any other collective,
 * every rank hashes its effective configuration (the text --print-config
 * shows, without the comments that say where a value came from) and its
 * plugins' names, versions and file contents; the hashes are exchanged,
 * and on a mismatch rank 0's text and the first differing rank's are
 * too, so that every rank fails with the same message naming the ranks
 * and keys that differ.
 *
 * Keys only rank 0 uses, or that may differ per node without changing
 * what is computed, are left out: run.out_dir, run.name (rank 0 writes
 * the run directory), run.threads, run.log_every, run.gpus.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mg/log.h>

#include "engine/config_agree.h"

static const char *const skipped_keys[] = {
	"run.out_dir", "run.name", "run.threads", "run.log_every", "run.gpus"};

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* A plugin file's contents hashed (0 if unreadable: then equal builds
 * on every rank still agree, and a difference still shows). */
static uint64_t file_hash(const char *path)
{
	uint64_t h = 1469598103934665603ull;
	char buf[65536];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return 0;
	while ((n = read(fd, buf, sizeof buf)) > 0)
		h = fnv1a(h, buf, (size_t)n);
	close(fd);
	return h;
}

/* Strip the " ; default" / " ; --set" comment and the padding of one
 * "key = value" line of mg_opts_print(), in place. */
static void strip_line(char *l)
{
	size_t n = strlen(l);
	static const char *const tails[] = {"; default", "; --set"};
	for (int i = 0; i < 2; i++) {
		size_t t = strlen(tails[i]);
		if (n >= t && !strcmp(l + n - t, tails[i])) {
			n -= t;
			break;
		}
	}
	while (n && l[n - 1] == ' ')
		n--;
	l[n] = 0;
}

/* The configuration as "section.key = value" lines, sorted as printed
 * (malloc'd). */
static char *config_text(const struct mg_session *s)
{
	char *raw = NULL, *out = NULL;
	size_t rlen = 0, olen = 0;
	FILE *f = open_memstream(&raw, &rlen);
	if (!f)
		return NULL;
	mg_opts_print(f, s->run);
	mg_opts_print(f, s->optim);
	mg_opts_print(f, s->profile);
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++)
		mg_opts_print(f, s->opts[i]);
	fclose(f);
	FILE *o = open_memstream(&out, &olen);
	if (!o) {
		free(raw);
		return NULL;
	}
	fprintf(o, "mgrun.version = %s\n", MG_VERSION);
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++) {
		const struct mg_loaded_plugin *p = &s->plugin[i];
		if (p->desc)
			fprintf(o, "%s.plugin = %s %s, build %016llx\n",
				mg_section_names[i], p->desc->name,
				p->desc->version ? p->desc->version : "?",
				(unsigned long long)file_hash(p->path));
	}
	char section[64] = "", *save = NULL;
	for (char *l = strtok_r(raw, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		size_t n = strlen(l);
		if (l[0] == '[' && n > 2 && l[n - 1] == ']') {
			snprintf(section, sizeof section, "%.*s", (int)(n - 2),
				 l + 1);
			continue;
		}
		char *eq = strstr(l, " = ");
		if (!eq)
			continue;
		strip_line(l);
		size_t kl = (size_t)(eq - l);
		while (kl && l[kl - 1] == ' ')
			kl--;
		char key[160];
		snprintf(key, sizeof key, "%s.%.*s", section, (int)kl, l);
		bool skip = false;
		for (size_t k = 0;
		     k < sizeof skipped_keys / sizeof *skipped_keys; k++)
			skip |= !strcmp(key, skipped_keys[k]);
		if (!skip)
			fprintf(o, "%s = %s\n", key, eq + 3);
	}
	fclose(o);
	free(raw);
	return out;
}

/* Rank `from`'s text to every rank (collective; a byte a double, only
 * on a mismatch). NULL on failure. */
static char *share_text(struct mg_comm *comm, int rank, int from,
			const char *mine)
{
	double len = rank == from ? (double)strlen(mine) : 0;
	if (comm->all_reduce_host(comm, &len, 1, MG_F64, MG_REDUCE_SUM))
		return NULL;
	size_t n = (size_t)len;
	double *v = calloc(n + 1, sizeof *v);
	char *text = malloc(n + 1);
	if (!v || !text) {
		free(v);
		free(text);
		return NULL;
	}
	for (size_t i = 0; rank == from && i < n; i++)
		v[i] = (unsigned char)mine[i];
	if (comm->all_reduce_host(comm, v, (int64_t)n, MG_F64, MG_REDUCE_SUM)) {
		free(v);
		free(text);
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		text[i] = (char)v[i];
	text[n] = 0;
	free(v);
	return text;
}

/* The value of `key` ("section.key") in text, or NULL. Writes its
 * length to *vn. */
static const char *value_of(const char *text, const char *key, size_t kn,
			    size_t *vn)
{
	for (const char *l = text; *l;) {
		const char *nl = strchr(l, '\n');
		size_t ln = nl ? (size_t)(nl - l) : strlen(l);
		if (ln > kn + 3 && !strncmp(l, key, kn) &&
		    !strncmp(l + kn, " = ", 3)) {
			*vn = ln - kn - 3;
			return l + kn + 3;
		}
		l += ln + (nl ? 1 : 0);
	}
	return NULL;
}

/* Up to `most` keys whose values differ between a (rank 0's) and b,
 * as "key = B (rank 0: A)" into out. */
static void diff_keys(const char *a, const char *b, int rb, char *out,
		      size_t cap, int most)
{
	size_t used = 0;
	int found = 0;
	out[0] = 0;
	/* keys of b (missing or other in a), then keys only a has */
	for (int pass = 0; pass < 2; pass++) {
		const char *x = pass ? a : b, *y = pass ? b : a;
		for (const char *l = x; *l && found < most;) {
			const char *nl = strchr(l, '\n');
			size_t ln = nl ? (size_t)(nl - l) : strlen(l);
			const char *eq = memchr(l, '=', ln);
			if (eq && eq > l + 1) {
				size_t kn = (size_t)(eq - 1 - l), xn = 0,
				       yn = 0;
				const char *xv = value_of(x, l, kn, &xn);
				const char *yv = value_of(y, l, kn, &yn);
				bool differ =
					!yv || (!pass && (xn != yn ||
							  memcmp(xv, yv, xn)));
				if (differ && used < cap) {
					int w;
					if (!pass)
						w = snprintf(
							out + used, cap - used,
							"%s%.*s = %.*s (rank "
							"0: "
							"%.*s)",
							found ? "; " : "",
							(int)kn, l, (int)xn, xv,
							yv ? (int)yn : 7,
							yv ? yv : "not set");
					else
						w = snprintf(out + used,
							     cap - used,
							     "%s%.*s = %.*s on "
							     "rank 0, not set "
							     "on rank %d",
							     found ? "; " : "",
							     (int)kn, l,
							     (int)xn, xv, rb);
					used += w > 0 ? (size_t)w : 0;
					found++;
				}
			}
			l += ln + (nl ? 1 : 0);
		}
	}
}

int mg_config_agree(const struct mg_session *s, struct mg_comm *comm, int rank,
		    int world)
{
	if (world <= 1)
		return 0;
	char *mine = config_text(s);
	if (!mine)
		return mg_error("out of memory");
	uint64_t h = fnv1a(1469598103934665603ull, mine, strlen(mine));
	/* every rank's hash, as two exact 32-bit halves */
	double *hs = calloc((size_t)world * 2, sizeof *hs);
	if (!hs) {
		free(mine);
		return mg_error("out of memory");
	}
	hs[2 * rank] = (double)(h >> 32);
	hs[2 * rank + 1] = (double)(h & 0xffffffffu);
	int rc = 0;
	if (comm->all_reduce_host(comm, hs, 2 * (int64_t)world, MG_F64,
				  MG_REDUCE_SUM)) {
		rc = mg_error_prefix("exchanging configuration hashes");
		goto out;
	}
	char ranks[256] = "";
	size_t used = 0;
	int first = -1, ndiff = 0;
	for (int r = 1; r < world; r++) {
		if (hs[2 * r] == hs[0] && hs[2 * r + 1] == hs[1])
			continue;
		if (first < 0)
			first = r;
		if (used < sizeof ranks - 16) {
			int w = snprintf(ranks + used, sizeof ranks - used,
					 "%s%d", ndiff ? ", " : "", r);
			used += w > 0 ? (size_t)w : 0;
		} else if (used < sizeof ranks - 4) {
			used += (size_t)snprintf(ranks + used,
						 sizeof ranks - used, ", ...");
		}
		ndiff++;
	}
	if (first < 0)
		goto out;
	/* Every rank takes part, so all name the same keys. */
	char *a = share_text(comm, rank, 0, mine);
	char *b = a ? share_text(comm, rank, first, mine) : NULL;
	char keys[1024];
	if (a && b)
		diff_keys(a, b, first, keys, sizeof keys, 4);
	else
		snprintf(keys, sizeof keys, "(could not exchange them: %s)",
			 mg_last_error());
	rc = mg_error("rank%s %s of %d %s started with another configuration "
		      "than rank 0 (every rank must run the same): on rank "
		      "%d: %s",
		      ndiff > 1 ? "s" : "", ranks, world,
		      ndiff > 1 ? "were" : "was", first,
		      keys[0] ? keys
			      : "(the same keys; the plugin builds or "
				"mgrun version differ)");
	free(a);
	free(b);
out:
	if (!rc) {
		/* not the run's traffic: kept out of the first step's
		 * communication statistics */
		struct mg_comm_stats drop;
		if (comm->collect(comm, &drop))
			rc = mg_error_prefix("communication statistics");
	}
	free(hs);
	free(mine);
	return rc;
}
