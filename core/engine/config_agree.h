/*
 * config_agree.h - every rank of a job runs the same configuration
 * (config_agree.c).
 */
#ifndef MG_CONFIG_AGREE_H
#define MG_CONFIG_AGREE_H

#include <mg/comm.h>

#include "engine/session.h"

/* Collective, before any other: fails on every rank, naming the ranks
 * whose configuration or plugin builds differ from rank 0's and the
 * first keys that differ. 0 when all agree (or world is 1). */
int mg_config_agree(const struct mg_session *s, struct mg_comm *comm, int rank,
		    int world);

#endif
