/*
 * llama_kernels.c - the `kernels` option: which fused kernels a run uses
 * instead of the unfused reference path, so two runs that differ only
 * here are the kernel-swap experiment (`mgrun compare`). Parsed at
 * create, with errors naming the unknown kernel and the allowed names;
 * the resolved list is said at create when any is on, and the option
 * is in the report's config.
 */
#include <stdio.h>
#include <string.h>

#include "llama.h"

static const struct {
	const char *name;
	unsigned bits;
	const char *what;
} kernels[] = {
	{"rmsnorm", LK_RMSNORM,
	 "residual add + RMSNorm in one pass, and the norm's backward with "
	 "the residual gradient"},
	{"flce", LK_FLCE,
	 "linear + cross-entropy of the output head in chunks of tokens, "
	 "never holding [tokens, vocab] logits"},
};
#define NK (sizeof kernels / sizeof *kernels)

static int unknown(const char *p, size_t n)
{
	char names[128] = "";
	for (size_t k = 0; k < NK; k++) {
		strcat(names, kernels[k].name);
		strcat(names, ", ");
	}
	return mg_error("llama: kernels: unknown kernel '%.*s' (allowed: "
			"%snone, fused, all; swiglu and rope are single "
			"kernels already)",
			(int)n, p, names);
}

int llama_kernels_parse(const char *s, unsigned *bits)
{
	*bits = 0;
	bool none = false;
	for (const char *p = s; *p;) {
		size_t n = strcspn(p, ", ");
		bool found = false;
		for (size_t k = 0; n && k < NK; k++)
			if (strlen(kernels[k].name) == n &&
			    !strncmp(p, kernels[k].name, n)) {
				*bits |= kernels[k].bits;
				found = true;
			}
		if (n == 4 && !strncmp(p, "none", 4))
			none = found = true;
		if ((n == 5 && !strncmp(p, "fused", 5)) ||
		    (n == 3 && !strncmp(p, "all", 3))) {
			*bits |= LK_ALL;
			found = true;
		}
		if (n && !found)
			return unknown(p, n);
		p += n;
		p += strspn(p, ", ");
	}
	if (none && *bits)
		return mg_error("llama: kernels: 'none' with other kernels "
				"('%s')",
				s);
	return 0;
}

void llama_kernels_str(unsigned bits, char *buf, size_t len)
{
	buf[0] = '\0';
	for (size_t k = 0; k < NK; k++)
		if (bits & kernels[k].bits) {
			if (buf[0])
				strncat(buf, ",", len - strlen(buf) - 1);
			strncat(buf, kernels[k].name, len - strlen(buf) - 1);
		}
	if (!buf[0])
		snprintf(buf, len, "none");
}

int llama_kernels_setup(struct llama *m, const struct mg_opts *o)
{
	if (llama_kernels_parse(mg_opt_str(o, "kernels"), &m->kern))
		return -1;
	m->flce_chunk = mg_opt_int(o, "flce_chunk");
	/* the fused head computes the loss of uncapped logits: with final
	 * logit soft-capping (Gemma 2) the head stays unfused */
	if ((m->kern & LK_FLCE) && m->c.final_softcap > 0) {
		m->kern &= ~LK_FLCE;
		if (m->ctx->rank == 0)
			mg_info("llama: kernels flce off (the model caps its "
				"logits: final_logit_softcapping)");
	}
	char b[64];
	llama_kernels_str(m->kern, b, sizeof b);
	if (m->kern && m->ctx->rank == 0)
		mg_info("llama: kernels %s", b);
	return 0;
}
