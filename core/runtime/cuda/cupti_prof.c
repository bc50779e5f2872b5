/*
 * cupti_prof.c - the CUPTI Activity API behind the [profile] window: API
 * calls (runtime and driver), memory copies and kernels are aggregated in
 * the buffer-completed callback as CUPTI delivers them (from its worker
 * thread, or from the thread that flushes), so memory stays bounded
 * however long the window; only a capped timeline of memory copies is
 * kept record by record.
 */
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/cupti_prof.h"
#include "runtime/runtime.h"

#define BUF_BYTES (4u << 20)
#define CBID_MAX 4096 /* runtime and driver ids are below 1000 in CUDA 13 */
#define NAME_MAX_LEN 96

/* The kinds collected, enabled in this order. */
static const CUpti_ActivityKind kinds[] = {
	CUPTI_ACTIVITY_KIND_RUNTIME,
	CUPTI_ACTIVITY_KIND_DRIVER,
	CUPTI_ACTIVITY_KIND_MEMCPY,
	CUPTI_ACTIVITY_KIND_MEMSET,
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
};
#define NKINDS ((int)(sizeof kinds / sizeof kinds[0]))

struct api_agg {
	int64_t count;
	uint64_t ns;
};

/* A kernel, keyed by CUPTI's name pointer (shared by every record of the
 * same kernel); merged by name text when the window closes. */
struct kern {
	const char *key;
	char *name;
	int nccl; /* enum mg_cupti_nccl, or -1: a compute kernel */
	int64_t count;
	uint64_t ns;
};

struct copy_rec {
	uint64_t start, bytes;
	uint64_t dur_ns;
	int kind;
};

/* A merged entry of the lists built at stop. */
struct entry {
	char *name;
	int64_t count;
	double seconds;
};

struct mg_cupti {
	bool started, stopped;
	int enabled; /* kinds[0..enabled) are on */
	uint64_t t0; /* CUPTI timestamp at start */
	struct api_agg rt[CBID_MAX], drv[CBID_MAX];
	struct kern *kt; /* open addressing, kcap a power of two */
	size_t kcap, kn;
	struct mg_cupti_stat copies[MG_CUPTI_COPY_N], memsets;
	uint64_t copy_ns[MG_CUPTI_COPY_N], memset_ns;
	struct copy_rec *tl;
	int64_t tl_n, tl_alloc, tl_cap, tl_dropped;
	int64_t dropped;
	double proc_s, flush_s;
	/* Built by mg_cupti_stop. */
	struct entry *apis, *kernels; /* sorted by seconds, descending */
	int napis, nkernels;
	struct mg_cupti_stat nccl[MG_CUPTI_NCCL_N], compute;
};

/* CUPTI's callbacks carry no user pointer: the one collector. g_mu
 * orders the callbacks against mg_cupti_free. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mg_cupti *g_col;
static bool g_registered;

static int cupti_fail(CUptiResult r, const char *what)
{
	const char *s = NULL;
	if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
		s = "unknown CUPTI error";
	return mg_error("CUPTI: %s failed: %s (%d)", what, s, (int)r);
}

static int nccl_class(const char *name)
{
	if (!strstr(name, "ncclDevKernel") && !strstr(name, "ncclKernel"))
		return -1;
	if (strstr(name, "AllGather"))
		return MG_CUPTI_ALL_GATHER;
	if (strstr(name, "ReduceScatter"))
		return MG_CUPTI_REDUCE_SCATTER;
	if (strstr(name, "AllReduce"))
		return MG_CUPTI_ALL_REDUCE;
	if (strstr(name, "Broadcast"))
		return MG_CUPTI_BROADCAST;
	return MG_CUPTI_NCCL_OTHER;
}

static size_t ptr_hash(const void *p, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 17) & (cap - 1);
}

static struct kern *kern_slot(struct kern *tab, size_t cap, const char *key)
{
	size_t i = ptr_hash(key, cap);
	while (tab[i].key && tab[i].key != key)
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

/* The table entry of a kernel name, added if new; NULL when out of
 * memory (the record is then lost). */
static struct kern *kern_find(struct mg_cupti *c, const char *key)
{
	if (2 * (c->kn + 1) > c->kcap) {
		size_t cap = c->kcap ? 2 * c->kcap : 1024;
		struct kern *t = calloc(cap, sizeof *t);
		if (!t)
			return NULL;
		for (size_t i = 0; i < c->kcap; i++)
			if (c->kt[i].key)
				*kern_slot(t, cap, c->kt[i].key) = c->kt[i];
		free(c->kt);
		c->kt = t;
		c->kcap = cap;
	}
	struct kern *k = kern_slot(c->kt, c->kcap, key);
	if (!k->key) {
		char *name = strdup(key);
		if (!name)
			return NULL;
		k->key = key;
		k->name = name;
		k->nccl = nccl_class(name);
		c->kn++;
	}
	return k;
}

static uint64_t span(uint64_t start, uint64_t end)
{
	return end > start ? end - start : 0;
}

static void take_copy(struct mg_cupti *c, const CUpti_ActivityMemcpy6 *m)
{
	int kind;
	switch (m->copyKind) {
	case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
		kind = MG_CUPTI_H2D;
		break;
	case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
		kind = MG_CUPTI_D2H;
		break;
	case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
		kind = MG_CUPTI_D2D;
		break;
	default:
		kind = MG_CUPTI_COPY_OTHER;
	}
	uint64_t ns = span(m->start, m->end);
	c->copies[kind].count++;
	c->copies[kind].bytes += (double)m->bytes;
	c->copy_ns[kind] += ns;
	if (c->tl_n == c->tl_cap) {
		c->tl_dropped++;
		return;
	}
	if (c->tl_n == c->tl_alloc) {
		int64_t n = c->tl_alloc ? 2 * c->tl_alloc : 4096;
		if (n > c->tl_cap)
			n = c->tl_cap;
		void *p = realloc(c->tl, (size_t)n * sizeof *c->tl);
		if (!p) {
			c->tl_dropped++;
			return;
		}
		c->tl = p;
		c->tl_alloc = n;
	}
	c->tl[c->tl_n++] = (struct copy_rec){
		.start = m->start,
		.bytes = m->bytes,
		.dur_ns = ns,
		.kind = kind,
	};
}

static void take(struct mg_cupti *c, const CUpti_Activity *r)
{
	switch (r->kind) {
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)r;
		struct api_agg *tab =
			r->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? c->rt : c->drv;
		if (a->cbid >= CBID_MAX)
			break;
		tab[a->cbid].count++;
		tab[a->cbid].ns += span(a->start, a->end);
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		take_copy(c, (const CUpti_ActivityMemcpy6 *)r);
		break;
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m =
			(const CUpti_ActivityMemset4 *)r;
		c->memsets.count++;
		c->memsets.bytes += (double)m->bytes;
		c->memset_ns += span(m->start, m->end);
		break;
	}
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k =
			(const CUpti_ActivityKernel10 *)r;
		struct kern *e = kern_find(c, k->name ? k->name : "?");
		if (!e)
			break;
		e->count++;
		e->ns += span(k->start, k->end);
		break;
	}
	default:
		break;
	}
}

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size,
				   size_t *max_records)
{
	*buf = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, BUF_BYTES);
	*size = *buf ? BUF_BYTES : 0;
	*max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf,
				   size_t size, size_t valid)
{
	(void)size;
	double t0 = mg_now();
	pthread_mutex_lock(&g_mu);
	struct mg_cupti *c = g_col;
	if (c && c->started && !c->stopped) {
		CUpti_Activity *r = NULL;
		while (valid && cuptiActivityGetNextRecord(buf, valid, &r) ==
					CUPTI_SUCCESS)
			take(c, r);
		size_t dropped = 0;
		if (cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) ==
		    CUPTI_SUCCESS)
			c->dropped += (int64_t)dropped;
		c->proc_s += mg_now() - t0;
	}
	pthread_mutex_unlock(&g_mu);
	free(buf);
}

static char *(*demangler)(const char *, char *, size_t *, int *);

/* A kernel's readable name: the C++ runtime's demangler when some
 * library (cuDNN, cuBLAS) loaded it; the raw name otherwise. */
static char *readable(const char *raw)
{
	if (demangler && raw[0] == '_' && raw[1] == 'Z') {
		int st = -1;
		char *d = demangler(raw, NULL, NULL, &st);
		if (d && st == 0)
			return d;
		free(d);
	}
	return strdup(raw);
}

/* CUPTI's callback name without leading underscores and the _vNNNN,
 * _ptsz and _ptds suffixes. */
static void canonical(const char *in, char *out, size_t n)
{
	while (*in == '_')
		in++;
	snprintf(out, n, "%s", in);
	for (;;) {
		char *u = strrchr(out, '_');
		if (!u || u == out)
			return;
		bool ver = u[1] == 'v' && u[2] &&
			   strspn(u + 2, "0123456789") == strlen(u + 2);
		if (!ver && strcmp(u, "_ptsz") && strcmp(u, "_ptds"))
			return;
		*u = 0;
	}
}

static int by_seconds(const void *a, const void *b)
{
	double x = ((const struct entry *)a)->seconds;
	double y = ((const struct entry *)b)->seconds;
	return x < y ? 1 : x > y ? -1 : 0;
}

static int by_start(const void *a, const void *b)
{
	uint64_t x = ((const struct copy_rec *)a)->start;
	uint64_t y = ((const struct copy_rec *)b)->start;
	return x < y ? -1 : x > y;
}

/* Add (name, count, seconds) to a list, merging equal names; name is
 * taken over (freed when merged). */
static int list_add(struct entry **list, int *n, char *name, int64_t count,
		    double seconds)
{
	for (int i = 0; i < *n; i++)
		if (!strcmp((*list)[i].name, name)) {
			(*list)[i].count += count;
			(*list)[i].seconds += seconds;
			free(name);
			return 0;
		}
	void *p = realloc(*list, (size_t)(*n + 1) * sizeof **list);
	if (!p) {
		free(name);
		return mg_error("out of memory");
	}
	*list = p;
	(*list)[(*n)++] = (struct entry){name, count, seconds};
	return 0;
}

static int add_apis(struct mg_cupti *c, const struct api_agg *tab,
		    CUpti_CallbackDomain dom)
{
	for (int id = 0; id < CBID_MAX; id++) {
		const char *raw = NULL;
		char name[NAME_MAX_LEN];
		if (!tab[id].count)
			continue;
		if (cuptiGetCallbackName(dom, (uint32_t)id, &raw) !=
			    CUPTI_SUCCESS ||
		    !raw)
			snprintf(name, sizeof name, "%s#%d",
				 dom == CUPTI_CB_DOMAIN_RUNTIME_API ? "runtime"
								    : "driver",
				 id);
		else
			canonical(raw, name, sizeof name);
		char *dup = strdup(name);
		if (!dup || list_add(&c->apis, &c->napis, dup, tab[id].count,
				     (double)tab[id].ns * 1e-9))
			return mg_error("out of memory");
	}
	return 0;
}

/* The per-name lists and class totals, once no record can arrive. */
static int build(struct mg_cupti *c)
{
	if (add_apis(c, c->rt, CUPTI_CB_DOMAIN_RUNTIME_API) ||
	    add_apis(c, c->drv, CUPTI_CB_DOMAIN_DRIVER_API))
		return -1;
	/* Compute kernels merged by raw name first (one kernel may have
	 * several name pointers, one per module load), then demangled. */
	struct entry *raw = NULL;
	int nraw = 0;
	for (size_t i = 0; i < c->kcap; i++) {
		const struct kern *k = &c->kt[i];
		if (!k->key)
			continue;
		double s = (double)k->ns * 1e-9;
		if (k->nccl >= 0) {
			c->nccl[k->nccl].count += k->count;
			c->nccl[k->nccl].seconds += s;
			continue;
		}
		c->compute.count += k->count;
		c->compute.seconds += s;
		char *dup = strdup(k->name);
		if (!dup || list_add(&raw, &nraw, dup, k->count, s)) {
			for (int j = 0; j < nraw; j++)
				free(raw[j].name);
			free(raw);
			return mg_error("out of memory");
		}
	}
	int rc = 0;
	for (int j = 0; j < nraw; j++) {
		char *r = readable(raw[j].name);
		if (!rc && (!r || list_add(&c->kernels, &c->nkernels, r,
					   raw[j].count, raw[j].seconds)))
			rc = mg_error("out of memory");
		free(raw[j].name);
	}
	free(raw);
	for (int k = 0; k < MG_CUPTI_COPY_N; k++)
		c->copies[k].seconds = (double)c->copy_ns[k] * 1e-9;
	c->memsets.seconds = (double)c->memset_ns * 1e-9;
	if (c->napis)
		qsort(c->apis, (size_t)c->napis, sizeof *c->apis, by_seconds);
	if (c->nkernels)
		qsort(c->kernels, (size_t)c->nkernels, sizeof *c->kernels,
		      by_seconds);
	if (c->tl_n) /* delivered in completion order */
		qsort(c->tl, (size_t)c->tl_n, sizeof *c->tl, by_start);
	return rc;
}

struct mg_cupti *mg_cupti_init(int64_t timeline_cap)
{
	pthread_mutex_lock(&g_mu);
	if (g_col) {
		pthread_mutex_unlock(&g_mu);
		mg_error("CUPTI: one collector per process");
		return NULL;
	}
	if (!g_registered) {
		CUptiResult r = cuptiActivityRegisterCallbacks(buf_requested,
							       buf_completed);
		if (r != CUPTI_SUCCESS) {
			pthread_mutex_unlock(&g_mu);
			cupti_fail(r, "cuptiActivityRegisterCallbacks");
			return NULL;
		}
		g_registered = true;
	}
	struct mg_cupti *c = calloc(1, sizeof *c);
	if (!c) {
		pthread_mutex_unlock(&g_mu);
		mg_error("out of memory");
		return NULL;
	}
	c->tl_cap = timeline_cap > 0 ? timeline_cap : 0;
	g_col = c;
	pthread_mutex_unlock(&g_mu);
	/* The demangler of libstdc++ (cuDNN and cuBLAS load it): a C-linkage
	 * symbol, looked up rather than linked so libmg stays C. */
	void *sym = dlsym(RTLD_DEFAULT, "__cxa_demangle");
	memcpy(&demangler, &sym, sizeof sym);
	return c;
}

static void disable_kinds(struct mg_cupti *c)
{
	while (c->enabled > 0)
		cuptiActivityDisable(kinds[--c->enabled]);
}

int mg_cupti_start(struct mg_cupti *c)
{
	if (c->started)
		return mg_error("CUPTI: the collection was started already");
	CUptiResult r = cuptiGetTimestamp(&c->t0);
	if (r != CUPTI_SUCCESS)
		return cupti_fail(r, "cuptiGetTimestamp");
	pthread_mutex_lock(&g_mu);
	c->started = true;
	pthread_mutex_unlock(&g_mu);
	for (int i = 0; i < NKINDS; i++) {
		r = cuptiActivityEnable(kinds[i]);
		if (r != CUPTI_SUCCESS) {
			disable_kinds(c);
			pthread_mutex_lock(&g_mu);
			c->stopped = true;
			pthread_mutex_unlock(&g_mu);
			return cupti_fail(r, "cuptiActivityEnable");
		}
		c->enabled = i + 1;
	}
	return 0;
}

int mg_cupti_stop(struct mg_cupti *c)
{
	if (!c->started || c->stopped)
		return mg_error("CUPTI: no collection to stop");
	/* Every record complete before the forced flush: the caller waited
	 * for its streams; this covers the rest (one API record). */
	cudaError_t ce = cudaDeviceSynchronize();
	double t = mg_now();
	CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	disable_kinds(c);
	/* Whatever was recorded between the flush and the disable. */
	CUptiResult r2 =
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	c->flush_s = mg_now() - t;
	pthread_mutex_lock(&g_mu);
	c->stopped = true;
	pthread_mutex_unlock(&g_mu);
	if (ce != cudaSuccess)
		return mg_error("CUPTI: cudaDeviceSynchronize before the flush "
				"failed: %s",
				cudaGetErrorString(ce));
	if (r != CUPTI_SUCCESS || r2 != CUPTI_SUCCESS)
		return cupti_fail(r != CUPTI_SUCCESS ? r : r2,
				  "cuptiActivityFlushAll");
	return build(c);
}

void mg_cupti_free(struct mg_cupti *c)
{
	if (!c)
		return;
	if (c->started && !c->stopped) {
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		disable_kinds(c);
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	}
	pthread_mutex_lock(&g_mu);
	if (g_col == c)
		g_col = NULL;
	pthread_mutex_unlock(&g_mu);
	for (size_t i = 0; i < c->kcap; i++)
		free(c->kt[i].name);
	free(c->kt);
	for (int i = 0; i < c->napis; i++)
		free(c->apis[i].name);
	free(c->apis);
	for (int i = 0; i < c->nkernels; i++)
		free(c->kernels[i].name);
	free(c->kernels);
	free(c->tl);
	free(c);
}

struct mg_cupti_stat mg_cupti_api(const struct mg_cupti *c, const char *name)
{
	struct mg_cupti_stat s = {0};
	for (int i = 0; i < c->napis; i++)
		if (!strcmp(c->apis[i].name, name)) {
			s.count = c->apis[i].count;
			s.seconds = c->apis[i].seconds;
		}
	return s;
}

struct mg_cupti_stat mg_cupti_copies(const struct mg_cupti *c,
				     enum mg_cupti_copy kind)
{
	return c->copies[kind];
}

struct mg_cupti_stat mg_cupti_memsets(const struct mg_cupti *c)
{
	return c->memsets;
}

struct mg_cupti_stat mg_cupti_nccl(const struct mg_cupti *c,
				   enum mg_cupti_nccl coll)
{
	return c->nccl[coll];
}

struct mg_cupti_stat mg_cupti_compute(const struct mg_cupti *c)
{
	return c->compute;
}

int mg_cupti_top(const struct mg_cupti *c, enum mg_cupti_list what,
		 struct mg_cupti_named *out, int n)
{
	const struct entry *e = what == MG_CUPTI_KERNELS ? c->kernels : c->apis;
	int ne = what == MG_CUPTI_KERNELS ? c->nkernels : c->napis;
	int k = 0;
	for (; k < n && k < ne; k++)
		out[k] = (struct mg_cupti_named){e[k].name, e[k].count,
						 e[k].seconds};
	return k;
}

double mg_cupti_processing_seconds(const struct mg_cupti *c)
{
	return c->proc_s;
}

double mg_cupti_flush_seconds(const struct mg_cupti *c)
{
	return c->flush_s;
}

int64_t mg_cupti_dropped(const struct mg_cupti *c)
{
	return c->dropped;
}

int64_t mg_cupti_timeline_dropped(const struct mg_cupti *c)
{
	return c->tl_dropped;
}

int mg_cupti_write_memcpy_csv(const struct mg_cupti *c, const char *path)
{
	static const char *const kname[MG_CUPTI_COPY_N] = {"h2d", "d2h", "d2d",
							   "other"};
	FILE *f = fopen(path, "w");
	if (!f)
		return mg_error("%s: cannot open for writing", path);
	fputs("t_s,kind,bytes,duration_s\n", f);
	for (int64_t i = 0; i < c->tl_n; i++) {
		const struct copy_rec *r = &c->tl[i];
		double t = (double)(int64_t)(r->start - c->t0) * 1e-9;
		fprintf(f, "%.9f,%s,%llu,%.9f\n", t, kname[r->kind],
			(unsigned long long)r->bytes, (double)r->dur_ns * 1e-9);
	}
	if (fclose(f))
		return mg_error("%s: write failed", path);
	return 0;
}
