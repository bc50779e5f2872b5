/*
 * comm_self.c - the communicator of a one-rank job: every collective is
 * the identity (or a copy), so strategies need no special case.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm_internal.h"

static int self_all_reduce(struct mg_comm *c, void *buf, int64_t count,
			   enum mg_dtype dt, enum mg_reduce_op op)
{
	(void)c, (void)buf, (void)count, (void)dt, (void)op;
	return 0;
}

static int self_reduce_scatter(struct mg_comm *c, const void *send, void *recv,
			       int64_t recv_count, enum mg_dtype dt,
			       enum mg_reduce_op op)
{
	(void)c, (void)op;
	if (send != recv)
		memmove(recv, send, (size_t)recv_count * mg_dtype_size(dt));
	return 0;
}

static int self_all_gather(struct mg_comm *c, const void *send, void *recv,
			   int64_t send_count, enum mg_dtype dt)
{
	(void)c;
	if (send != recv)
		memmove(recv, send, (size_t)send_count * mg_dtype_size(dt));
	return 0;
}

static int self_broadcast(struct mg_comm *c, void *buf, int64_t count,
			  enum mg_dtype dt, int root)
{
	(void)c, (void)buf, (void)count, (void)dt, (void)root;
	return 0;
}

static int self_nop(struct mg_comm *c)
{
	(void)c;
	return 0;
}

static void self_destroy(struct mg_comm *c)
{
	free(c);
}

/* A split of one rank is that rank alone again. */
static struct mg_comm *self_split(struct mg_comm *c, int color, int key)
{
	(void)c, (void)key;
	if (color < 0) {
		mg_error("self: split: color %d is negative", color);
		return NULL;
	}
	struct mg_comm *s = mg_comm_self();
	if (!s)
		mg_error("self: split: out of memory");
	return s;
}

/* Nothing crosses a process boundary, so there is nothing to account. */
static int self_collect(struct mg_comm *c, struct mg_comm_stats *st)
{
	(void)c;
	memset(st, 0, sizeof *st);
	return 0;
}

static void self_capture(struct mg_comm *c, enum mg_comm_capture what)
{
	(void)c, (void)what;
}

/* No peers to stop: flush what was printed and leave. */
static void self_abort(struct mg_comm *c, int code)
{
	(void)c;
	fflush(NULL);
	_exit(code);
}

struct mg_comm *mg_comm_self(void)
{
	struct mg_comm *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->rank = 0;
	c->world = 1;
	c->backend = "self";
	c->all_reduce = self_all_reduce;
	c->reduce_scatter = self_reduce_scatter;
	c->all_gather = self_all_gather;
	c->broadcast = self_broadcast;
	c->barrier = self_nop;
	c->wait = self_nop;
	c->destroy = self_destroy;
	c->all_reduce_host = self_all_reduce;
	c->split = self_split;
	c->collect = self_collect;
	c->capture = self_capture;
	c->abort = self_abort;
	c->supports = mg_comm_supports_std;
	return c;
}
