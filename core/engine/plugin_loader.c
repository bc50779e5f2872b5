/*
 * plugin_loader.c - dlopen()s plugins and refuses malformed or
 * incompatible ones with a message naming the file and both ABI versions.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/plugin_loader.h"

static const char prefix[] = "libmg_";
static const char suffix[] = ".so";

const char *mg_plugin_kind_name(enum mg_plugin_kind k)
{
	switch (k) {
	case MG_PLUGIN_STRATEGY:
		return "strategy";
	case MG_PLUGIN_MODEL:
		return "model";
	case MG_PLUGIN_DATASET:
		return "dataset";
	}
	return "unknown-kind";
}

static void sp_add(struct mg_search_path *sp, const char *dir,
		   const char *origin)
{
	if (!dir || !*dir || sp->n >= (int)(sizeof sp->dirs / sizeof *sp->dirs))
		return;
	sp->dirs[sp->n] = strdup(dir);
	sp->origin[sp->n] = origin;
	sp->n++;
}

static void sp_add_list(struct mg_search_path *sp, const char *list,
			const char *origin)
{
	if (!list)
		return;
	char *copy = strdup(list), *save = NULL;
	for (char *d = strtok_r(copy, ":", &save); d;
	     d = strtok_r(NULL, ":", &save))
		sp_add(sp, d, origin);
	free(copy);
}

void mg_search_path_init(struct mg_search_path *sp, const char *cli_dirs)
{
	memset(sp, 0, sizeof *sp);
	sp_add_list(sp, cli_dirs, "--plugin-path");
	sp_add_list(sp, getenv("MG_PLUGIN_PATH"), "MG_PLUGIN_PATH");
	/* A libmg running from the build tree uses the build tree's
	 * plugins; an installed one <its libdir>/mgrun/plugins, so an
	 * installation can be moved. */
	Dl_info info;
	char lib[PATH_MAX], dir[PATH_MAX + 32];
	if (!dladdr((void *)mg_search_path_init, &info) || !info.dli_fname ||
	    !realpath(info.dli_fname, lib))
		return;
	char *libdir = dirname(lib);
	if (!strcmp(libdir, MG_BUILD_LIB_DIR)) {
		sp_add(sp, MG_BUILD_PLUGIN_DIR, "build tree");
		return;
	}
	snprintf(dir, sizeof dir, "%s/mgrun/plugins", libdir);
	sp_add(sp, dir, "install prefix");
}

void mg_search_path_free(struct mg_search_path *sp)
{
	for (int i = 0; i < sp->n; i++)
		free(sp->dirs[i]);
	sp->n = 0;
}

/* Append `name` to the list of missing callbacks in buf. */
static void add_missing(char *buf, size_t n, bool absent, const char *name)
{
	if (!absent)
		return;
	size_t len = strlen(buf);
	snprintf(buf + len, n - len, "%s%s", len ? ", " : "", name);
}

/* A strategy's required callbacks, each named when absent. */
static void missing_strategy_ops(const struct mg_strategy_ops *o, char *buf,
				 size_t n)
{
	buf[0] = 0;
	add_missing(buf, n, !o->setup, "setup");
	add_missing(buf, n, !o->steps_per_epoch, "steps_per_epoch");
	add_missing(buf, n, !o->plan, "plan");
	add_missing(buf, n, !o->begin_step, "begin_step");
	add_missing(buf, n, !o->acquire, "acquire");
	add_missing(buf, n, !o->release, "release");
	add_missing(buf, n, !o->grads_ready, "grads_ready");
	add_missing(buf, n, !o->step, "step");
	add_missing(buf, n, !o->save, "save");
	add_missing(buf, n, !o->load, "load");
}

/*
 * How many bytes of the kind's callback table a plugin built for `minor`
 * has: each minor that appended fields is listed with the first field it
 * added (include/mg/{model,strategy,dataset}.h say which). Reading past
 * this size would read past the end of the plugin's static table.
 */
static size_t ops_size(enum mg_plugin_kind kind, uint32_t minor)
{
	switch (kind) {
	case MG_PLUGIN_MODEL:
		if (minor < 3)
			return offsetof(struct mg_model_ops, metrics);
		if (minor < 4)
			return offsetof(struct mg_model_ops, decode);
		if (minor < 6)
			return offsetof(struct mg_model_ops, save_hf_sharded);
		if (minor < 7)
			return offsetof(struct mg_model_ops, init_unit_part);
		return sizeof(struct mg_model_ops);
	case MG_PLUGIN_STRATEGY:
		if (minor < 1)
			return offsetof(struct mg_strategy_ops, max_read);
		if (minor < 3)
			return offsetof(struct mg_strategy_ops, caps);
		return sizeof(struct mg_strategy_ops);
	case MG_PLUGIN_DATASET:
		if (minor < 3)
			return offsetof(struct mg_dataset_ops, read_tokens);
		return sizeof(struct mg_dataset_ops);
	}
	return 0;
}

/* The plugin's callback table copied at this core's size, zero-filled
 * past what its ABI minor had. */
static void copy_ops(const struct mg_plugin *d, struct mg_loaded_plugin *out)
{
	memset(&out->ops, 0, sizeof out->ops);
	memcpy(&out->ops, d->ops, ops_size(d->kind, d->abi_minor));
}

static int check_ops(const struct mg_plugin *d,
		     const struct mg_loaded_plugin *lp, const char *path)
{
	const char *missing = NULL;
	char names[256], what[300];
	if (d->kind == MG_PLUGIN_MODEL) {
		const struct mg_model_ops *o = &lp->ops.model;
		if (!o->declare || !o->init_unit || !o->forward || !o->backward)
			missing = "model ops "
				  "(declare/init_unit/forward/backward)";
	} else if (d->kind == MG_PLUGIN_DATASET) {
		const struct mg_dataset_ops *o = &lp->ops.dataset;
		/* Token datasets read rows instead. */
		if (!o->count || !o->layout ||
		    (!o->read_tokens && (!o->read || !o->transform)))
			missing =
				"dataset ops (count/layout and read/transform "
				"or read_tokens)";
	} else if (d->kind == MG_PLUGIN_STRATEGY) {
		missing_strategy_ops(&lp->ops.strategy, names, sizeof names);
		snprintf(what, sizeof what,
			 "strategy ops: %s (struct "
			 "mg_strategy_ops, strategy.h)",
			 names);
		if (names[0])
			missing = what;
	}
	if (missing)
		return mg_error("plugin '%s' (%s) is malformed: no %s", d->name,
				path, missing);
	return 0;
}

/*
 * dlopen maps a file's load segments without looking at its size, and a
 * page past the end of a truncated file (an interrupted copy) raises
 * SIGBUS when touched. So read the ELF program headers first and refuse
 * a file that ends before its segments do. Files that are not 64-bit ELF
 * are left to dlopen, which says what is wrong with them.
 */
static int check_file(const char *label, const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return mg_error("plugin '%s': cannot open %s: %s", label, path,
				strerror(errno));
	struct stat st;
	Elf64_Ehdr eh;
	int rc = 0, nph = 0;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		rc = mg_error("plugin '%s': %s is not a regular file", label,
			      path);
	else if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh ||
		 memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
		 eh.e_ident[EI_CLASS] != ELFCLASS64)
		nph = 0; /* not 64-bit ELF: dlopen reports it */
	else if (eh.e_phentsize != sizeof(Elf64_Phdr) ||
		 eh.e_phoff > (uint64_t)st.st_size ||
		 (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) >
			 (uint64_t)st.st_size - eh.e_phoff)
		rc = mg_error("plugin '%s': %s is truncated or damaged: its "
			      "program headers lie outside its %lld bytes",
			      label, path, (long long)st.st_size);
	else
		nph = eh.e_phnum;
	for (int i = 0; !rc && i < nph; i++) {
		Elf64_Phdr ph;
		if (pread(fd, &ph, sizeof ph,
			  (off_t)(eh.e_phoff + (uint64_t)i * sizeof ph)) !=
		    (ssize_t)sizeof ph)
			rc = mg_error("plugin '%s': %s: cannot read program "
				      "header %d",
				      label, path, i);
		else if ((ph.p_type == PT_LOAD || ph.p_type == PT_DYNAMIC) &&
			 (ph.p_offset > (uint64_t)st.st_size ||
			  ph.p_filesz > (uint64_t)st.st_size - ph.p_offset))
			rc = mg_error(
				"plugin '%s': %s is truncated: segment "
				"%d needs bytes up to %llu, the file "
				"has %lld (an interrupted copy?)",
				label, path, i,
				(unsigned long long)(ph.p_offset + ph.p_filesz),
				(long long)st.st_size);
	}
	close(fd);
	return rc;
}

int mg_plugin_open(const char *path, enum mg_plugin_kind want_kind,
		   const char *want_name, struct mg_loaded_plugin *out)
{
	memset(out, 0, sizeof *out);
	const char *label = want_name ? want_name : path;
	struct stat st;
	if (stat(path, &st) != 0)
		return mg_error("plugin '%s': %s does not exist", label, path);
	if (check_file(label, path))
		return -1;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return mg_error("plugin '%s': cannot load %s: %s", label, path,
				dlerror());
	mg_plugin_entry_fn entry;
	*(void **)&entry = dlsym(h, MG_PLUGIN_ENTRY_SYMBOL);
	if (!entry) {
		dlclose(h);
		return mg_error("plugin '%s': %s has no %s() entry point (not "
				"an mgrun plugin?)",
				label, path, MG_PLUGIN_ENTRY_SYMBOL);
	}
	const struct mg_plugin *d = entry();
	int rc = 0;
	if (!d)
		rc = mg_error("plugin '%s': %s returned no descriptor", label,
			      path);
	else if (d->abi_major != MG_ABI_MAJOR || d->abi_minor > MG_ABI_MINOR)
		rc = mg_error("plugin '%s': %s was built for mgrun plugin ABI "
			      "%u.%u, this mgrun has ABI %d.%d%s",
			      label, path, d->abi_major, d->abi_minor,
			      MG_ABI_MAJOR, MG_ABI_MINOR,
			      d->abi_major == MG_ABI_MAJOR
				      ? " (rebuild the plugin or upgrade mgrun)"
				      : " (rebuild the plugin against this "
					"mgrun's headers)");
	else if (d->struct_size < sizeof(struct mg_plugin))
		rc = mg_error("plugin '%s': %s is malformed: descriptor is %u "
			      "bytes, ABI %d.%d needs %zu",
			      label, path, d->struct_size, MG_ABI_MAJOR,
			      MG_ABI_MINOR, sizeof(struct mg_plugin));
	else if (!d->name || !d->version || !d->create || !d->destroy)
		rc = mg_error("plugin '%s': %s is malformed: descriptor lacks "
			      "name, version, create or destroy",
			      label, path);
	else if (want_kind && d->kind != want_kind)
		rc = mg_error("plugin '%s' (%s) is a %s plugin, expected a %s "
			      "plugin",
			      d->name, path, mg_plugin_kind_name(d->kind),
			      mg_plugin_kind_name(want_kind));
	else if (want_name && strcmp(d->name, want_name) != 0)
		rc = mg_error("plugin file %s calls itself '%s', expected '%s'",
			      path, d->name, want_name);
	else if (!d->ops)
		rc = mg_error("plugin '%s' (%s) is malformed: no ops", d->name,
			      path);
	else {
		copy_ops(d, out);
		rc = check_ops(d, out, path);
	}
	if (rc) {
		dlclose(h);
		return rc;
	}
	out->handle = h;
	out->desc = d;
	if (!realpath(path, out->path))
		snprintf(out->path, sizeof out->path, "%s", path);
	return 0;
}

int mg_plugin_find(const struct mg_search_path *sp,
		   enum mg_plugin_kind want_kind, const char *name,
		   struct mg_loaded_plugin *out)
{
	char path[PATH_MAX];
	for (int i = 0; i < sp->n; i++) {
		snprintf(path, sizeof path, "%s/%s%s%s", sp->dirs[i], prefix,
			 name, suffix);
		struct stat st;
		if (stat(path, &st) == 0)
			return mg_plugin_open(path, want_kind, name, out);
	}
	char searched[4096] = "";
	size_t len = 0;
	for (int i = 0; i < sp->n && len < sizeof searched; i++)
		len += (size_t)snprintf(searched + len, sizeof searched - len,
					"%s%s (%s)", i ? ", " : "", sp->dirs[i],
					sp->origin[i]);
	return mg_error("%s plugin '%s' not found: no %s%s%s in %s (see "
			"mgrun --list-plugins)",
			mg_plugin_kind_name(want_kind), name, prefix, name,
			suffix, sp->n ? searched : "an empty search path");
}

void mg_plugin_close(struct mg_loaded_plugin *p)
{
	if (p->handle)
		dlclose(p->handle);
	memset(p, 0, sizeof *p);
}

void mg_plugin_foreach(const struct mg_search_path *sp,
		       void (*fn)(const struct mg_loaded_plugin *, void *),
		       void *arg)
{
	char **seen = NULL;
	int nseen = 0, cap = 0;
	for (int i = 0; i < sp->n; i++) {
		DIR *dir = opendir(sp->dirs[i]);
		if (!dir)
			continue;
		struct dirent *e;
		while ((e = readdir(dir))) {
			size_t len = strlen(e->d_name);
			if (len <= strlen(prefix) + strlen(suffix) ||
			    strncmp(e->d_name, prefix, strlen(prefix)) ||
			    strcmp(e->d_name + len - strlen(suffix), suffix))
				continue;
			size_t nlen = len - strlen(prefix) - strlen(suffix);
			int dup = 0;
			for (int k = 0; k < nseen && !dup; k++)
				dup = strlen(seen[k]) == nlen &&
				      !strncmp(seen[k],
					       e->d_name + strlen(prefix),
					       nlen);
			if (dup)
				continue;
			char path[PATH_MAX];
			snprintf(path, sizeof path, "%s/%s", sp->dirs[i],
				 e->d_name);
			struct mg_loaded_plugin p;
			if (mg_plugin_open(path, 0, NULL, &p) != 0) {
				mg_warn("%s", mg_last_error());
				continue;
			}
			if (nseen == cap) {
				cap = cap ? 2 * cap : 64;
				char **q = realloc(seen,
						   (size_t)cap * sizeof *seen);
				if (!q) {
					mg_plugin_close(&p);
					break;
				}
				seen = q;
			}
			seen[nseen] = strndup(e->d_name + strlen(prefix), nlen);
			if (seen[nseen])
				nseen++;
			fn(&p, arg);
			mg_plugin_close(&p);
		}
		closedir(dir);
	}
	for (int k = 0; k < nseen; k++)
		free(seen[k]);
	free(seen);
}
