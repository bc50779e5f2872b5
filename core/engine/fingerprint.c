/*
 * fingerprint.c - the experiment a checkpoint belongs to (fingerprint.h).
 *
 * Options: every option of every section is recorded except those on
 * `may_change` below, which choose how long, where or how fast the run
 * goes but not what it trains. An option a plugin adds later is thus
 * checked by default; leaving one out is a decision made here.
 *
 * Files: every file the run read through the core's readers
 * (runtime/input_files.h: tokenizers, configs, weights, text data) and
 * every regular file a PATH option names (JSON Lines data), as
 * "size, hash". Files up to FULL_HASH_MAX are hashed whole; larger ones
 * (multi-GB weights and data, read at every start) by their size and
 * their first and last MiB and SAMPLES chunks spread between: an edit
 * that keeps the size and misses every sampled chunk goes unnoticed,
 * the price of not reading 15 GB at each start. The modification time
 * is not used: copying a model folder to another machine changes it
 * and nothing else.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "engine/fingerprint.h"
#include "runtime/input_files.h"

#define FULL_HASH_MAX (64ll << 20)
#define EDGE (1ll << 20)
#define SAMPLES 16
#define SAMPLE (64ll << 10)
#define MAX_LISTED 6 /* differences named in one error */

/* Options that may change on --resume. "x." is a whole section: every
 * strategy trains the same model (tests/strategies), and checkpoints
 * move between strategies and rank counts; run.batch_size may change
 * with the rank count as long as the global batch, checked apart in
 * trainer_ckpt.c, stays. */
static const char *const may_change[] = {
	"run.epochs",
	"run.max_steps",
	"run.stop_after",
	"run.log_every",
	"run.csv_full_precision",
	"run.checkpoint_every",
	"run.checkpoint_every_s",
	"run.checkpoint",
	"run.out_dir",
	"run.name",
	"run.threads",
	"run.eval",
	"run.eval_batch_size",
	"run.eval_every",
	"run.eval_limit",
	"run.early_stop_patience",
	"run.tensorboard",
	"run.gpus",
	"run.batch_size",
	"run.pin_memory",
	"run.cuda_graph",
	"run.collective_timeout_s",
	"model.path",
	"dataset.path",
	"profile.",
	"strategy.",
};

static bool allowed_key(const char *key)
{
	for (size_t i = 0; i < sizeof may_change / sizeof *may_change; i++) {
		size_t n = strlen(may_change[i]);
		if (may_change[i][n - 1] == '.'
			    ? !strncmp(key, may_change[i], n)
			    : !strcmp(key, may_change[i]))
			return true;
	}
	return false;
}

static uint64_t fnv1a(uint64_t h, const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

/* Hash bytes [off, off+n) of fd into h; false on a read error. */
static bool hash_range(int fd, int64_t off, int64_t n, uint64_t *h)
{
	static _Thread_local unsigned char buf[1 << 16];
	while (n > 0) {
		size_t want = n < (int64_t)sizeof buf ? (size_t)n : sizeof buf;
		ssize_t got = pread(fd, buf, want, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return false;
		*h = fnv1a(*h, buf, (size_t)got);
		off += got;
		n -= got;
	}
	return true;
}

/* A regular file's size and hash (see the top of the file). */
static int file_print(const char *path, int64_t *size, uint64_t *hash)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		return mg_error("%s: cannot fingerprint for the checkpoint: %s",
				path,
				fd >= 0 ? "not a regular file" : strerror(e));
	}
	int64_t n = st.st_size;
	uint64_t h = 1469598103934665603ull;
	bool ok = true;
	if (n <= FULL_HASH_MAX) {
		ok = hash_range(fd, 0, n, &h);
	} else {
		ok = hash_range(fd, 0, EDGE, &h) &&
		     hash_range(fd, n - EDGE, EDGE, &h);
		for (int i = 1; ok && i <= SAMPLES; i++)
			ok = hash_range(fd, (n - SAMPLE) / (SAMPLES + 1) * i,
					SAMPLE, &h);
	}
	close(fd);
	if (!ok)
		return mg_error(
			"%s: read error while fingerprinting it for the "
			"checkpoint",
			path);
	*size = n;
	*hash = h;
	return 0;
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return n && !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

/* The PATH option (not one that may change) whose value is the file or
 * a folder holding it, else "-": what --resume-changed may name. */
static void owner(const struct mg_session *s, const char *path, char *out,
		  size_t len)
{
	const struct mg_opts *all[3 + MG_SEC_PLUGIN_COUNT] = {s->run, s->optim,
							      s->profile};
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++)
		all[3 + i] = s->opts[i];
	snprintf(out, len, "-");
	for (int k = 0; k < 3 + MG_SEC_PLUGIN_COUNT; k++)
		for (size_t i = 0; i < mg_opts_count(all[k]); i++) {
			const char *text, *name;
			enum mg_opt_type type;
			name = mg_opts_at(all[k], i, &text, &type);
			char key[160], real[PATH_MAX];
			snprintf(key, sizeof key, "%s.%s",
				 mg_opts_section(all[k]), name);
			if (type == MG_OPT_PATH && text[0] &&
			    !allowed_key(key) && realpath(text, real) &&
			    under(path, real)) {
				snprintf(out, len, "%s", key);
				return;
			}
		}
}

static int add_file(FILE *o, const struct mg_session *s, const char *path,
		    const char *const *skip_dirs)
{
	char real[PATH_MAX], opt[160];
	if (!realpath(path, real))
		return 0; /* gone since it was read: nothing to compare */
	for (int i = 0; skip_dirs[i]; i++)
		if (under(real, skip_dirs[i]))
			return 0;
	int64_t size = 0;
	uint64_t hash = 0;
	if (file_print(real, &size, &hash))
		return -1;
	owner(s, real, opt, sizeof opt);
	fprintf(o, "%s\t%lld\t%016llx\t%s\n", real, (long long)size,
		(unsigned long long)hash, opt);
	return 0;
}

int mg_fingerprint_make(struct mg_fingerprint *fp, const struct mg_session *s,
			const char *run_dir, const char *cache_dir)
{
	memset(fp, 0, sizeof *fp);
	size_t clen = 0, flen = 0;
	FILE *c = open_memstream(&fp->config, &clen);
	FILE *f = open_memstream(&fp->files, &flen);
	if (!c || !f) {
		if (c)
			fclose(c);
		free(fp->config);
		fp->config = NULL;
		return mg_error("out of memory");
	}
	char rd[PATH_MAX] = "", cd[PATH_MAX] = "";
	if (!realpath(run_dir, rd))
		snprintf(rd, sizeof rd, "%s", run_dir);
	if (!realpath(cache_dir, cd))
		snprintf(cd, sizeof cd, "%s", cache_dir);
	const char *const skip[] = {rd, cd, NULL};
	const struct mg_opts *all[3 + MG_SEC_PLUGIN_COUNT] = {s->run, s->optim,
							      s->profile};
	for (int i = 0; i < MG_SEC_PLUGIN_COUNT; i++)
		all[3 + i] = s->opts[i];
	int rc = 0;
	size_t nread;
	const char *const *read = mg_input_files(&nread);
	for (size_t i = 0; i < nread && !rc; i++)
		rc = add_file(f, s, read[i], skip);
	for (int k = 0; k < 3 + MG_SEC_PLUGIN_COUNT && !rc; k++)
		for (size_t i = 0; i < mg_opts_count(all[k]) && !rc; i++) {
			const char *text, *name;
			enum mg_opt_type type;
			name = mg_opts_at(all[k], i, &text, &type);
			char key[160], real[PATH_MAX];
			struct stat st;
			snprintf(key, sizeof key, "%s.%s",
				 mg_opts_section(all[k]), name);
			if (allowed_key(key))
				continue;
			fprintf(c, "%s = %s\n", key, text);
			bool listed = false;
			if (type == MG_OPT_PATH && text[0] &&
			    realpath(text, real) && !stat(real, &st) &&
			    S_ISREG(st.st_mode)) {
				for (size_t j = 0; j < nread && !listed; j++)
					listed = !strcmp(read[j], real);
				if (!listed)
					rc = add_file(f, s, real, skip);
			}
		}
	fclose(c);
	fclose(f);
	if (rc || !fp->config || !fp->files) {
		mg_fingerprint_free(fp);
		return rc ? -1 : mg_error("out of memory");
	}
	return 0;
}

void mg_fingerprint_free(struct mg_fingerprint *fp)
{
	free(fp->config);
	free(fp->files);
	fp->config = fp->files = NULL;
}

/* The line of `text` whose first field (up to `sep`) is `key`, copied
 * into out without the key and separator; false when there is none. */
static bool find_line(const char *text, const char *key, const char *sep,
		      char *out, size_t len)
{
	size_t kl = strlen(key), sl = strlen(sep);
	for (const char *l = text; l && *l;) {
		const char *e = strchr(l, '\n');
		size_t n = e ? (size_t)(e - l) : strlen(l);
		if (n >= kl + sl && !strncmp(l, key, kl) &&
		    !strncmp(l + kl, sep, sl)) {
			snprintf(out, len, "%.*s", (int)(n - kl - sl),
				 l + kl + sl);
			return true;
		}
		l = e ? e + 1 : NULL;
	}
	return false;
}

/* True when `name` is one of the comma-separated names in `list`. */
static bool named(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; p && *p;) {
		const char *e = strchr(p, ',');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l == n && !strncmp(p, name, n))
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

/* The differences found, for one error message. */
struct diffs {
	FILE *f;
	int n;
};

__attribute__((format(printf, 2, 3))) static void differ(struct diffs *d,
							 const char *fmt, ...)
{
	if (d->n++ < MAX_LISTED) {
		va_list ap;
		va_start(ap, fmt);
		fputs(d->n > 1 ? "; " : "", d->f);
		vfprintf(d->f, fmt, ap);
		va_end(ap);
	}
}

/* Options: each recorded key against this run's, both ways. */
static void diff_config(struct diffs *d, const char *then, const char *now,
			const char *changed)
{
	char key[160], old[1024], cur[1024];
	for (int pass = 0; pass < 2; pass++) {
		const char *a = pass ? now : then, *b = pass ? then : now;
		for (const char *l = a; l && *l;) {
			const char *e = strchr(l, '\n'), *eq = strstr(l, " = ");
			const char *line = l;
			l = e ? e + 1 : NULL;
			if (!eq || (e && eq > e))
				continue;
			snprintf(key, sizeof key, "%.*s", (int)(eq - line),
				 line);
			if (allowed_key(key) || named(changed, key))
				continue;
			bool in_b = find_line(b, key, " = ", cur, sizeof cur);
			if (pass && in_b)
				continue; /* compared in the first pass */
			find_line(a, key, " = ", old, sizeof old);
			if (!in_b)
				differ(d, "%s = %s %s", key, old,
				       pass ? "now, no such option then"
					    : "then, no such option now");
			else if (strcmp(old, cur))
				differ(d, "%s = %s then, %s now", key, old,
				       cur);
		}
	}
}

/* Files: each recorded file against this run's, both ways. */
static void diff_files(struct diffs *d, const char *then, const char *now,
		       const char *changed)
{
	char path[PATH_MAX], old[256], cur[256];
	for (int pass = 0; pass < 2; pass++) {
		const char *a = pass ? now : then, *b = pass ? then : now;
		for (const char *l = a; l && *l;) {
			const char *e = strchr(l, '\n'), *t = strchr(l, '\t');
			const char *next = e ? e + 1 : NULL;
			if (!t || (e && t > e)) {
				l = next;
				continue;
			}
			snprintf(path, sizeof path, "%.*s", (int)(t - l), l);
			l = next;
			find_line(a, path, "\t", old, sizeof old);
			bool in_b = find_line(b, path, "\t", cur, sizeof cur);
			if (pass && in_b)
				continue;
			/* old/cur: "size\thash\toption" */
			const char *oo = strrchr(old, '\t'),
				   *co = in_b ? strrchr(cur, '\t') : NULL;
			if (named(changed, path) ||
			    (oo && named(changed, oo + 1)) ||
			    (co && named(changed, co + 1)))
				continue;
			if (!in_b)
				differ(d, "file %s %s", path,
				       pass ? "is read now, not by the "
					      "checkpoint's run"
					    : "was read by the checkpoint's "
					      "run, not now");
			else if (strcmp(old, cur)) {
				long long os = atoll(old), cs = atoll(cur);
				char sizes[96];
				snprintf(sizes, sizeof sizes,
					 " (%lld bytes then, %lld now)", os,
					 cs);
				differ(d,
				       "file %s changed since the "
				       "checkpoint%s",
				       path, os != cs ? sizes : "");
			}
		}
	}
}

int mg_fingerprint_check(const struct mg_fingerprint *fp, const char *ckpt,
			 const char *config, const char *files,
			 const char *changed)
{
	char *text = NULL;
	size_t len = 0;
	struct diffs d = {open_memstream(&text, &len), 0};
	if (!d.f)
		return mg_error("out of memory");
	if (config)
		diff_config(&d, config, fp->config, changed);
	if (files)
		diff_files(&d, files, fp->files, changed);
	if (d.n > MAX_LISTED)
		fprintf(d.f, "; and %d more", d.n - MAX_LISTED);
	fclose(d.f);
	int rc = 0;
	if (d.n)
		rc = mg_error("%s was written for another experiment: %s "
			      "(resuming would train something else; name "
			      "what changed on purpose with --resume-changed "
			      "SECTION.KEY or FILE,...)",
			      ckpt, text ? text : "");
	free(text);
	return rc;
}
