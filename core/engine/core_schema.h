/*
 * core_schema.h - the keys the core itself understands: [run], [optimizer],
 * [profile], and the name/path keys of plugin sections. ([sweep] is
 * free-form: its keys name other sections' keys; see analysis/sweep.c.)
 */
#ifndef MG_CORE_SCHEMA_H
#define MG_CORE_SCHEMA_H

#include "mg_internal.h"

#include "mg/mg.h"

MG_INTERNAL extern const struct mg_option mg_run_schema[];
MG_INTERNAL extern const struct mg_option mg_optimizer_schema[];
MG_INTERNAL extern const struct mg_option mg_profile_schema[];
MG_INTERNAL extern const struct mg_option mg_plugin_section_schema[];

/* run.out_dir, or "runs" (relative to the current directory, as other
 * training tools put their runs) when the file leaves it empty. Other
 * relative path defaults (a dataset's dir = ".") stay relative to the
 * INI file's folder, where the files it names are. */
MG_INTERNAL const char *mg_run_out_dir(const struct mg_opts *run);

/* Index of run.precision / run.device choices. */
enum { MG_PREC_FP32 = 0, MG_PREC_FP64, MG_PREC_FP16, MG_PREC_BF16 };
enum { MG_DEVICE_CPU = 0, MG_DEVICE_CUDA = 1 };

#endif
