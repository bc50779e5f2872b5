/*
 * crash_point.h - fault injection for the tests of a run's final writes
 * (tests/train/crash_points.sh): MG_TEST_CRASH_AT=NAME makes the process
 * _exit(99) right after the write point NAME, as a kill -9 there would;
 * MG_TEST_CRASH_AT=list prints every point's name, so the test
 * enumerates them all rather than a sample.
 */
#ifndef MG_ENGINE_CRASH_POINT_H
#define MG_ENGINE_CRASH_POINT_H

#include "mg_internal.h"

/* The exit status of an injected crash. */
#define MG_CRASH_STATUS 99

/* After write point `name` (one of crash_point.c's table): exit now when
 * MG_TEST_CRASH_AT names it. */
MG_INTERNAL void mg_crash_point(const char *name);
/* MG_TEST_CRASH_AT=list: print the names and return 1; an unknown name
 * is an error (a test's typo must not pass silently); else 0. */
MG_INTERNAL int mg_crash_points_check(void);

#endif
