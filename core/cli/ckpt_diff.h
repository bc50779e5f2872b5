/*
 * ckpt_diff.h - the checkpoint comparison behind `mgrun ckpt-diff` and the
 * tests' ckpt_diff program (ckpt_diff.c).
 */
#ifndef MG_CLI_CKPT_DIFF_H
#define MG_CLI_CKPT_DIFF_H

/* Compare the tensors named prefix* of checkpoints a and b: prints one
 * summary line (and a line per tensor over rtol); returns 0 (same), 1
 * (different, or nothing compared) or 2 (unreadable). */
int mg_ckpt_diff(const char *a, const char *b, double rtol, const char *prefix);
/* `mgrun ckpt-diff` (argv[0] is "ckpt-diff"). */
int mg_ckpt_diff_main(int argc, char **argv);

#endif
