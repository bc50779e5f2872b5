/*
 * mg.h - everything a plugin needs: include this one header.
 */
#ifndef MG_MG_H
#define MG_MG_H

#include "abi.h"
#include "ckpt.h"
#include "comm.h"
#include "ctx.h"
#include "dataset.h"
#include "log.h"
#include "model.h"
#include "nf4.h"
#include "ops.h"
#include "optim.h"
#include "options.h"
#include "rng.h"
#include "strategy.h"
#include "tensor.h"
#include "tensor_file.h"

#endif
