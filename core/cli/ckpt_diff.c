/*
 * ckpt_diff.c - `mgrun ckpt-diff A B [--tolerance X] [--prefix P]`:
 * compare the tensors of two mgrun checkpoints whose names start with a
 * prefix ("param/" by default), the oracle of the strategy equivalence
 * tests, installed so a third party proves its strategy equal to an
 * in-tree one the way the project's own tests do. Prints the largest
 * differences and exits 1 when a tensor differs by more than the
 * tolerance relative to the tensor's largest magnitude (so near-zero
 * elements do not dominate), or when the two files do not hold the same
 * tensors; 2 when a file cannot be read. The tests' ckpt_diff program
 * (tests/strategies) is the same comparison with positional arguments.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/ckpt_diff.h"
#include "mg/log.h"
#include "mg/tensor.h"
#include "runtime/safetensors.h"

static double value(const struct mg_st_entry *e, int64_t i)
{
	switch (e->dtype) {
	case MG_F64:
		return ((const double *)e->data)[i];
	case MG_F32:
		return ((const float *)e->data)[i];
	case MG_BF16:
		return mg_bf16_to_float(((const uint16_t *)e->data)[i]);
	case MG_F16:
		return mg_half_to_float(((const uint16_t *)e->data)[i]);
	default:
		return NAN;
	}
}

int mg_ckpt_diff(const char *path_a, const char *path_b, double rtol,
		 const char *prefix)
{
	double worst = 0;
	const char *worst_name = "-";
	struct mg_st_file a, b;
	if (mg_st_open(&a, path_a) || mg_st_open(&b, path_b)) {
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
				ea->name, path_b);
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
				b.entries[k].name, path_b);
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

static int usage(FILE *f)
{
	fputs("usage: mgrun ckpt-diff A B [--tolerance X] [--prefix P]\n"
	      "  compare two checkpoints' tensors named P* (default param/;\n"
	      "  optim/ for the optimizer state, '' for every tensor): exit 0\n"
	      "  when each tensor's largest difference, relative to its\n"
	      "  largest magnitude, is at most X (default 0: equal bit for\n"
	      "  bit), 1 when not, 2 when a file cannot be read\n",
	      f);
	return f == stdout ? 0 : 2;
}

int mg_ckpt_diff_main(int argc, char **argv)
{
	const char *files[2] = {NULL, NULL}, *prefix = "param/";
	double rtol = 0;
	int nfiles = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return usage(stdout);
		if (!strcmp(a, "--prefix") && i + 1 < argc) {
			prefix = argv[++i];
		} else if (!strcmp(a, "--tolerance") && i + 1 < argc) {
			const char *v = argv[++i];
			char *end = NULL;
			rtol = strtod(v, &end);
			if (!*v || *end || !(rtol >= 0)) {
				fprintf(stderr,
					"mgrun ckpt-diff: --tolerance %s: not "
					"a number >= 0\n",
					v);
				return 2;
			}
		} else if (a[0] != '-' && nfiles < 2) {
			files[nfiles++] = a;
		} else {
			return usage(stderr);
		}
	}
	if (nfiles != 2)
		return usage(stderr);
	return mg_ckpt_diff(files[0], files[1], rtol, prefix);
}
