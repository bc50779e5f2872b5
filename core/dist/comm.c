/*
 * comm.c - the communicator factory: one rank talks to itself, CUDA ranks
 * talk through NCCL (linked into libmg), CPU ranks through MPI. The MPI
 * backend is a separate module (libmg_comm_mpi.so next to libmg) loaded
 * only when a CPU job has several ranks, so machines without Open MPI
 * still run every single-rank and GPU job.
 */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm_internal.h"

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mg_comm_mpi_module mpi_mod;
static bool mpi_loaded;

/*
 * Open the MPI module from libmg's own directory (build tree or <libdir>
 * of an installation), found with dladdr() on a libmg symbol like the
 * plugin loader does. RTLD_GLOBAL: Open MPI dlopens its own components,
 * which expect libmpi's symbols to be global.
 */
static int mpi_module_open(void)
{
#ifndef MG_HAVE_MPI
	return mg_error("this mgrun was built without MPI (CMake's "
			"find_package(MPI) found none), so CPU ranks cannot "
			"communicate: install Open MPI (libopenmpi-dev) and "
			"rebuild, or run on one rank");
#else
	Dl_info info;
	char lib[PATH_MAX], path[PATH_MAX + 64];
	if (!dladdr((void *)mg_error, &info) || !info.dli_fname ||
	    !realpath(info.dli_fname, lib))
		return mg_error("cannot locate libmg to find %s next to it",
				MG_COMM_MPI_MODULE);
	snprintf(path, sizeof path, "%s/%s", dirname(lib), MG_COMM_MPI_MODULE);
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!h)
		return mg_error("cannot load the MPI communicator %s: %s", path,
				dlerror());
	mpi_mod.create =
		(mg_comm_mpi_create_fn)dlsym(h, MG_COMM_MPI_CREATE_SYM);
	mpi_mod.bcast = (mg_comm_mpi_bcast_fn)dlsym(h, MG_COMM_MPI_BCAST_SYM);
	if (!mpi_mod.create || !mpi_mod.bcast) {
		dlclose(h);
		return mg_error("%s lacks %s or %s (a module from another "
				"mgrun build?)",
				path, MG_COMM_MPI_CREATE_SYM,
				MG_COMM_MPI_BCAST_SYM);
	}
	/* The handle stays open for the life of the process: MPI cannot be
	 * initialised twice, so the module must not be unloaded either. */
	return 0;
#endif
}

const struct mg_comm_mpi_module *mg_comm_mpi_module(void)
{
	pthread_mutex_lock(&mpi_lock);
	int rc = mpi_loaded ? 0 : mpi_module_open();
	if (!rc)
		mpi_loaded = true;
	pthread_mutex_unlock(&mpi_lock);
	return rc ? NULL : &mpi_mod;
}

struct mg_comm *mg_comm_create(const struct mg_dist_env *e,
			       struct mg_device *dev)
{
	struct mg_comm *c = NULL;
	if (e->world < 1 || e->rank < 0 || e->rank >= e->world) {
		mg_error("communicator: rank %d of %d is not a valid place in "
			 "a job",
			 e->rank, e->world);
		return NULL;
	}
	if (e->world == 1) {
		c = mg_comm_self();
		if (!c)
			mg_error("communicator: out of memory");
		return c;
	}
	if (dev->kind == MG_DEV_CUDA) {
#ifdef MG_HAVE_NCCL
		c = mg_comm_nccl_create(e, dev);
#else
		mg_error("rank %d of %d runs on CUDA, but this mgrun was built "
			 "without NCCL (nccl.h and libnccl were not found next "
			 "to the CUDA toolkit): GPU ranks cannot communicate",
			 e->rank, e->world);
#endif
	} else {
		if (!e->mpi) {
			mg_error("rank %d of %d (from %s): CPU ranks "
				 "communicate "
				 "through MPI: start mgrun under an MPI "
				 "launcher (mpirun -np N mgrun ...)",
				 e->rank, e->world, e->source);
			return NULL;
		}
		const struct mg_comm_mpi_module *m = mg_comm_mpi_module();
		if (m && m->create(e, &c))
			c = NULL;
	}
	if (!c) {
		mg_error_prefix("communicator for rank %d of %d", e->rank,
				e->world);
		return NULL;
	}
	if (c->rank != e->rank || c->world != e->world) {
		mg_error("communicator: %s says this is rank %d of %d, the "
			 "environment (%s) says rank %d of %d",
			 c->backend, c->rank, c->world, e->source, e->rank,
			 e->world);
		c->destroy(c);
		return NULL;
	}
	return c;
}
