/*
 * ops_tune.h - run-wide numerical modes of the ops that the engine sets
 * from the configuration (not per call), through the dispatch layer so
 * the engine never reaches into a backend's own knobs.
 */
#ifndef MG_OPS_TUNE_H
#define MG_OPS_TUNE_H

#include <stdbool.h>

#include "mg/ctx.h"

/* run.tf32: allow (or forbid) TF32 tensor-core arithmetic in the fp32
 * convolutions and matrix products of ctx's device. The CPU has no such
 * mode and computes fp32 exactly: asking it to allow TF32 is an error,
 * forbidding it succeeds. Returns 0 or -1 (error set). */
int mgo_allow_tf32(struct mg_ctx *ctx, bool on);

#endif
