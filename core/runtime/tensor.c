/*
 * tensor.c - dtype tables and tensor descriptor helpers.
 */
#include <string.h>

#include "runtime/runtime.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[MG_DTYPE_COUNT] = {
	[MG_F32] = {"F32", 4},	 [MG_F64] = {"F64", 8}, [MG_F16] = {"F16", 2},
	[MG_BF16] = {"BF16", 2}, [MG_U8] = {"U8", 1},	[MG_I32] = {"I32", 4},
	[MG_I64] = {"I64", 8},	 [MG_NF4] = {"NF4", 0}, [MG_INT4] = {"INT4", 0},
};

size_t mg_dtype_size(enum mg_dtype dt)
{
	return (unsigned)dt < MG_DTYPE_COUNT ? dtypes[dt].size : 0;
}

const char *mg_dtype_name(enum mg_dtype dt)
{
	if (dt == MG_DTYPE_AUTO)
		return "auto";
	return (unsigned)dt < MG_DTYPE_COUNT ? dtypes[dt].name : "?";
}

int64_t mg_tensor_numel(const struct mg_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

size_t mg_tensor_bytes(const struct mg_tensor *t)
{
	int64_t n = mg_tensor_numel(t);
	if (t->dtype == MG_NF4) /* codes, scales and padding: mg/nf4.h */
		return mg_nf4_layout(n).bytes;
	return (size_t)n * mg_dtype_size(t->dtype);
}

struct mg_tensor mg_tensor_make(void *data, enum mg_dtype dt,
				enum mg_device_kind dev, int ndim,
				const int64_t *shape)
{
	struct mg_tensor t;
	memset(&t, 0, sizeof t);
	t.data = data;
	t.dtype = dt;
	t.device = dev;
	t.ndim = ndim;
	for (int i = 0; i < ndim && i < MG_MAX_DIMS; i++)
		t.shape[i] = shape[i];
	return t;
}

const char *mg_mem_cat_name(enum mg_mem_cat c)
{
	static const char *const names[MG_MEM_CAT_COUNT] = {
		"params",      "grads", "optimizer", "gather",
		"activations", "input", "other",     "libraries"};
	return (unsigned)c < MG_MEM_CAT_COUNT ? names[c] : "?";
}
