/*
 * test_plugin.c - the mnist plugin through its descriptor: schema,
 * create() on fixture files and on the real Fashion-MNIST, count, layout,
 * read (bounds, concurrency), transform, and create() errors.
 *
 * The plugin sources and the core's config code (core/config, private
 * to libmg) are compiled into this test, so options come from INI text
 * through mg_opts_build exactly as the core builds them: schema checks,
 * defaults, and PATH values resolved against the INI file's folder.
 *
 * usage: test_plugin FIXTURE_DIR
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "idx.h"
#include "mg/mg.h"
#include "testutil.h"

MG_EXPORT const struct mg_plugin *mg_plugin_entry(void);

static const char *dir;

/* Build the [dataset] options from INI lines, as if from dir/test.ini;
 * NULL when they do not validate (diagnostics printed unless quiet). */
static struct mg_opts *opts_q(const char *lines, bool quiet)
{
	const struct mg_option *schemas[1] = {mg_plugin_entry()->options};
	struct mg_diag d = {0};
	char text[2048];

	snprintf(text, sizeof(text), "[dataset]\n%s", lines);
	struct mg_config *cfg =
		mg_config_parse_string(text, "test.ini", dir, &d);
	struct mg_opts *o = mg_opts_build(cfg, "dataset", schemas, 1, &d);
	if (mg_diag_count(&d)) {
		if (!quiet)
			mg_diag_print(stderr, &d);
		mg_opts_free(o);
		o = NULL;
	}
	mg_diag_free(&d);
	mg_config_free(cfg);
	return o;
}

static struct mg_opts *opts(const char *lines)
{
	return opts_q(lines, false);
}

static const struct mg_plugin *P;
static const struct mg_dataset_ops *D;
static struct mg_device dev = {.kind = MG_DEV_CPU, .threads = 2};
static struct mg_ctx ctx = {.struct_size = sizeof(struct mg_ctx),
			    .dev = &dev,
			    .compute_dtype = MG_F32};
static void test_descriptor(void)
{
	CHECK(P->abi_major == MG_ABI_MAJOR && P->abi_minor == MG_ABI_MINOR);
	CHECK(P->struct_size == sizeof(struct mg_plugin));
	CHECK(P->kind == MG_PLUGIN_DATASET);
	CHECK(strcmp(P->name, "mnist") == 0);
	CHECK(P->version && P->description && P->create && P->destroy);
	CHECK(D->count && D->layout && D->read && D->transform);

	const char *want[] = {"dir",	     "train_images", "train_labels",
			      "test_images", "test_labels",  "image_size",
			      "mean",	     "std",	     "limit_train",
			      "limit_test"};
	int n = 0;
	for (const struct mg_option *o = P->options; o->name; o++, n++) {
		CHECK(o->help && strlen(o->help) > 10);
		CHECK(o->def != NULL);
		if (o->type == MG_OPT_INT || o->type == MG_OPT_FLOAT) {
			double v = strtod(o->def, NULL);
			CHECK(o->min < o->max && v >= o->min && v <= o->max);
		}
		int known = 0;
		for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++)
			known += strcmp(want[i], o->name) == 0;
		CHECK(known == 1);
	}
	CHECK(n == 10);
}

static void write_idx(const char *name, int gz, int ndim, const uint32_t *dims,
		      const uint8_t *pay, size_t len)
{
	uint8_t buf[1024];
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	write_file(p, gz, buf, idx_bytes(buf, 0x08, ndim, dims, pay, len));
}

/* Train: 6 images 6x6 (gzip, default names); test: 4 images stored
 * without .gz (found through the fallback). */
static uint8_t tr_img[6 * 36], te_img[4 * 36];
static const uint8_t tr_lbl[6] = {1, 2, 3, 4, 5, 9}, te_lbl[4] = {0, 7, 7, 0};

static void make_fixtures(void)
{
	const uint32_t tr[3] = {6, 6, 6}, trl[1] = {6};
	const uint32_t te[3] = {4, 6, 6}, tel[1] = {4};

	mkdir(dir, 0777);
	for (int i = 0; i < 6 * 36; i++)
		tr_img[i] = (uint8_t)(i * 13 + 1);
	for (int i = 0; i < 4 * 36; i++)
		te_img[i] = (uint8_t)(255 - i);
	write_idx("train-images-idx3-ubyte.gz", 1, 3, tr, tr_img, 6 * 36);
	write_idx("train-labels-idx1-ubyte.gz", 1, 1, trl, tr_lbl, 6);
	write_idx("t10k-images-idx3-ubyte", 0, 3, te, te_img, 4 * 36);
	write_idx("t10k-labels-idx1-ubyte", 0, 1, tel, te_lbl, 4);
	/* A broken labels file for the error test. */
	const uint8_t bad[6] = {1, 2, 3, 4, 5, 10};
	write_idx("bad-labels", 0, 1, trl, bad, 6);
}

struct reader_arg {
	void *self;
	int bad;
};

static void *reader(void *p)
{
	struct reader_arg *a = p;
	uint8_t raw[3 * 36];
	int32_t lbl[3];

	for (int it = 0; it < 2000; it++) {
		const int64_t idx[3] = {it % 6, (it * 5 + 1) % 6, 5};
		if (D->read(a->self, MG_SPLIT_TRAIN, idx, 3, raw, lbl)) {
			a->bad++;
			continue;
		}
		for (int k = 0; k < 3; k++)
			a->bad += memcmp(raw + k * 36, tr_img + idx[k] * 36,
					 36) != 0 ||
				  lbl[k] != tr_lbl[idx[k]];
	}
	return NULL;
}

static void test_fixtures(void)
{
	/* dir "." is the INI file's folder: the fixtures. */
	struct mg_opts *o = opts("dir = .\nimage_size = 8\nlimit_test = 3\n"
				 "mean = 0.5\nstd = 0.25\n");
	void *self = NULL;

	CHECK(o != NULL);
	if (!o)
		return;
	int rc = P->create(o, &ctx, &self);
	mg_opts_free(o); /* the instance must not keep pointers into it */
	CHECK(rc == 0 && self);
	if (rc) {
		fprintf(stderr, "  %s\n", mg_last_error());
		return;
	}
	CHECK(D->count(self, MG_SPLIT_TRAIN) == 6);
	CHECK(D->count(self, MG_SPLIT_TEST) == 3);
	CHECK_ERR((int)D->count(self, (enum mg_split)7), "no split 7");

	struct mg_sample_layout l;
	CHECK(D->layout(self, &l) == 0);
	CHECK(l.raw_dtype == MG_U8 && l.raw_ndim == 3 && l.raw_shape[0] == 1 &&
	      l.raw_shape[1] == 6 && l.raw_shape[2] == 6);
	CHECK(l.label_len == 1 && l.num_classes == 10);
	CHECK(l.input_ndim == 3 && l.input_shape[0] == 1 &&
	      l.input_shape[1] == 8 && l.input_shape[2] == 8);

	/* read: by index, any order, repeats. */
	uint8_t raw[3 * 36];
	int32_t lbl[3];
	const int64_t idx[3] = {5, 0, 5};
	CHECK(D->read(self, MG_SPLIT_TRAIN, idx, 3, raw, lbl) == 0);
	CHECK(memcmp(raw, tr_img + 5 * 36, 36) == 0);
	CHECK(memcmp(raw + 36, tr_img, 36) == 0);
	CHECK(memcmp(raw + 72, tr_img + 5 * 36, 36) == 0);
	CHECK(lbl[0] == 9 && lbl[1] == 1 && lbl[2] == 9);
	const int64_t tidx[2] = {2, 1};
	CHECK(D->read(self, MG_SPLIT_TEST, tidx, 2, raw, lbl) == 0);
	CHECK(memcmp(raw, te_img + 2 * 36, 36) == 0 && lbl[0] == 7 &&
	      lbl[1] == 7);
	/* Bounds: the limit counts; negative; past the end. */
	const int64_t past[2] = {0, 6};
	CHECK_ERR(D->read(self, MG_SPLIT_TRAIN, past, 2, raw, lbl), "index 6",
		  "out of range [0, 6)", "train");
	const int64_t lim[1] = {3};
	CHECK_ERR(D->read(self, MG_SPLIT_TEST, lim, 1, raw, lbl), "index 3",
		  "out of range [0, 3)", "test");
	const int64_t neg[1] = {-1};
	CHECK_ERR(D->read(self, MG_SPLIT_TRAIN, neg, 1, raw, lbl), "index -1");
	CHECK_ERR(D->read(self, MG_SPLIT_TRAIN, idx, -1, raw, lbl),
		  "negative count");
	CHECK(D->read(self, MG_SPLIT_TRAIN, NULL, 0, NULL, NULL) == 0);

	/* Concurrent readers see the right bytes. */
	pthread_t th[4];
	struct reader_arg ra[4];
	for (int i = 0; i < 4; i++) {
		ra[i] = (struct reader_arg){.self = self};
		pthread_create(&th[i], NULL, reader, &ra[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(ra[i].bad == 0);
	}

	/* transform == the op with the configured mean/std and size. */
	CHECK(D->read(self, MG_SPLIT_TRAIN, idx, 3, raw, lbl) == 0);
	const int64_t rs[4] = {3, 1, 6, 6}, is[4] = {3, 1, 8, 8};
	float in[3 * 64], ref[3 * 64];
	struct mg_tensor rt = mg_tensor_make(raw, MG_U8, MG_DEV_CPU, 4, rs);
	struct mg_tensor it = mg_tensor_make(in, MG_F32, MG_DEV_CPU, 4, is);
	struct mg_tensor ft = mg_tensor_make(ref, MG_F32, MG_DEV_CPU, 4, is);
	CHECK(D->transform(self, &ctx, &rt, &it) == 0);
	CHECK(mg_op_resize_normalize_u8(&ctx, &rt, &ft, 0.5f, 0.25f) == 0);
	CHECK(memcmp(in, ref, sizeof(in)) == 0);
	/* Sample 0 and 2 are the same image. */
	CHECK(memcmp(in, in + 128, 64 * sizeof(float)) == 0);
	/* Shapes that do not match the layout are refused. */
	const int64_t wrong[4] = {3, 1, 9, 9};
	struct mg_tensor wt = mg_tensor_make(in, MG_F32, MG_DEV_CPU, 4, wrong);
	CHECK_ERR(D->transform(self, &ctx, &rt, &wt), "input is not",
		  "1, 8, 8");
	CHECK_ERR(D->transform(self, &ctx, &it, &it), "raw batch");
	P->destroy(self);
}

static void test_create_errors(void)
{
	void *self = (void *)1;
	char missing[512];

	snprintf(missing, sizeof(missing), "%s/nowhere", dir);
	struct mg_opts *o = opts("dir = nowhere\n");
	CHECK_ERR(P->create(o, &ctx, &self), "mnist: train_images", "neither",
		  missing, "nowhere/train-images-idx3-ubyte.gz",
		  "nowhere/train-images-idx3-ubyte exists");
	CHECK(self == NULL);
	mg_opts_free(o);

	o = opts("dir = .\ntrain_labels = bad-labels\n");
	CHECK_ERR(P->create(o, &ctx, &self), "mnist: train split", "bad-labels",
		  "label 10 of sample 5");
	mg_opts_free(o);

	/* Train and test images of different sizes. */
	const uint32_t te[3] = {4, 7, 7};
	static uint8_t pay[4 * 49];
	write_idx("t7-images", 0, 3, te, pay, sizeof(pay));
	o = opts("dir = .\ntest_images = t7-images\n");
	CHECK_ERR(P->create(o, &ctx, &self), "train images are 6x6",
		  "test images are 7x7");
	mg_opts_free(o);

	/* The schema's ranges are enforced by the core. */
	CHECK(opts_q("image_size = 4\n", true) == NULL);
	CHECK(opts_q("std = 0\n", true) == NULL);
	CHECK(opts_q("limit_train = -1\n", true) == NULL);
}

/* The default options: Debian's Fashion-MNIST. */
static void test_fashion(void)
{
	const char *def = P->options[0].def;
	char probe[1024];

	snprintf(probe, sizeof(probe), "%s/train-images-idx3-ubyte.gz", def);
	if (access(probe, R_OK) != 0) {
		printf("test_plugin: %s not installed, Fashion-MNIST part "
		       "skipped\n",
		       probe);
		return;
	}
	struct mg_opts *o = opts("image_size = 100\n");
	void *self = NULL;
	int rc = P->create(o, &ctx, &self);
	mg_opts_free(o);
	CHECK(rc == 0);
	if (rc) {
		fprintf(stderr, "  %s\n", mg_last_error());
		return;
	}
	CHECK(D->count(self, MG_SPLIT_TRAIN) == 60000);
	CHECK(D->count(self, MG_SPLIT_TEST) == 10000);
	uint8_t *raw = malloc(2 * 784);
	int32_t lbl[2];
	const int64_t idx[2] = {0, 59999};
	CHECK(D->read(self, MG_SPLIT_TRAIN, idx, 2, raw, lbl) == 0);
	CHECK(fnv1a(raw, 784) == 0x674b256561eaaeceull && lbl[0] == 9);
	CHECK(lbl[1] >= 0 && lbl[1] < 10);
	const int64_t rs[4] = {2, 1, 28, 28}, is[4] = {2, 1, 100, 100};
	float *in = malloc(2 * 100 * 100 * sizeof(float));
	struct mg_tensor rt = mg_tensor_make(raw, MG_U8, MG_DEV_CPU, 4, rs);
	struct mg_tensor it = mg_tensor_make(in, MG_F32, MG_DEV_CPU, 4, is);
	CHECK(D->transform(self, &ctx, &rt, &it) == 0);
	/* Top-left corner of image 0 is background: (0 - mean) / std. */
	CHECK(fabsf(in[0] - (0.0f - 0.28604f) / 0.35302f) < 1e-6f);
	free(in);
	free(raw);
	P->destroy(self);
}

int main(int argc, char **argv)
{
	dir = argc > 1 ? argv[1] : "plugin-fixtures";
	P = mg_plugin_entry();
	D = P->ops;
	test_descriptor();
	make_fixtures();
	test_fixtures();
	test_create_errors();
	test_fashion();
	return t_done("test_plugin");
}
