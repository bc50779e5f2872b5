/*
 * test_safetensors.c - the safetensors reader on crafted headers: every
 * field type-checked (a __metadata__ that is an array, shapes that are
 * not whole numbers, offsets that are strings, duplicate names), empty
 * tensors not taken for overlapping ones, non-regular files refused
 * without blocking, and a header of 200,000 tensors opened and searched
 * in well under the alarm (a pairwise duplicate check took 12 s for
 * 100,000).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "runtime/safetensors.h"

static int fails;
static char path[256];

/* Write an 8-byte length, the JSON header and `data` zero bytes. */
static void craft(const char *json, size_t data)
{
	FILE *f = fopen(path, "wb");
	size_t n = strlen(json);
	for (int i = 0; i < 8; i++)
		fputc((int)((n >> (8 * i)) & 255), f);
	fwrite(json, 1, n, f);
	for (size_t i = 0; i < data; i++)
		fputc(0, f);
	fclose(f);
}

/* want == NULL: must open; otherwise must fail with `want` in the error. */
static void check(const char *json, size_t data, const char *want)
{
	struct mg_st_file f;
	craft(json, data);
	int rc = mg_st_open(&f, path);
	if (!want && rc) {
		printf("FAIL %s: refused: %s\n", json, mg_last_error());
		fails++;
	} else if (want && !rc) {
		printf("FAIL %s: accepted, expected '%s'\n", json, want);
		fails++;
	} else if (want && !strstr(mg_last_error(), want)) {
		printf("FAIL %s: '%s', expected '%s'\n", json, mg_last_error(),
		       want);
		fails++;
	}
	mg_st_close(&f);
}

#define T(x) "{\"t\":{\"dtype\":\"F32\",\"shape\":" x "}}"

/* A header of n empty tensors t0..t{n-1} (and t0 again with `dup`), and
 * as many __metadata__ keys; opened, every name found, under alarm(15):
 * quadratic work would take minutes. */
static void many(int n, int dup)
{
	size_t cap = (size_t)n * 128 + 64, len = 0;
	char *j = malloc(cap);
	len += (size_t)snprintf(j + len, cap - len, "{\"__metadata__\":{");
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(j + len, cap - len, "%s\"k%d\":\"v\"",
					i ? "," : "", i);
	len += (size_t)snprintf(j + len, cap - len, "}");
	for (int i = 0; i < n + dup; i++)
		len += (size_t)snprintf(
			j + len, cap - len,
			",\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],"
			"\"data_offsets\":[0,0]}",
			i < n ? i : 0);
	snprintf(j + len, cap - len, "}");
	alarm(15);
	if (dup) {
		check(j, 0, "tensor 't0' appears twice");
	} else {
		struct mg_st_file f;
		craft(j, 0);
		if (mg_st_open(&f, path)) {
			printf("FAIL %d tensors: %s\n", n, mg_last_error());
			fails++;
		} else {
			char name[32];
			for (int i = 0; i < n; i++) {
				snprintf(name, sizeof name, "t%d", i);
				const struct mg_st_entry *e =
					mg_st_find(&f, name);
				if (!e || strcmp(e->name, name)) {
					printf("FAIL %d tensors: %s not "
					       "found\n",
					       n, name);
					fails++;
					break;
				}
			}
			if (mg_st_find(&f, "t-1") || mg_st_find(&f, "") ||
			    !mg_st_meta(&f, "k7")) {
				printf("FAIL %d tensors: lookups\n", n);
				fails++;
			}
		}
		mg_st_close(&f);
	}
	alarm(0);
	free(j);
}

int main(void)
{
	snprintf(path, sizeof path, "/tmp/mg_test_st_%d", (int)getpid());
	check("{\"__metadata__\":{\"a\":\"b\"},\"t\":{\"dtype\":\"F32\","
	      "\"shape\":[2],\"data_offsets\":[0,8]}}",
	      8, NULL);
	/* __metadata__ of every wrong JSON type */
	check("{\"__metadata__\":[\"a\",\"b\"]}", 0, "__metadata__ is not");
	check("{\"__metadata__\":\"a\"}", 0, "__metadata__ is not");
	check("{\"__metadata__\":{\"a\":1}}", 0, "'a' is not a string");
	check("{\"__metadata__\":{\"a\":null}}", 0, "'a' is not a string");
	check("{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"}}", 0, "twice");
	check("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "twice");
	/* more metadata keys than top-level entries: all kept */
	{
		struct mg_st_file f;
		craft("{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\",\"c\":\"3\"}"
		      "}",
		      0);
		if (mg_st_open(&f, path) || !mg_st_meta(&f, "c") ||
		    strcmp(mg_st_meta(&f, "c"), "3")) {
			printf("FAIL metadata key 'c' lost\n");
			fails++;
		}
		mg_st_close(&f);
	}
	/* tensor entries */
	check("{\"t\":[1,2]}", 0, "not a JSON object");
	check("{\"t\":5}", 0, "not a JSON object");
	check(T("[10.7],\"data_offsets\":[0,40]"), 40, "shape[0]");
	check(T("[-1],\"data_offsets\":[0,0]"), 0, "shape[0]");
	check(T("[\"2\"],\"data_offsets\":[0,8]"), 8, "shape[0]");
	check(T("[1e300],\"data_offsets\":[0,8]"), 8, "shape[0]");
	check(T("[4294967296,4294967296],\"data_offsets\":[0,0]"), 0,
	      "overflows");
	check(T("[2],\"data_offsets\":[\"0\",8]"), 8, "data_offsets");
	check(T("[2],\"data_offsets\":[0.5,8.5]"), 9, "data_offsets");
	check(T("[2],\"data_offsets\":[null,8]"), 8, "data_offsets");
	check(T("[2],\"data_offsets\":[0,8,9]"), 8, "data_offsets");
	check("{\"t\":{\"dtype\":7,\"shape\":[],\"data_offsets\":[0,4]}}", 4,
	      "lacks dtype");
	check("{\"t\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
	      "\"t\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[4,8]}}",
	      8, "appears twice");
	check("{\"__metadata__\":{\"a\":\"b\",\"c\":\"d\",\"a\":\"e\"}}", 0,
	      "__metadata__ 'a' appears twice");
	many(200000, 0);
	many(200000, 1);
	/* empty tensors overlap nothing, wherever they sit */
	check("{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
	      "\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"
	      "}",
	      16, NULL);
	check("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"
	      ","
	      "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
	      16, NULL);
	check("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"
	      ","
	      "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}",
	      16, NULL);
	check("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}"
	      ","
	      "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}"
	      "}",
	      16, "overlap");
	unlink(path);
	/* non-regular files: refused, a FIFO without blocking */
	struct mg_st_file f;
	if (!mg_st_open(&f, "/dev/zero") ||
	    !strstr(mg_last_error(), "not a regular file")) {
		printf("FAIL /dev/zero: %s\n", mg_last_error());
		fails++;
	}
	mg_st_close(&f);
	if (mkfifo(path, 0600) == 0) {
		alarm(10);
		if (!mg_st_open(&f, path) ||
		    !strstr(mg_last_error(), "not a regular file")) {
			printf("FAIL fifo: %s\n", mg_last_error());
			fails++;
		}
		mg_st_close(&f);
		unlink(path);
	}
	if (fails)
		printf("%d failures\n", fails);
	else
		printf("safetensors reader: all crafted headers handled\n");
	return fails != 0;
}
