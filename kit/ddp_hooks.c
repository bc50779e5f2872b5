/*
 * ddp_hooks.c - the built-in communication hooks of the DDP core beyond
 * the plain all-reduce (kit/ddp.h): bf16 compression, as PyTorch's
 * bf16_compress_hook does it. Kept apart from ddp.c so a hook reads as
 * the example of writing one: state in d->hook_state, compress and issue
 * in launch, decompress in finish.
 */
#include <stdlib.h>

#include "mg/kit/ddp.h"

struct bf16_state {
	struct mg_buf scratch; /* BF16 copies of the non-BF16 buckets */
	int64_t *off;	       /* per bucket: element offset in scratch */
};

/* One scratch buffer for every bucket that needs compressing; refuse a
 * communicator that cannot reduce BF16 with a message naming it. */
static int bf16_setup(struct mg_ddp *d)
{
	struct mg_comm *c = d->ctx->comm;
	if (!c->supports(c, MG_COLL_ALL_REDUCE, MG_BF16, MG_REDUCE_SUM))
		return mg_error("the %s communicator cannot sum BF16 buffers",
				c->backend);
	struct bf16_state *st = calloc(1, sizeof *st);
	if (!st)
		return mg_error("out of memory");
	d->hook_state = st;
	st->off = calloc((size_t)d->nbuckets + 1, sizeof *st->off);
	if (!st->off)
		return mg_error("out of memory");
	int64_t total = 0;
	for (int b = 0; b < d->nbuckets; b++) {
		st->off[b] = total;
		if (d->buckets[b].dtype != MG_BF16)
			total += d->buckets[b].n;
	}
	if (total &&
	    mg_buf_alloc(d->ctx, &st->scratch,
			 (size_t)total * mg_dtype_size(MG_BF16), MG_MEM_GRADS))
		return -1;
	return 0;
}

static void *bf16_at(struct mg_ddp *d, struct mg_ddp_bucket *b)
{
	struct bf16_state *st = d->hook_state;
	return (char *)st->scratch.ptr +
	       (size_t)st->off[b - d->buckets] * mg_dtype_size(MG_BF16);
}

static int bf16_launch(struct mg_ddp *d, struct mg_ddp_bucket *b)
{
	struct mg_comm *c = d->ctx->comm;
	if (b->dtype == MG_BF16)
		return c->all_reduce(c, b->data, b->n, MG_BF16, MG_REDUCE_SUM);
	void *z = bf16_at(d, b);
	if (mg_op_convert(d->ctx, z, MG_BF16, b->data, b->dtype, b->n))
		return -1;
	return c->all_reduce(c, z, b->n, MG_BF16, MG_REDUCE_SUM);
}

static int bf16_finish(struct mg_ddp *d, struct mg_ddp_bucket *b)
{
	if (b->dtype == MG_BF16)
		return 0;
	return mg_op_convert(d->ctx, b->data, b->dtype, bf16_at(d, b), MG_BF16,
			     b->n);
}

static void bf16_destroy(struct mg_ddp *d)
{
	struct bf16_state *st = d->hook_state;
	if (!st)
		return;
	mg_buf_free(d->ctx, &st->scratch);
	free(st->off);
	free(st);
	d->hook_state = NULL;
}

const struct mg_ddp_comm_hook mg_ddp_hook_bf16 = {
	.name = "bf16",
	.setup = bf16_setup,
	.launch = bf16_launch,
	.finish = bf16_finish,
	.destroy = bf16_destroy,
};
