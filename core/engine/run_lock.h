/*
 * run_lock.h - one mgrun process at a time per run directory (run_lock.c);
 * exported to the executable for the sweep directory's lock (sweep.c).
 */
#ifndef MG_RUN_LOCK_H
#define MG_RUN_LOCK_H

#include <stdbool.h>

#include "mg_internal.h"

struct mg_run_lock {
	int fd;	   /* the lock file, open while held */
	bool held; /* (a zeroed struct holds nothing) */
};

/* The file in the run directory that holds the lock and its owner. */
#define MG_RUN_LOCK_FILE "mgrun.lock"

/* Take run_dir's lock, or fail naming the process that holds it. */
MG_INTERNAL int mg_run_lock_take(struct mg_run_lock *l, const char *run_dir);
/* Release it (nothing when not held). */
MG_INTERNAL void mg_run_lock_release(struct mg_run_lock *l);

#endif
