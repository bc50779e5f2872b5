/*
 * st_setmeta.c - test helper: rewrite one __metadata__ entry of a
 * safetensors file (st_setmeta FILE KEY VALUE), or drop it
 * (st_setmeta FILE KEY), keeping every tensor.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/runtime.h"
#include "runtime/safetensors.h"

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: st_setmeta FILE KEY [VALUE]\n");
		return 2;
	}
	struct mg_st_file f;
	struct mg_st_writer w;
	int rc = mg_st_open(&f, argv[1]);
	mg_st_writer_init(&w);
	for (int i = 0; !rc && i < f.nmeta; i++)
		if (strcmp(f.meta_keys[i], argv[2]))
			rc = mg_st_writer_meta(&w, f.meta_keys[i],
					       f.meta_vals[i]);
	if (!rc && argc == 4)
		rc = mg_st_writer_meta(&w, argv[2], argv[3]);
	for (int i = 0; !rc && i < f.nentries; i++) {
		const struct mg_st_entry *e = &f.entries[i];
		rc = mg_st_writer_add(&w, e->name, e->dtype, e->ndim, e->shape,
				      e->data);
	}
	if (!rc)
		rc = mg_st_writer_save(&w, argv[1]);
	if (rc)
		fprintf(stderr, "st_setmeta: %s\n", mg_last_error());
	mg_st_writer_free(&w);
	mg_st_close(&f);
	return rc != 0;
}
