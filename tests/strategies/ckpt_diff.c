/*
 * ckpt_diff.c - compare the tensors of two mgrun checkpoints whose names
 * start with a prefix ("param/" by default): the oracle of the strategy
 * equivalence tests. Prints the largest differences and exits 1 when a
 * tensor differs by more than rtol relative to the tensor's largest
 * magnitude (so near-zero elements do not dominate), or when the two
 * files do not hold the same tensors.
 *
 * usage: ckpt_diff A B RTOL [PREFIX]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mg/log.h"
#include "runtime/safetensors.h"

static double value(const struct mg_st_entry *e, int64_t i)
{
	switch (e->dtype) {
	case MG_F64:
		return ((const double *)e->data)[i];
	case MG_F32:
		return ((const float *)e->data)[i];
	default:
		return NAN;
	}
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: ckpt_diff A B RTOL [PREFIX]\n");
		return 2;
	}
	const char *prefix = argc > 4 ? argv[4] : "param/";
	double rtol = atof(argv[3]), worst = 0;
	const char *worst_name = "-";
	struct mg_st_file a, b;
	if (mg_st_open(&a, argv[1]) || mg_st_open(&b, argv[2])) {
		fprintf(stderr, "ckpt_diff: %s\n", mg_last_error());
		return 2;
	}
	int compared = 0, bad = 0;
	size_t plen = strlen(prefix);
	for (int k = 0; k < a.nentries; k++) {
		const struct mg_st_entry *ea = &a.entries[k];
		if (strncmp(ea->name, prefix, plen))
			continue;
		const struct mg_st_entry *eb = mg_st_find(&b, ea->name);
		int64_t n = 1;
		for (int d = 0; d < ea->ndim; d++)
			n *= ea->shape[d];
		if (!eb || eb->ndim != ea->ndim ||
		    memcmp(eb->shape, ea->shape,
			   (size_t)ea->ndim * sizeof *ea->shape)) {
			fprintf(stderr,
				"ckpt_diff: %s: missing or shaped "
				"differently in %s\n",
				ea->name, argv[2]);
			bad = 1;
			continue;
		}
		double scale = 0, diff = 0;
		for (int64_t i = 0; i < n; i++) {
			double x = value(ea, i), y = value(eb, i);
			if (fabs(x) > scale)
				scale = fabs(x);
			if (!(fabs(x - y) <= diff))
				diff = fabs(x - y);
		}
		double rel = scale > 0 ? diff / scale : diff;
		if (!(rel <= worst)) {
			worst = rel;
			worst_name = ea->name;
		}
		if (!(rel <= rtol)) {
			fprintf(stderr,
				"ckpt_diff: %s differs: max |a-b| %.3g, "
				"relative to max |a| %.3g (limit %.3g)\n",
				ea->name, diff, rel, rtol);
			bad = 1;
		}
		compared++;
	}
	for (int k = 0; k < b.nentries; k++)
		if (!strncmp(b.entries[k].name, prefix, plen) &&
		    !mg_st_find(&a, b.entries[k].name)) {
			fprintf(stderr, "ckpt_diff: %s only in %s\n",
				b.entries[k].name, argv[2]);
			bad = 1;
		}
	printf("ckpt_diff: %d tensors '%s*', largest relative difference "
	       "%.3g (%s), limit %.3g: %s\n",
	       compared, prefix, worst, worst_name, rtol,
	       bad || !compared ? "DIFFERENT" : "same");
	mg_st_close(&a);
	mg_st_close(&b);
	return bad || !compared;
}
