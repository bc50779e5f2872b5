/*
 * tok_post.c - post-processors: TemplateProcessing's single template (the
 * special tokens' ids around sequence A: Llama 2's BOS), ByteLevel (only
 * offsets, nothing for ids) and Sequence. Parsed into the ids to put
 * before and after the text's ids when MG_TOK_ADD_SPECIAL is given.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "mg/log.h"
#include "tok_internal.h"

/* The ids of special token `name`, each one the vocabulary has: an id
 * past it would be added to every encoded text and index past the
 * model's embedding. */
static int add_ids(const struct mg_tokenizer *t, const char *name, int32_t **v,
		   int *n, const cJSON *ids)
{
	const cJSON *x;
	cJSON_ArrayForEach(x, ids)
	{
		if (!cJSON_IsNumber(x))
			return mg_error("post_processor: special token ids "
					"must be numbers");
		const double d = x->valuedouble;
		if (!(d >= 0 && d < (double)t->nid && d == (int64_t)d) ||
		    !t->id_tok[(int64_t)d])
			return mg_error("post_processor: special token '%s': "
					"id %.17g is not in the vocabulary "
					"(ids 0 to %lld)",
					name, d, (long long)t->nid - 1);
		int32_t *nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
		if (!nv)
			return mg_error("tokenizer: out of memory");
		*v = nv;
		nv[(*n)++] = (int32_t)x->valuedouble;
	}
	return 0;
}

static int template(struct mg_tokenizer *t, const cJSON *j)
{
	const cJSON *single = cJSON_GetObjectItemCaseSensitive(j, "single");
	const cJSON *sp = cJSON_GetObjectItemCaseSensitive(j, "special_tokens");
	const cJSON *it;
	int seen_a = 0;
	if (!cJSON_IsArray(single))
		return mg_error("post_processor: TemplateProcessing without "
				"a 'single' template");
	cJSON_ArrayForEach(it, single)
	{
		const cJSON *s =
			cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
		if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) {
			if (seen_a++)
				return mg_error("post_processor: the single "
						"template names a sequence "
						"twice");
			continue;
		}
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(s, "id");
		if (!cJSON_IsString(id))
			return mg_error("post_processor: template item is "
					"neither SpecialToken nor Sequence");
		const cJSON *e =
			cJSON_GetObjectItemCaseSensitive(sp, id->valuestring);
		const cJSON *ids = cJSON_GetObjectItemCaseSensitive(e, "ids");
		if (!cJSON_IsArray(ids))
			return mg_error("post_processor: special token '%s' "
					"has no ids in special_tokens",
					id->valuestring);
		if (seen_a ? add_ids(t, id->valuestring, &t->post_post,
				     &t->npost_post, ids)
			   : add_ids(t, id->valuestring, &t->post_pre,
				     &t->npost_pre, ids))
			return -1;
	}
	if (!seen_a)
		return mg_error("post_processor: the single template has no "
				"sequence");
	return 0;
}

int tok_parse_post(struct mg_tokenizer *t, const cJSON *j)
{
	if (!j || cJSON_IsNull(j))
		return 0;
	const cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
	const char *type = cJSON_IsString(ty) ? ty->valuestring : "(none)";
	if (!strcmp(type, "TemplateProcessing")) {
		if (t->npost_pre || t->npost_post)
			return mg_error("post_processor: more than one "
					"TemplateProcessing");
		return template(t, j);
	}
	if (!strcmp(type, "ByteLevel"))
		return 0; /* offsets only */
	if (!strcmp(type, "Sequence")) {
		const cJSON *p;
		cJSON_ArrayForEach(
			p, cJSON_GetObjectItemCaseSensitive(j, "processors"))
		{
			if (tok_parse_post(t, p))
				return -1;
		}
		return 0;
	}
	return mg_error("post_processor: unsupported type '%s'", type);
}
