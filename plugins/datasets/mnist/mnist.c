/*
 * mnist.c - the "mnist" dataset plugin: MNIST-format IDX files (MNIST,
 * Fashion-MNIST, KMNIST...), plain or gzip, loaded whole at create().
 * read() hands out raw 8-bit images as stored; transform() resizes and
 * normalises a batch on the compute device (mg_op_resize_normalize_u8).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "idx.h"
#include "mg/mg.h"

#define MNIST_CLASSES 10

/*
 * Default normalisation: Fashion-MNIST's training set, all 60000 x 784
 * pixels scaled to [0, 1]: mean 0.286041, population standard deviation
 * 0.353024 (computed exactly from the pixel histogram in double; the test
 * set gives 0.286849 / 0.352444). Plain MNIST users set 0.1307 / 0.3081.
 */
static const struct mg_option mnist_options[] = {
	MG_OPT_P("dir", "/usr/share/datasets/fashion-mnist",
		 "folder holding the four IDX files (default: Debian's "
		 "dataset-fashion-mnist)"),
	MG_OPT_S("train_images", "train-images-idx3-ubyte.gz",
		 "training images file in dir (the name without .gz is "
		 "accepted when only that exists)"),
	MG_OPT_S("train_labels", "train-labels-idx1-ubyte.gz",
		 "training labels file in dir"),
	MG_OPT_S("test_images", "t10k-images-idx3-ubyte.gz",
		 "test images file in dir"),
	MG_OPT_S("test_labels", "t10k-labels-idx1-ubyte.gz",
		 "test labels file in dir"),
	MG_OPT_I("image_size", "28", 8, 1024,
		 "side of the square model input: bilinear resize from the "
		 "stored 28x28 at transform time"),
	MG_OPT_F("mean", "0.28604", -1000, 1000,
		 "normalisation mean of pixels in [0, 1] (default: "
		 "Fashion-MNIST train)"),
	MG_OPT_F("std", "0.35302", 1e-6, 1000,
		 "normalisation standard deviation (default: Fashion-MNIST "
		 "train)"),
	MG_OPT_I("limit_train", "0", 0, 1e9,
		 "use only the first N training samples (0: all)"),
	MG_OPT_I("limit_test", "0", 0, 1e9,
		 "use only the first N test samples (0: all)"),
	MG_OPT_END,
};

struct mnist {
	struct idx_split split[2]; /* MG_SPLIT_TRAIN, MG_SPLIT_TEST */
	int64_t image_size;
	float mean, std;
};

static const char *split_name(int s)
{
	return s == MG_SPLIT_TRAIN ? "train" : "test";
}

/*
 * Resolve the file option key inside dir into buf: absolute names are
 * used as they are. When the file is absent, the same name with ".gz"
 * removed (or added) is tried, so unpacked copies work with the defaults.
 */
static int resolve_file(const struct mg_opts *o, const char *dir,
			const char *key, char *buf, size_t len)
{
	const char *name = mg_opt_str(o, key);
	int n;

	if (!name || !name[0])
		return mg_error("mnist: %s is empty", key);
	if (name[0] == '/')
		n = snprintf(buf, len, "%s", name);
	else
		n = snprintf(buf, len, "%s/%s", dir, name);
	if (n < 0 || (size_t)n >= len)
		return mg_error("mnist: %s: path too long", key);
	if (access(buf, F_OK) == 0)
		return 0;
	/* A symlink loop or a directory without search permission is not a
	 * missing file: say what it is. */
	if (errno != ENOENT && errno != ENOTDIR)
		return mg_error("mnist: %s: %s: %s", key, buf, strerror(errno));

	char alt[4096];
	size_t bl = strlen(buf);
	if (bl > 3 && strcmp(buf + bl - 3, ".gz") == 0)
		n = snprintf(alt, sizeof(alt), "%.*s", (int)(bl - 3), buf);
	else
		n = snprintf(alt, sizeof(alt), "%s.gz", buf);
	if (n >= 0 && (size_t)n < sizeof(alt) && (size_t)n < len &&
	    access(alt, F_OK) == 0) {
		memcpy(buf, alt, (size_t)n + 1);
		return 0;
	}
	return mg_error("mnist: %s: neither %s nor %s exists", key, buf, alt);
}

static void mnist_destroy(void *self)
{
	struct mnist *m = self;

	if (!m)
		return;
	idx_split_free(&m->split[0]);
	idx_split_free(&m->split[1]);
	free(m);
}

static int load(struct mnist *m, const struct mg_opts *o, const char *dir,
		int s, const char *img_key, const char *lbl_key,
		const char *limit_key)
{
	char img[4096], lbl[4096];

	if (resolve_file(o, dir, img_key, img, sizeof(img)) ||
	    resolve_file(o, dir, lbl_key, lbl, sizeof(lbl)))
		return -1;
	if (idx_load_split(img, lbl, MNIST_CLASSES, mg_opt_int(o, limit_key),
			   &m->split[s]))
		return mg_error_prefix("mnist: %s split", split_name(s));
	return 0;
}

static int mnist_create(const struct mg_opts *o, struct mg_ctx *ctx,
			void **self)
{
	struct mnist *m = calloc(1, sizeof(*m));
	const char *dir = mg_opt_str(o, "dir");

	(void)ctx;
	*self = NULL;
	if (!m)
		return mg_error("mnist: out of memory");
	m->image_size = mg_opt_int(o, "image_size");
	m->mean = (float)mg_opt_float(o, "mean");
	m->std = (float)mg_opt_float(o, "std");
	if (!dir || !dir[0]) {
		mnist_destroy(m);
		return mg_error("mnist: dir is empty");
	}
	if (load(m, o, dir, MG_SPLIT_TRAIN, "train_images", "train_labels",
		 "limit_train") ||
	    load(m, o, dir, MG_SPLIT_TEST, "test_images", "test_labels",
		 "limit_test")) {
		mnist_destroy(m);
		return -1;
	}
	const struct idx_split *tr = &m->split[0], *te = &m->split[1];
	if (tr->rows != te->rows || tr->cols != te->cols) {
		mg_error("mnist: train images are %" PRId64 "x%" PRId64
			 " but test images are %" PRId64 "x%" PRId64,
			 tr->rows, tr->cols, te->rows, te->cols);
		mnist_destroy(m);
		return -1;
	}
	mg_info("mnist: %s: %" PRId64 " train, %" PRId64 " test images of "
		"%" PRId64 "x%" PRId64 ", input %" PRId64 "x%" PRId64,
		dir, tr->count, te->count, tr->rows, tr->cols, m->image_size,
		m->image_size);
	*self = m;
	return 0;
}

static int64_t mnist_count(void *self, enum mg_split split)
{
	struct mnist *m = self;

	if (split != MG_SPLIT_TRAIN && split != MG_SPLIT_TEST)
		return mg_error("mnist: no split %d", (int)split);
	return m->split[split].count;
}

static int mnist_layout(void *self, struct mg_sample_layout *out)
{
	struct mnist *m = self;

	memset(out, 0, sizeof(*out));
	out->raw_dtype = MG_U8;
	out->raw_ndim = 3;
	out->raw_shape[0] = 1;
	out->raw_shape[1] = m->split[0].rows;
	out->raw_shape[2] = m->split[0].cols;
	out->label_len = 1;
	out->input_ndim = 3;
	out->input_shape[0] = 1;
	out->input_shape[1] = m->image_size;
	out->input_shape[2] = m->image_size;
	out->num_classes = MNIST_CLASSES;
	return 0;
}

/* Thread-safe: the data is read-only after create(). labels may be NULL
 * when the caller wants images only. */
static int mnist_read(void *self, enum mg_split split, const int64_t *idx,
		      int64_t n, void *raw, int32_t *labels)
{
	struct mnist *m = self;

	if (split != MG_SPLIT_TRAIN && split != MG_SPLIT_TEST)
		return mg_error("mnist: read: no split %d", (int)split);
	if (n < 0)
		return mg_error("mnist: read: negative count %" PRId64, n);
	if (n > 0 && (!idx || !raw))
		return mg_error("mnist: read: NULL index or output buffer");

	const struct idx_split *s = &m->split[split];
	const size_t sz = (size_t)(s->rows * s->cols);
	for (int64_t i = 0; i < n; i++) {
		if (idx[i] < 0 || idx[i] >= s->count)
			return mg_error("mnist: read: index %" PRId64
					" (position %" PRId64 " of %" PRId64
					") out of range [0, %" PRId64
					") for the %s split",
					idx[i], i, n, s->count,
					split_name(split));
		memcpy((uint8_t *)raw + (size_t)i * sz,
		       s->images + (size_t)idx[i] * sz, sz);
		if (labels)
			labels[i] = s->labels[idx[i]];
	}
	return 0;
}

static int mnist_transform(void *self, struct mg_ctx *ctx,
			   const struct mg_tensor *raw, struct mg_tensor *input)
{
	struct mnist *m = self;
	const struct idx_split *s = &m->split[0];

	if (raw->ndim != 4 || raw->shape[1] != 1 || raw->shape[2] != s->rows ||
	    raw->shape[3] != s->cols)
		return mg_error("mnist: transform: raw batch is not [n, 1, "
				"%" PRId64 ", %" PRId64 "]",
				s->rows, s->cols);
	if (input->ndim != 4 || input->shape[0] != raw->shape[0] ||
	    input->shape[1] != 1 || input->shape[2] != m->image_size ||
	    input->shape[3] != m->image_size)
		return mg_error("mnist: transform: input is not [%" PRId64
				", 1, %" PRId64 ", %" PRId64 "]",
				raw->shape[0], m->image_size, m->image_size);
	if (mg_op_resize_normalize_u8(ctx, raw, input, m->mean, m->std))
		return mg_error_prefix("mnist: transform");
	return 0;
}

static const struct mg_dataset_ops mnist_ops = {
	.count = mnist_count,
	.layout = mnist_layout,
	.read = mnist_read,
	.transform = mnist_transform,
};

static const struct mg_plugin mnist_plugin = {
	MG_PLUGIN_HEADER,
	.kind = MG_PLUGIN_DATASET,
	.name = "mnist",
	.version = "1.0",
	.description = "MNIST-format IDX images, plain or gzip (default: "
		       "Fashion-MNIST), resized on the device",
	.options = mnist_options,
	.create = mnist_create,
	.destroy = mnist_destroy,
	.ops = &mnist_ops,
};

MG_PLUGIN_DEFINE(mnist_plugin)
