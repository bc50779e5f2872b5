/*
 * mg_internal.h - MG_INTERNAL: libmg symbols exported for the mgrun
 * executable, not for plugins.
 *
 * libmg builds with hidden visibility; MG_EXPORT (include/mg) marks the
 * plugin ABI. The command line (core/cli) and the analysis library
 * (core/analysis: sweeps, compare) live in the executable, outside libmg,
 * and need a few of its internals: the configuration parser and
 * diagnostics, sessions, the plugin search path, the launcher, mg_train
 * and the series helpers. Those declarations carry MG_INTERNAL so that they
 * are exported too. They are not part of the plugin ABI: no compatibility
 * promise, plugins must not use them, and the list should stay short (add a
 * symbol here only when the executable or a test needs it).
 */
#ifndef MG_INTERNAL_H
#define MG_INTERNAL_H

#include "mg/abi.h"

#define MG_INTERNAL MG_EXPORT

#endif
