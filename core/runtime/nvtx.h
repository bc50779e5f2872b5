/*
 * nvtx.h - NVTX ranges for Nsight Systems: the phases of mg_timer_start/
 * stop and one range per training step, when [profile] nvtx is on. With
 * CUDA these are NVTX3's header-only calls (nearly free while no tool is
 * attached); without CUDA they do nothing.
 */
#ifndef MG_NVTX_H
#define MG_NVTX_H

#include <stdbool.h>

/* Turn the ranges on or off for this process (off until called). */
void mg_nvtx_enable(bool on);
bool mg_nvtx_enabled(void);
/* Open and close a range on the calling thread (no-ops when off). */
void mg_nvtx_push(const char *name);
void mg_nvtx_pop(void);

#endif
