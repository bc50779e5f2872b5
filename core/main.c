/*
 * main.c - the mgrun executable: everything lives in libmg so tests and
 * embedders can drive the same code.
 */
#include <stdlib.h>
#include <unistd.h>

int mg_main(int argc, char **argv);

int main(int argc, char **argv)
{
	/*
	 * OpenMP threads spin after each parallel region by default. The CPU
	 * ops alternate parallel regions with serial OpenBLAS calls, and the
	 * spinning threads then take the cores from them (measured: 20
	 * training steps in 2.6 s instead of 1.6 s on 2 cores). libgomp
	 * reads its wait policy once, before main(), so set it and start
	 * again; a user's own setting is left alone.
	 */
	if (!getenv("OMP_WAIT_POLICY")) {
		setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
		execv("/proc/self/exe", argv);
		/* exec failed: run on with the default policy */
	}
	return mg_main(argc, argv);
}
