/*
 * comm_self.c - the communicator of a one-rank job: every collective is
 * the identity (or a copy), so strategies need no special case.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/trainer.h"

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
	return c;
}
