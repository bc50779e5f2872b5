/*
 * test_buf_window.c - mg_buf_alloc_comm's bookkeeping, on a fake
 * communicator whose windows are malloc'd host memory (NCCL's real ones
 * need GPUs; tests/strategies runs fsdp's copy_engine on CPU ranks, where
 * the MPI communicator has none):
 *   - a window comes from window_alloc, is accounted under its category,
 *     and mg_buf_free hands it back through window_free, never free();
 *   - no window_alloc, or one that fails, gives ordinary memory and says
 *     so through *windowed.
 * Run under ASan in CI: a window freed twice or by free() would show.
 */
#include <stdlib.h>
#include <string.h>

#include "../common/test_util.h"
#include "runtime/runtime.h" /* struct mg_stats, to read the accounting */

struct fake {
	int allocs, frees;
	bool fail;
	void *live[8];
};
static struct fake fk;

static int fake_alloc(struct mg_comm *c, size_t bytes, void **ptr)
{
	(void)c;
	if (fk.fail)
		return mg_error("fake: no windows today");
	*ptr = malloc(bytes);
	fk.live[fk.allocs++] = *ptr;
	return 0;
}

static void fake_free(struct mg_comm *c, void *ptr)
{
	(void)c;
	for (int i = 0; i < fk.allocs; i++)
		if (fk.live[i] == ptr) {
			fk.live[i] = NULL;
			free(ptr);
			fk.frees++;
			return;
		}
	fail("window_free of %p, which window_alloc never lent", ptr);
}

int main(void)
{
	struct mg_device dev = {.kind = MG_DEV_CPU, .threads = 1};
	struct mg_stats stats;
	memset(&stats, 0, sizeof stats);
	struct mg_ctx ctx = {.struct_size = sizeof ctx,
			     .dev = &dev,
			     .world = 1,
			     .stats = &stats};
	struct mg_comm comm = {.world = 1,
			       .backend = "fake",
			       .window_alloc = fake_alloc,
			       .window_free = fake_free};
	struct mg_buf a, b, c;
	bool w = false;

	CHECK(!mg_buf_alloc_comm(&ctx, &comm, &a, 1000, MG_MEM_GATHER, &w));
	CHECK(w && fk.allocs == 1 && a.ptr == fk.live[0] && a.bytes == 1000);
	CHECK(stats.mem_cur[MG_MEM_GATHER] == 1000);
	memset(a.ptr, 1, a.bytes);
	CHECK(!mg_buf_alloc_comm(&ctx, &comm, &b, 24, MG_MEM_PARAMS, NULL));
	mg_buf_free(&ctx, &a);
	CHECK(fk.frees == 1 && a.ptr == NULL);
	CHECK(stats.mem_cur[MG_MEM_GATHER] == 0);

	mg_buf_free(&ctx, &b);
	CHECK(fk.frees == 2 && b.ptr == NULL);
	CHECK(stats.mem_cur[MG_MEM_PARAMS] == 0);

	/* a failing window_alloc, and a communicator without windows */
	fk.fail = true;
	CHECK(!mg_buf_alloc_comm(&ctx, &comm, &c, 64, MG_MEM_GATHER, &w));
	CHECK(!w && c.ptr && fk.allocs == 2);
	mg_buf_free(&ctx, &c); /* free(): ASan would object to a window */
	struct mg_comm plain = {.world = 1, .backend = "plain"};
	CHECK(!mg_buf_alloc_comm(&ctx, &plain, &c, 64, MG_MEM_GATHER, &w));
	CHECK(!w && c.ptr);
	mg_buf_free(&ctx, &c);
	CHECK(fk.frees == 2);
	printf("%s\n",
	       failures ? "FAILED" : "buffers in communicator windows: ok");
	return failures != 0;
}
