/*
 * nvtx.c - NVTX ranges (see nvtx.h).
 */
#include "runtime/nvtx.h"

#ifdef MG_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

static bool nvtx_on;

void mg_nvtx_enable(bool on)
{
	nvtx_on = on;
}

bool mg_nvtx_enabled(void)
{
	return nvtx_on;
}

void mg_nvtx_push(const char *name)
{
#ifdef MG_HAVE_CUDA
	if (nvtx_on)
		nvtxRangePushA(name);
#else
	(void)name;
#endif
}

void mg_nvtx_pop(void)
{
#ifdef MG_HAVE_CUDA
	if (nvtx_on)
		nvtxRangePop();
#endif
}
