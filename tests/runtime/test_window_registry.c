/*
 * test_window_registry.c - core/runtime/buf_window.c compiled in alone
 * (its functions are private to libmg): the registry of buffers lent
 * from communicators' windows.
 *   - take finds a recorded buffer once, with its communicator;
 *   - orphan leaves a destroyed communicator's buffers known (mg_buf_free
 *     must not hand them to free()) but no longer live, with NULL owner;
 *   - live counts what is lent and not handed back, which keeps the
 *     trainer from capturing steps into CUDA graphs (trainer.c).
 */
#include "../common/test_util.h"
#include "runtime/runtime.h"

int main(void)
{
	struct mg_comm a = {.world = 2, .backend = "a"};
	struct mg_comm b = {.world = 2, .backend = "b"};
	char x, y, z, other;
	struct mg_comm *owner = &a;

	CHECK(mg_buf_windows_live() == 0);
	CHECK(!mg_buf_window_take(&x, &owner)); /* nothing lent yet */
	CHECK(!mg_buf_window_add(&x, &a) && !mg_buf_window_add(&y, &a) &&
	      !mg_buf_window_add(&z, &b));
	CHECK(mg_buf_windows_live() == 3);

	CHECK(!mg_buf_window_take(&other, &owner) && owner == &a);
	CHECK(mg_buf_window_take(&z, &owner) == 1 && owner == &b);
	CHECK(!mg_buf_window_take(&z, &owner)); /* once only */
	CHECK(mg_buf_windows_live() == 2);

	/* a destroyed first: its buffers are orphans, known, not live */
	mg_buf_windows_orphan(&a);
	CHECK(mg_buf_windows_live() == 0);
	CHECK(mg_buf_window_take(&y, &owner) == 1 && owner == NULL);
	CHECK(mg_buf_window_take(&x, &owner) == 1 && owner == NULL);
	CHECK(!mg_buf_window_take(&x, &owner));
	printf("%s\n", failures ? "FAILED" : "window registry: ok");
	return failures != 0;
}
