/*
 * buf_window.c - which buffers live in a communicator's windows
 * (mg_buf_alloc_comm). struct mg_buf has no room to say so (its size is
 * ABI), so their addresses are kept here: mg_buf_free hands them back to
 * their communicator, and a communicator destroyed first marks its own
 * as orphans (it released them itself). Apart from buf.c so that the
 * communicator's tests, which compile comm_nccl.c in, can link it alone.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/runtime.h"

struct window {
	void *ptr;
	struct mg_comm *c; /* NULL: orphaned */
};
static struct window *windows;
static int nwindows;
/* Windows ever lent: mg_buf_free asks about every buffer it frees, and
 * runs without copy-engine windows (nearly all) skip the lock. */
static atomic_int ever;
static pthread_mutex_t windows_lock = PTHREAD_MUTEX_INITIALIZER;

int mg_buf_window_add(void *ptr, struct mg_comm *c)
{
	pthread_mutex_lock(&windows_lock);
	struct window *w = realloc(windows, (size_t)(nwindows + 1) * sizeof *w);
	if (w) {
		windows = w;
		windows[nwindows++] = (struct window){ptr, c};
		atomic_store(&ever, 1);
	}
	pthread_mutex_unlock(&windows_lock);
	return w ? 0 : -1;
}

int mg_buf_window_take(void *ptr, struct mg_comm **c)
{
	int found = 0;
	if (!atomic_load(&ever))
		return 0;
	pthread_mutex_lock(&windows_lock);
	for (int i = 0; i < nwindows; i++)
		if (windows[i].ptr == ptr) {
			*c = windows[i].c;
			windows[i] = windows[--nwindows];
			found = 1;
			break;
		}
	pthread_mutex_unlock(&windows_lock);
	return found;
}

void mg_buf_windows_orphan(const struct mg_comm *c)
{
	pthread_mutex_lock(&windows_lock);
	for (int i = 0; i < nwindows; i++)
		if (windows[i].c == c)
			windows[i].c = NULL;
	pthread_mutex_unlock(&windows_lock);
}

int mg_buf_windows_live(void)
{
	int n = 0;
	if (!atomic_load(&ever))
		return 0;
	pthread_mutex_lock(&windows_lock);
	for (int i = 0; i < nwindows; i++)
		n += windows[i].c != NULL;
	pthread_mutex_unlock(&windows_lock);
	return n;
}
