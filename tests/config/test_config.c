/*
 * test_config.c - the configuration layer: parsing, --set, diagnostics
 * (exact `file:line: [section] key: message` text), validation against a
 * schema, defaults, PATH resolution, accessors, --print-config round trip
 * and --help-plugin output.
 *
 * Usage: test_config [CASE...]   (no argument: every case)
 * Runs in MG_TEST_DATA (tests/config/data), so fixtures are named by
 * their bare file names in the expected messages.
 */
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/test_util.h"
#include "config/config.h"

/* The test schemas. */
static const struct mg_option run_schema[] = {
	MG_OPT_I("epochs", "1", 1, 1000, "passes over the training set"),
	MG_OPT_I("batch", "64", 1, 65536, "global batch size"),
	MG_OPT_F("lr", "0.1", 0, 10, "learning rate"),
	MG_OPT_B("shuffle", "true", "shuffle every epoch"),
	MG_OPT_E("precision", "fp32", "fp32|bf16|fp16", "compute precision"),
	MG_OPT_S("tag", "", "free text for the report"),
	MG_OPT_P("data", "data/mnist", "dataset folder"),
	MG_OPT_I("seed", NULL, 0, 0, "random seed"),
	MG_OPT_END,
};

static const struct mg_option plugin_core_schema[] = {
	MG_OPT_S("name", "", "plugin name"),
	MG_OPT_P("path", "", "explicit plugin .so"),
	MG_OPT_END,
};

static const struct mg_option model_schema[] = {
	MG_OPT_I("depth", "2", 1, 64, "number of layers"),
	MG_OPT_S("arch", NULL, "architecture"),
	MG_OPT_END,
};

static const struct mg_option *const run_schemas[] = {run_schema};

static char data_dir[PATH_MAX]; /* realpath of MG_TEST_DATA, the cwd */

static char *diag_text(const struct mg_diag *d)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	mg_diag_print(f, d);
	fclose(f);
	return buf;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, f);
	if (vasprintf(&s, f, ap) < 0)
		abort();
	va_end(ap);
	return s;
}

/*
 * Parse file, apply sets, validate [run] with the run schema; check the
 * printed diagnostics equal expected and that validation failed (or not,
 * when expected is ""). Returns the opts (caller frees) when valid.
 */
static struct mg_opts *run_case(const char *file, const char *const *sets,
				size_t nsets, const char *expected,
				size_t expected_count)
{
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file(file, &d);
	struct mg_opts *o = NULL;
	char *text;
	size_t i;

	CHECK(cfg != NULL);
	if (cfg) {
		for (i = 0; i < nsets; i++)
			mg_config_set(cfg, sets[i], &d);
		o = mg_opts_build(cfg, "run", run_schemas, 1, &d);
	}
	text = diag_text(&d);
	CHECK_STR(text ? text : "", expected);
	CHECK_INT(mg_diag_count(&d), expected_count);
	if (expected_count)
		CHECK(mg_diag_count(&d) > 0);
	free(text);
	mg_diag_free(&d);
	mg_config_free(cfg);
	return o;
}

/* ---- one case per error class ---------------------------------------- */

static void t_unknown_key(void)
{
	struct mg_opts *o = run_case(
		"unknown_key.ini", NULL, 0,
		"unknown_key.ini:3: [run] epoch: unknown key 'epoch' (did you "
		"mean 'epochs'?)\n"
		"unknown_key.ini:4: [run] colour: unknown key 'colour'\n",
		2);

	CHECK(o == NULL);
}

static void t_duplicate_key(void)
{
	struct mg_opts *o = run_case("duplicate_key.ini", NULL, 0,
				     "duplicate_key.ini:5: [run] epochs: "
				     "duplicate key (first set at line 3)\n",
				     1);

	/* the section itself validates; the engine fails on the count */
	CHECK(o != NULL);
	if (o)
		CHECK_INT(mg_opt_int(o, "epochs"), 3);
	mg_opts_free(o);
}

static void t_duplicate_section(void)
{
	struct mg_opts *o = run_case("duplicate_section.ini", NULL, 0,
				     "duplicate_section.ini:7: [run] "
				     "duplicate section (first at line 1)\n",
				     1);

	CHECK(o != NULL);
	if (o) /* keys of the repeated section still count */
		CHECK_INT(mg_opt_int(o, "epochs"), 2);
	mg_opts_free(o);
}

static void t_bad_int(void)
{
	CHECK(!run_case("bad_int.ini", NULL, 0,
			"bad_int.ini:3: [run] epochs: 'ten' is not an integer\n"
			"bad_int.ini:4: [run] batch: '12x' is not an integer\n",
			2));
}

static void t_bad_float(void)
{
	CHECK(!run_case("bad_float.ini", NULL, 0,
			"bad_float.ini:3: [run] lr: 'fast' is not a number\n",
			1));
}

static void t_bad_bool(void)
{
	CHECK(!run_case("bad_bool.ini", NULL, 0,
			"bad_bool.ini:3: [run] shuffle: 'maybe' is not a "
			"boolean (use true/false, yes/no, on/off or 1/0)\n",
			1));
}

static void t_bad_enum(void)
{
	CHECK(!run_case("bad_enum.ini", NULL, 0,
			"bad_enum.ini:3: [run] precision: 'bf61' is not one "
			"of: fp32, bf16, fp16 (did you mean 'bf16'?)\n",
			1));
}

static void t_out_of_range(void)
{
	CHECK(!run_case("out_of_range.ini", NULL, 0,
			"out_of_range.ini:3: [run] epochs: 1001 is out of "
			"range [1, 1000]\n"
			"out_of_range.ini:4: [run] lr: 11.5 is out of range "
			"[0, 10]\n"
			"out_of_range.ini:5: [run] batch: 99999999999999999999 "
			"is out of range [1, 65536]\n",
			3));
}

static void t_empty_value(void)
{
	CHECK(!run_case("empty_value.ini", NULL, 0,
			"empty_value.ini:2: [run] seed: empty value (expected "
			"an integer)\n"
			"empty_value.ini:4: [run] data: empty value (expected "
			"a path)\n"
			"empty_value.ini:5: [run] precision: empty value "
			"(expected one of: fp32, bf16, fp16)\n",
			3));
}

static void t_missing_required(void)
{
	const struct mg_option *const schemas[] = {plugin_core_schema,
						   model_schema};
	struct mg_diag d = {0};
	struct mg_config *cfg;
	char *text;

	/* at the section header */
	CHECK(!run_case("missing_required.ini", NULL, 0,
			"missing_required.ini:3: [run] seed: missing required "
			"key (int: random seed)\n",
			1));

	/* no [model] section at all: at the file */
	cfg = mg_config_parse_file("good.ini", &d);
	CHECK(cfg && !mg_opts_build(cfg, "model", schemas, 2, &d));
	/* a section made by --set has no header: still at the file */
	CHECK(mg_config_set(cfg, "model.depth=3", &d) == 0);
	CHECK(!mg_opts_build(cfg, "model", schemas, 2, &d));
	text = diag_text(&d);
	CHECK_STR(text, "good.ini: [model] arch: missing required key "
			"(string: architecture)\n"
			"good.ini: [model] arch: missing required key "
			"(string: architecture)\n");
	free(text);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

static void t_syntax_error(void)
{
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file("syntax.ini", &d);
	char *text = diag_text(&d);

	CHECK_STR(text, "syntax.ini:3: [run] syntax error: expected 'key = "
			"value', '[section]' or a comment\n"
			"syntax.ini:4: syntax error: section header without "
			"']'\n");
	CHECK_INT(mg_diag_count(&d), 2);
	/* the keys under the broken header are not given to anyone */
	CHECK(cfg && !mg_config_get(cfg, "strategy", "name"));
	CHECK(cfg && mg_config_section(cfg, "strategy") == NULL);
	/* parsing went on after the errors */
	CHECK(cfg && mg_config_get(cfg, "model", "name") &&
	      strcmp(mg_config_get(cfg, "model", "name")->value, "mlp") == 0);
	CHECK(cfg && mg_config_get(cfg, "model", "name")->loc.line == 7);
	free(text);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

static void t_key_before_section(void)
{
	struct mg_diag d = {0};
	struct mg_config *cfg =
		mg_config_parse_file("key_before_section.ini", &d);
	char *text = diag_text(&d);

	CHECK_STR(text, "key_before_section.ini:2: epochs: key outside any "
			"section (put it under a [section] header)\n");
	CHECK_INT(mg_diag_count(&d), 1);
	CHECK(cfg && cfg->nsections == 1);
	free(text);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

static void t_unreadable(void)
{
	struct mg_diag d = {0};
	char *text;

	CHECK(mg_config_parse_file("no_such_file.ini", &d) == NULL);
	CHECK(mg_config_parse_file("sub", &d) == NULL); /* a folder */
	text = diag_text(&d);
	CHECK_STR(text, "no_such_file.ini: cannot open: No such file or "
			"directory\n"
			"sub: cannot read: Is a directory\n");
	CHECK_INT(mg_diag_count(&d), 2);
	free(text);
	mg_diag_free(&d);
}

static void t_unknown_section(void)
{
	static const char *const known[] = {"run", "model", "dataset",
					    "strategy", "optimizer"};
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file("unknown_section.ini", &d);
	char *text;

	CHECK(cfg != NULL);
	mg_config_set(cfg, "stratgy.name=ddp", &d);
	CHECK_INT(mg_config_check_sections(cfg, known, 5, &d), 3);
	text = diag_text(&d);
	CHECK_STR(text, "unknown_section.ini:3: [modle] unknown section (did "
			"you mean [model]?)\n"
			"unknown_section.ini:5: [zzz] unknown section\n"
			"--set stratgy.name=ddp: [stratgy] unknown section "
			"(did you mean [strategy]?)\n");
	free(text);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

static void t_many_errors(void)
{
	CHECK(!run_case("many_errors.ini", NULL, 0,
			"many_errors.ini:3: [run] epoch: unknown key 'epoch' "
			"(did you mean 'epochs'?)\n"
			"many_errors.ini:4: [run] batch: -5 is out of range "
			"[1, 65536]\n"
			"many_errors.ini:5: [run] shuffle: 'perhaps' is not a "
			"boolean (use true/false, yes/no, on/off or 1/0)\n"
			"many_errors.ini:6: [run] syntax error: expected 'key "
			"= value', '[section]' or a comment\n"
			"many_errors.ini:8: [run] lr: duplicate key (first set "
			"at line 7)\n"
			"many_errors.ini:9: [run] precision: 'fp64' is not one "
			"of: fp32, bf16, fp16\n",
			6));
}

/* ---- --set ----------------------------------------------------------- */

static void t_set_override(void)
{
	static const char *const sets[] = {
		"run.epochs=3", " run.tag = two words ", "optimizer.lr=0.01"};
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file("good.ini", &d);
	const struct mg_config_entry *e;
	const struct mg_loc *where;
	struct mg_opts *o;
	size_t i;

	CHECK(cfg != NULL);
	for (i = 0; i < 3; i++)
		CHECK(mg_config_set(cfg, sets[i], &d) == 0);
	e = mg_config_get(cfg, "run", "epochs");
	CHECK(e && strcmp(e->value, "3") == 0 && e->loc.set &&
	      strcmp(e->loc.set, "run.epochs=3") == 0 && !e->loc.file);
	e = mg_config_get(cfg, "optimizer", "lr");
	CHECK(e && strcmp(e->value, "0.01") == 0);
	CHECK(mg_config_section(cfg, "optimizer") != NULL);
	/* the replaced entry keeps its place */
	CHECK(cfg->sections[0]->entries[0] ==
	      mg_config_get(cfg, "run", "epochs"));
	o = mg_opts_build(cfg, "run", run_schemas, 1, &d);
	CHECK_INT(mg_diag_count(&d), 0);
	CHECK(o != NULL);
	if (o) {
		CHECK_INT(mg_opt_int(o, "epochs"), 3);
		CHECK_STR(mg_opt_str(o, "tag"), "two words");
		CHECK_INT(mg_opt_int(o, "batch"), 128); /* from the file */
		CHECK(mg_opt_given(o, "epochs"));
		where = mg_opts_where(o, "epochs");
		CHECK(where && where->set &&
		      strcmp(where->set, "run.epochs=3") == 0);
		where = mg_opts_where(o, "batch");
		CHECK(where && !where->set && where->line == 4 &&
		      strcmp(where->file, "good.ini") == 0);
	}
	mg_opts_free(o);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

static void t_set_bad_value(void)
{
	static const char *const sets[] = {"run.epochs=x", "run.epoch=3",
					   "run.lr=20"};

	CHECK(!run_case("good.ini", sets, 3,
			"--set run.epochs=x: [run] epochs: 'x' is not an "
			"integer\n"
			"--set run.epoch=3: [run] epoch: unknown key 'epoch' "
			"(did you mean 'epochs'?)\n"
			"--set run.lr=20: [run] lr: 20 is out of range [0, "
			"10]\n",
			3));
}

static void t_set_malformed(void)
{
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file("good.ini", &d);
	char *text;

	CHECK(mg_config_set(cfg, "runepochs=3", &d) == -1);
	CHECK(mg_config_set(cfg, "run.epochs", &d) == -1);
	CHECK(mg_config_set(cfg, "run=a.b", &d) == -1);
	CHECK(mg_config_set(cfg, ".epochs=3", &d) == -1);
	CHECK(mg_config_set(cfg, "run.=3", &d) == -1);
	text = diag_text(&d);
	CHECK_STR(text, "--set runepochs=3: expected section.key=value\n"
			"--set run.epochs: expected section.key=value\n"
			"--set run=a.b: expected section.key=value\n"
			"--set .epochs=3: expected section.key=value (empty "
			"section)\n"
			"--set run.=3: expected section.key=value (empty "
			"key)\n");
	/* nothing was changed */
	CHECK(strcmp(mg_config_get(cfg, "run", "epochs")->value, "10") == 0);
	free(text);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

/* ---- values ------------------------------------------------------------ */

static void t_path_resolution(void)
{
	static const char *const sets[] = {"run.data=rel/x"};
	struct mg_opts *o;
	char *want;

	o = run_case("sub/paths.ini", NULL, 0, "", 0);
	CHECK(o != NULL);
	if (o) {
		want = fmt("%s/sub/mnist", data_dir);
		CHECK_STR(mg_opt_str(o, "data"), want);
		free(want);
		/* STRING values are not paths */
		CHECK_STR(mg_opt_str(o, "tag"), "./not/a/path");
	}
	mg_opts_free(o);

	o = run_case("sub/abs.ini", NULL, 0, "", 0);
	CHECK(o && strcmp(mg_opt_str(o, "data"), "/tmp/abs/data") == 0);
	mg_opts_free(o);

	o = run_case("sub/dots.ini", NULL, 0, "", 0);
	want = fmt("%s/sub/x/../y", data_dir);
	CHECK(o != NULL);
	if (o)
		CHECK_STR(mg_opt_str(o, "data"), want);
	free(want);
	mg_opts_free(o);

	/* --set: relative to the current directory, not the INI's */
	o = run_case("sub/paths.ini", sets, 1, "", 0);
	want = fmt("%s/rel/x", data_dir);
	CHECK(o != NULL);
	if (o)
		CHECK_STR(mg_opt_str(o, "data"), want);
	free(want);
	mg_opts_free(o);

	/* a default is relative to the INI's folder too */
	o = run_case("sub/../minimal.ini", NULL, 0, "", 0);
	want = fmt("%s/data/mnist", data_dir);
	CHECK(o != NULL);
	if (o)
		CHECK_STR(mg_opt_str(o, "data"), want);
	free(want);
	mg_opts_free(o);
}

static void t_resolve_entry(void)
{
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file("sub/paths.ini", &d);
	char *got, *want;

	CHECK(cfg != NULL);
	got = mg_config_resolve_path(cfg, mg_config_get(cfg, "run", "data"));
	want = fmt("%s/sub/mnist", data_dir);
	CHECK_STR(got, want);
	free(got);
	free(want);
	mg_config_set(cfg, "strategy.path=./plug/libx.so", &d);
	got = mg_config_resolve_path(cfg,
				     mg_config_get(cfg, "strategy", "path"));
	want = fmt("%s/plug/libx.so", data_dir);
	CHECK_STR(got, want);
	free(got);
	free(want);
	CHECK_INT(mg_diag_count(&d), 0);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

/* "@SECTION" (a sweep's group value): its lines applied in their own
 * sections at their own lines, paths from the INI's folder; later
 * --set values win over it, earlier ones do not; a missing section or a
 * line without SECTION.KEY is said at its place. */
static void t_group_section(void)
{
	struct mg_diag d = {0};
	struct mg_config *cfg = mg_config_parse_file("sub/group.ini", &d);
	char *got, *want, *text;

	CHECK(cfg != NULL);
	if (!cfg)
		return;
	CHECK(mg_config_set(cfg, "run.seed=9", &d) == 0);
	CHECK(mg_config_set(cfg, "@sweep.set.a", &d) == 0);
	const struct mg_config_entry *e = mg_config_get(cfg, "run", "data");
	CHECK(e && !e->loc.set && e->loc.line == 6);
	got = mg_config_resolve_path(cfg, e);
	want = fmt("%s/sub/other/x.json", data_dir);
	CHECK_STR(got, want);
	free(got);
	free(want);
	e = mg_config_get(cfg, "run", "seed");
	CHECK(e && !strcmp(e->value, "2") && e->loc.line == 7);
	e = mg_config_get(cfg, "model", "depth");
	CHECK(e && !strcmp(e->value, "4") && e->loc.line == 8);
	CHECK(mg_config_set(cfg, "run.seed=5", &d) == 0);
	e = mg_config_get(cfg, "run", "seed");
	CHECK(e && !strcmp(e->value, "5") && e->loc.set);
	CHECK_INT(mg_diag_count(&d), 0);
	CHECK(mg_config_set(cfg, "@sweep.set.none", &d) == -1);
	CHECK(mg_config_set(cfg, "@sweep.set.bad", &d) == -1);
	text = diag_text(&d);
	/* (file lines first, as every diagnostic list is sorted) */
	CHECK_STR(text, "sub/group.ini:11: [sweep.set.bad] nodot: expected "
			"SECTION.KEY = VALUE\n"
			"--set @sweep.set.none: no section [sweep.set.none] "
			"in the file\n");
	free(text);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

static void t_defaults(void)
{
	struct mg_opts *o = run_case("minimal.ini", NULL, 0, "", 0);

	CHECK(o != NULL);
	if (!o)
		return;
	CHECK_INT(mg_opt_int(o, "seed"), 7);
	CHECK_INT(mg_opt_int(o, "epochs"), 1);
	CHECK_INT(mg_opt_int(o, "batch"), 64);
	CHECK(mg_opt_float(o, "lr") == 0.1);
	CHECK(mg_opt_bool(o, "shuffle") == true);
	CHECK_STR(mg_opt_str(o, "precision"), "fp32");
	CHECK_INT(mg_opt_enum(o, "precision"), 0);
	CHECK_STR(mg_opt_str(o, "tag"), "");
	CHECK_STR(mg_opts_section(o), "run");
	mg_opts_free(o);
}

static void t_values(void)
{
	struct mg_opts *o = run_case("good.ini", NULL, 0, "", 0);

	CHECK(o != NULL);
	if (!o)
		return;
	CHECK_INT(mg_opt_int(o, "epochs"), 10);
	CHECK_INT(mg_opt_int(o, "batch"), 128);
	CHECK(mg_opt_float(o, "lr") == 0.05);
	CHECK(mg_opt_bool(o, "shuffle") == false);
	CHECK_STR(mg_opt_str(o, "precision"), "bf16");
	CHECK_INT(mg_opt_enum(o, "precision"), 1);
	CHECK_STR(mg_opt_str(o, "tag"), "hello world");
	CHECK_INT(mg_opt_int(o, "seed"), 42);
	mg_opts_free(o);
}

static void t_given(void)
{
	static const char *const sets[] = {"run.batch=32"};
	struct mg_opts *o = run_case("minimal.ini", sets, 1, "", 0);
	const struct mg_loc *w;

	CHECK(o != NULL);
	if (!o)
		return;
	CHECK(mg_opt_given(o, "seed"));
	CHECK(mg_opt_given(o, "batch"));
	CHECK(!mg_opt_given(o, "epochs"));
	CHECK(!mg_opt_given(o, "data"));
	CHECK(!mg_opt_given(o, "tag"));
	w = mg_opts_where(o, "seed");
	CHECK(w && w->line == 2 && strcmp(w->file, "minimal.ini") == 0);
	CHECK(mg_opts_where(o, "epochs") == NULL);
	mg_opts_free(o);
}

static void t_bool_spellings(void)
{
	static const char *const yes[] = {"true", "YES", "on", "1", "True"};
	static const char *const no[] = {"false", "no", "OFF", "0"};
	struct mg_diag d = {0};
	size_t i;

	for (i = 0; i < 9; i++) {
		bool want = i < 5;
		const char *w = want ? yes[i] : no[i - 5];
		char *text = fmt("[run]\nseed = 1\nshuffle = %s\n", w);
		struct mg_config *cfg =
			mg_config_parse_string(text, "b.ini", NULL, &d);
		struct mg_opts *o =
			mg_opts_build(cfg, "run", run_schemas, 1, &d);

		CHECK(o && mg_opt_bool(o, "shuffle") == want);
		mg_opts_free(o);
		mg_config_free(cfg);
		free(text);
	}
	CHECK_INT(mg_diag_count(&d), 0);
	mg_diag_free(&d);
}

/* Syntax details: CRLF, BOM, ':' separator, indentation, comments, long
 * lines (and that line numbers stay right after them). */
static void t_syntax_details(void)
{
	struct mg_diag d = {0};
	struct mg_config *cfg;
	struct mg_opts *o;
	char *text, *big, *src;
	size_t n = 20000;

	cfg = mg_config_parse_string("\xEF\xBB\xBF[run]\r\n"
				     "seed: 5\r\n"
				     "  epochs = 4 ; indented, commented\r\n"
				     "# comment\r\n"
				     "tag = a;b ; c\r\n"
				     "[ model ]  ; comment\r\n"
				     "arch = x\n",
				     "s.ini", NULL, &d);
	o = mg_opts_build(cfg, "run", run_schemas, 1, &d);
	CHECK_INT(mg_diag_count(&d), 0);
	CHECK(o && mg_opt_int(o, "seed") == 5 && mg_opt_int(o, "epochs") == 4);
	CHECK(o && strcmp(mg_opt_str(o, "tag"), "a;b") == 0);
	CHECK(mg_config_get(cfg, "model", "arch") &&
	      mg_config_get(cfg, "model", "arch")->loc.line == 7);
	CHECK(mg_config_section(cfg, "model") &&
	      mg_config_section(cfg, "model")->loc.line == 6);
	mg_opts_free(o);
	mg_config_free(cfg);

	big = malloc(n + 1);
	memset(big, 'a', n);
	big[n] = '\0';
	src = fmt("[run]\ntag = %s\nseed = 1\noops\n[]\n[run] x\n= 3\n", big);
	cfg = mg_config_parse_string(src, "l.ini", NULL, &d);
	text = diag_text(&d);
	CHECK_STR(text, "l.ini:2: line too long (over 16384 characters)\n"
			"l.ini:4: [run] syntax error: expected 'key = value', "
			"'[section]' or a comment\n"
			"l.ini:5: syntax error: empty section name\n"
			"l.ini:6: [run] syntax error: unexpected text after "
			"']'\n"
			"l.ini:6: [run] duplicate section (first at line 1)\n"
			"l.ini:7: [run] syntax error: no key before '='\n");
	CHECK(mg_config_get(cfg, "run", "seed") &&
	      mg_config_get(cfg, "run", "seed")->loc.line == 3);
	free(text);
	free(src);
	free(big);
	mg_config_free(cfg);
	mg_diag_free(&d);
}

static void t_schema_bugs(void)
{
	static const struct mg_option bad[] = {
		MG_OPT_S("name", "", "clashes with the core key"),
		MG_OPT_I("n", "many", 0, 0, "bad default"),
		MG_OPT_I("m", "1", 5, 2, "min > max"),
		MG_OPT_E("e", "a", NULL, "no choices"),
		MG_OPT_END,
	};
	const struct mg_option *const schemas[] = {plugin_core_schema, NULL,
						   bad};
	struct mg_diag d = {0};
	struct mg_config *cfg =
		mg_config_parse_string("[x]\n", "x.ini", NULL, &d);
	char *text;

	CHECK(mg_opts_build(cfg, "x", schemas, 3, &d) == NULL);
	text = diag_text(&d);
	CHECK_STR(text, "[x] name: declared twice in the option schemas "
			"(plugin bug)\n"
			"[x] m: schema range has min > max (plugin bug)\n"
			"[x] e: schema enum has no choices (plugin bug)\n"
			"[x] n: invalid default 'many' in the option schema: "
			"'many' is not an integer (plugin bug)\n");
	free(text);
	mg_diag_free(&d);
	mg_config_free(cfg);
}

/* ---- accessors abort on programming errors --------------------------- */

static void expect_abort(void (*fn)(const struct mg_opts *),
			 const struct mg_opts *o, const char *needle)
{
	int pfd[2], status;
	char buf[4096];
	ssize_t n, len = 0;
	pid_t pid;

	fflush(NULL);
	CHECK(pipe(pfd) == 0);
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 2);
		close(pfd[0]);
		fn(o);
		_exit(0);
	}
	close(pfd[1]);
	while ((n = read(pfd[0], buf + len, sizeof(buf) - 1 - len)) > 0)
		len += n;
	buf[len] = '\0';
	close(pfd[0]);
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	if (!strstr(buf, needle)) {
		fprintf(stderr, "expected '%s' in the child's stderr:\n%s\n",
			needle, buf);
		failures++;
	}
}

static void ask_undeclared(const struct mg_opts *o)
{
	(void)mg_opt_int(o, "no_such_key");
}

static void ask_wrong_type(const struct mg_opts *o)
{
	(void)mg_opt_int(o, "lr");
}

static void t_accessor_abort(void)
{
	struct mg_opts *o = run_case("minimal.ini", NULL, 0, "", 0);

	CHECK(o != NULL);
	if (!o)
		return;
	expect_abort(ask_undeclared, o,
		     "option 'no_such_key' is not declared in the schema of "
		     "[run]");
	expect_abort(ask_wrong_type, o,
		     "option 'lr' of [run] is declared float, not int");
	mg_opts_free(o);
}

/* ---- printing ---------------------------------------------------------- */

static void t_help(void)
{
	char *buf = NULL, *line, *save = NULL;
	size_t len = 0, i;
	FILE *f = open_memstream(&buf, &len);
	long col = -1;

	mg_schema_print_help(f, run_schema);
	fclose(f);
	for (i = 0; run_schema[i].name; i++) {
		const struct mg_option *opt = &run_schema[i];
		char *row = NULL;

		/* the option's own row has its name, default and help */
		for (line = buf; line; line = strchr(line, '\n')) {
			line += line[0] == '\n';
			if (strncmp(line + 2, opt->name, strlen(opt->name)) ==
				    0 &&
			    line[2 + strlen(opt->name)] == ' ') {
				row = strndup(line, strcspn(line, "\n"));
				break;
			}
		}
		CHECK(row != NULL);
		if (!row)
			continue;
		CHECK(strstr(row, opt->help) != NULL);
		CHECK(strstr(row, opt->def ? opt->def : "required"));
		/* help texts start in one column */
		if (col < 0)
			col = strstr(row, opt->help) - row;
		CHECK_INT(strstr(row, opt->help) - row, col);
		free(row);
	}
	CHECK(strstr(buf, "fp32|bf16|fp16") != NULL);
	CHECK(strstr(buf, "[1, 1000]") != NULL);
	CHECK(strstr(buf, "[0, 10]") != NULL);
	CHECK(strstr(buf, " int ") && strstr(buf, " float ") &&
	      strstr(buf, " bool ") && strstr(buf, " enum ") &&
	      strstr(buf, " path ") && strstr(buf, " string "));
	/* one header line plus one line per option, no trailing blanks */
	i = 0;
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		CHECK(line[strlen(line) - 1] != ' ');
		i++;
	}
	CHECK_INT(i, 1 + sizeof(run_schema) / sizeof(run_schema[0]) - 1);
	free(buf);
}

/* Every option's value, as comparable text. */
static char *values_text(const struct mg_opts *o)
{
	char *buf = NULL;
	size_t len = 0, i;
	FILE *f = open_memstream(&buf, &len);

	for (i = 0; run_schema[i].name; i++) {
		const char *n = run_schema[i].name;

		switch (run_schema[i].type) {
		case MG_OPT_INT:
			fprintf(f, "%s=%lld\n", n, (long long)mg_opt_int(o, n));
			break;
		case MG_OPT_FLOAT:
			fprintf(f, "%s=%a\n", n, mg_opt_float(o, n));
			break;
		case MG_OPT_BOOL:
			fprintf(f, "%s=%d\n", n, mg_opt_bool(o, n));
			break;
		case MG_OPT_ENUM:
			fprintf(f, "%s=%d\n", n, mg_opt_enum(o, n));
			break;
		default:
			fprintf(f, "%s=%s\n", n, mg_opt_str(o, n));
		}
	}
	fclose(f);
	return buf;
}

static void t_print_config(void)
{
	static const char *const sets[] = {"run.lr=0.3", "run.epochs=5",
					   "run.data=/d"};
	char path[] = "/tmp/mg_test_config_XXXXXX";
	struct mg_opts *o, *o2;
	struct mg_diag d = {0};
	struct mg_config *cfg;
	char *a, *b, *printed = NULL;
	size_t len = 0;
	FILE *f;
	int fd;

	/* the layout: schema order, comments in one column */
	o = run_case("minimal.ini", sets, 3, "", 0);
	CHECK(o != NULL);
	if (!o)
		return;
	f = open_memstream(&printed, &len);
	mg_opts_print(f, o);
	fclose(f);
	CHECK_STR(printed, "[run]\n"
			   "epochs    = 5    ; --set\n"
			   "batch     = 64   ; default\n"
			   "lr        = 0.3  ; --set\n"
			   "shuffle   = true ; default\n"
			   "precision = fp32 ; default\n"
			   "tag       =      ; default\n"
			   "data      = /d   ; --set\n"
			   "seed      = 7\n");
	free(printed);
	mg_opts_free(o);

	/* print, parse the output back, validate again: same values (a
	 * file elsewhere, so relative paths would not survive) */
	o = run_case("good.ini", sets, 2, "", 0);
	CHECK(o != NULL);
	if (!o)
		return;
	fd = mkstemp(path);
	CHECK(fd >= 0);
	f = fdopen(fd, "w");
	mg_opts_print(f, o);
	fclose(f);
	cfg = mg_config_parse_file(path, &d);
	o2 = cfg ? mg_opts_build(cfg, "run", run_schemas, 1, &d) : NULL;
	CHECK_INT(mg_diag_count(&d), 0);
	CHECK(o2 != NULL);
	if (o2) {
		a = values_text(o);
		b = values_text(o2);
		CHECK_STR(b, a);
		free(a);
		free(b);
	}
	unlink(path);
	mg_opts_free(o2);
	mg_config_free(cfg);
	mg_diag_free(&d);
	mg_opts_free(o);

	/* the same with defaults (now written, so given) */
	o = run_case("minimal.ini", NULL, 0, "", 0);
	CHECK(o != NULL);
	if (!o)
		return;
	strcpy(path, "/tmp/mg_test_config_XXXXXX");
	fd = mkstemp(path);
	f = fdopen(fd, "w");
	mg_opts_print(f, o);
	fclose(f);
	cfg = mg_config_parse_file(path, &d);
	o2 = cfg ? mg_opts_build(cfg, "run", run_schemas, 1, &d) : NULL;
	CHECK(o2 != NULL);
	if (o2) {
		a = values_text(o);
		b = values_text(o2);
		CHECK_STR(b, a);
		free(a);
		free(b);
		CHECK(!mg_opt_given(o, "batch") && mg_opt_given(o2, "batch"));
	}
	unlink(path);
	mg_opts_free(o2);
	mg_config_free(cfg);
	mg_diag_free(&d);
	mg_opts_free(o);
}

static void t_float_round_trip(void)
{
	static const double xs[] = {0.1, 1e-7, 3.0, 0.30000000000000004,
				    2.5e-5};
	static const struct mg_option fs[] = {
		MG_OPT_F("x", "0", 0, 0, "x"),
		MG_OPT_END,
	};
	const struct mg_option *const schemas[] = {fs};
	struct mg_diag d = {0};
	size_t i;

	for (i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
		char *src = fmt("[f]\nx = %.17g\n", xs[i]), *out = NULL;
		struct mg_config *cfg =
			mg_config_parse_string(src, "f.ini", NULL, &d);
		struct mg_opts *o = mg_opts_build(cfg, "f", schemas, 1, &d);
		struct mg_config *cfg2;
		struct mg_opts *o2;
		size_t len = 0;
		FILE *f = open_memstream(&out, &len);

		mg_opts_print(f, o);
		fclose(f);
		cfg2 = mg_config_parse_string(out, "g.ini", NULL, &d);
		o2 = mg_opts_build(cfg2, "f", schemas, 1, &d);
		CHECK(o2 && mg_opt_float(o2, "x") == xs[i]);
		mg_opts_free(o);
		mg_opts_free(o2);
		mg_config_free(cfg);
		mg_config_free(cfg2);
		free(src);
		free(out);
	}
	CHECK_INT(mg_diag_count(&d), 0);
	mg_diag_free(&d);
}

static void t_suggest(void)
{
	static const char *const c[] = {"epochs", "batch_size", "lr",
					"precision", "learning_rate"};

	CHECK_STR(mg_suggest("epoch", c, 5), "epochs");
	CHECK_STR(mg_suggest("epcohs", c, 5), "epochs");
	CHECK_STR(mg_suggest("Epochs", c, 5), "epochs");
	CHECK_STR(mg_suggest("batch", c, 5), "batch_size");
	CHECK_STR(mg_suggest("lt", c, 5), "lr");
	CHECK_STR(mg_suggest("precsion", c, 5), "precision");
	/* longer words allow more edits: 2 here */
	CHECK_STR(mg_suggest("lerning_rat", c, 5), "learning_rate");
	CHECK(mg_suggest("xy", c, 5) == NULL);
	CHECK_STR(mg_suggest("epxxhs", c, 5), "epochs");
	CHECK(mg_suggest("epxxxs", c, 5) == NULL);
	/* never more than 3 */
	CHECK(mg_suggest("lexxxxng_rate", c, 5) == NULL);
	CHECK(mg_suggest("colour", c, 5) == NULL);
	CHECK(mg_suggest("x", c, 5) == NULL);
	CHECK(mg_suggest("ep", c, 5) == NULL); /* prefixes: 4+ characters */
	CHECK(mg_suggest("", c, 5) == NULL);
}

static const struct {
	const char *name;
	void (*fn)(void);
} cases[] = {
	{"unknown_key", t_unknown_key},
	{"duplicate_key", t_duplicate_key},
	{"duplicate_section", t_duplicate_section},
	{"bad_int", t_bad_int},
	{"bad_float", t_bad_float},
	{"bad_bool", t_bad_bool},
	{"bad_enum", t_bad_enum},
	{"out_of_range", t_out_of_range},
	{"empty_value", t_empty_value},
	{"missing_required", t_missing_required},
	{"syntax_error", t_syntax_error},
	{"key_before_section", t_key_before_section},
	{"unreadable", t_unreadable},
	{"unknown_section", t_unknown_section},
	{"many_errors", t_many_errors},
	{"set_override", t_set_override},
	{"set_bad_value", t_set_bad_value},
	{"set_malformed", t_set_malformed},
	{"path_resolution", t_path_resolution},
	{"resolve_entry", t_resolve_entry},
	{"group_section", t_group_section},
	{"defaults", t_defaults},
	{"values", t_values},
	{"given", t_given},
	{"bool_spellings", t_bool_spellings},
	{"syntax_details", t_syntax_details},
	{"schema_bugs", t_schema_bugs},
	{"accessor_abort", t_accessor_abort},
	{"help", t_help},
	{"print_config", t_print_config},
	{"float_round_trip", t_float_round_trip},
	{"suggest", t_suggest},
};

#define NCASES (sizeof(cases) / sizeof(cases[0]))

static int run_one(const char *name)
{
	size_t i;
	int before = failures;

	for (i = 0; i < NCASES; i++) {
		if (strcmp(cases[i].name, name) == 0) {
			cases[i].fn();
			printf("%s %s\n", failures == before ? "ok  " : "FAIL",
			       name);
			return 0;
		}
	}
	fprintf(stderr, "unknown case '%s'\n", name);
	failures++;
	return -1;
}

int main(int argc, char **argv)
{
	int i;

	if (argc > 1 && strcmp(argv[1], "--list") == 0) {
		for (i = 0; i < (int)NCASES; i++)
			printf("%s\n", cases[i].name);
		return 0;
	}
	if (chdir(MG_TEST_DATA) != 0 || !realpath(".", data_dir)) {
		perror(MG_TEST_DATA);
		return 1;
	}
	if (argc > 1) {
		for (i = 1; i < argc; i++)
			run_one(argv[i]);
	} else {
		for (i = 0; i < (int)NCASES; i++)
			run_one(cases[i].name);
	}
	return failures ? 1 : 0;
}
