/*
 * ops.h - device-dispatched operations. Each op runs on the device of the
 * context it is given; every op has a CPU implementation (the reference,
 * run in CI) and, where the build has CUDA, a CUDA one tested against it.
 */
#ifndef MG_OPS_H
#define MG_OPS_H

#include "ops_image.h"
#include "ops_llm.h"
#include "ops_nn.h"
#include "ops_quant.h"

#endif
