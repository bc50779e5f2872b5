/*
 * signals.h - SIGINT/SIGTERM during a training run (signals.c).
 */
#ifndef MG_SIGNALS_H
#define MG_SIGNALS_H

/* Catch SIGINT and SIGTERM for the run: the first asks it to stop after
 * the current step; a second one ends the process at once. Signals the
 * caller ignored stay ignored. */
void mg_stop_install(void);
/* Put back what was there before mg_stop_install(). */
void mg_stop_restore(void);
/* The first of the signals that arrived since mg_stop_install(), or 0. */
int mg_stop_signal(void);
/* "SIGINT", "SIGTERM", else "signal N" (a static string). */
const char *mg_stop_signal_name(int sig);

#endif
