/*
 * ckpt_diff.c - the strategy tests' checkpoint comparison with positional
 * arguments (the scripts' interface); the comparison itself is
 * `mgrun ckpt-diff`'s (core/cli/ckpt_diff.c).
 *
 * usage: ckpt_diff A B RTOL [PREFIX]
 */
#include <stdio.h>
#include <stdlib.h>

#include "cli/ckpt_diff.h"

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: ckpt_diff A B RTOL [PREFIX]\n");
		return 2;
	}
	return mg_ckpt_diff(argv[1], argv[2], atof(argv[3]),
			    argc > 4 ? argv[4] : "param/");
}
