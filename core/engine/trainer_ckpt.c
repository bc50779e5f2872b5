/*
 * trainer_ckpt.c - the run's checkpoint: the strategy's tensors with the
 * counters that make a resumed run continue exactly (step, optimizer
 * step, loss scale, skipped steps) and what the data order depends on
 * (seed, global batch, grad_accum, training set size), each read back
 * range-checked against the others and against this run.
 */
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ckpt.h"
#include "engine/crash_point.h"
#include "engine/peft.h"
#include "engine/trainer.h"

int mg_trainer_save_checkpoint(struct mg_trainer *t, int64_t next_step)
{
	struct mg_ckpt ck;
	mg_ckpt_begin_write(&ck, &t->r.ctx);
	int rc = t->r.strat->save(t->r.inst[MG_SEC_STRATEGY], &ck);
	if (!rc && t->r.ctx.rank == 0) {
		char v[64], path[PATH_MAX + 32];
		mg_st_writer_meta(&ck.w, "format", MG_CKPT_FORMAT);
		snprintf(v, sizeof v, "%lld", (long long)next_step);
		mg_st_writer_meta(&ck.w, "next_step", v);
		snprintf(v, sizeof v, "%lld", (long long)t->opt_step);
		mg_st_writer_meta(&ck.w, "optimizer_step", v);
		snprintf(v, sizeof v, "%.17g", t->loss_scale);
		mg_st_writer_meta(&ck.w, "loss_scale", v);
		snprintf(v, sizeof v, "%lld", (long long)t->good_steps);
		mg_st_writer_meta(&ck.w, "good_steps", v);
		snprintf(v, sizeof v, "%llu",
			 (unsigned long long)t->r.ctx.seed);
		mg_st_writer_meta(&ck.w, "seed", v);
		snprintf(v, sizeof v, "%lld", (long long)t->skipped_steps);
		mg_st_writer_meta(&ck.w, "skipped_steps", v);
		snprintf(v, sizeof v, "%lld", (long long)t->r.accum);
		mg_st_writer_meta(&ck.w, "grad_accum", v);
		/* What the data order depends on, checked on --resume. */
		snprintf(v, sizeof v, "%lld",
			 (long long)t->batch * t->r.ctx.world);
		mg_st_writer_meta(&ck.w, "global_batch", v);
		snprintf(v, sizeof v, "%lld",
			 (long long)t->r.data->count(t->r.inst[MG_SEC_DATASET],
						     MG_SPLIT_TRAIN));
		mg_st_writer_meta(&ck.w, "train_samples", v);
		mg_st_writer_meta(&ck.w, "model",
				  t->r.s->plugin[MG_SEC_MODEL].desc->name);
		mg_st_writer_meta(&ck.w, "strategy",
				  t->r.s->plugin[MG_SEC_STRATEGY].desc->name);
		/* The experiment (fingerprint.h), compared on --resume. */
		if (t->fp.config)
			mg_st_writer_meta(&ck.w, "experiment", t->fp.config);
		if (t->fp.files)
			mg_st_writer_meta(&ck.w, "input_files", t->fp.files);
		/* The epochs so far, for the report of a resumed run. */
		char *ep = mg_epochs_text(t);
		rc = ep ? mg_st_writer_meta(&ck.w, "epochs", ep)
			: mg_error("out of memory");
		free(ep);
		/* The adapter folder before the checkpoint: a checkpoint in
		 * place has its adapter complete, and a crash before its
		 * rename leaves the older one, which --resume continues. */
		snprintf(path, sizeof path, "%s/" MG_CKPT_FILE, t->r.run_dir);
		rc = rc ||
		     mg_peft_export(&ck.w, t->r.s->plugin[MG_SEC_MODEL].desc,
				    t->r.s->opts[MG_SEC_MODEL], t->r.run_dir) ||
		     mg_st_writer_save(&ck.w, path);
		if (!rc)
			mg_crash_point("checkpoint");
	}
	mg_ckpt_free(&ck);
	return rc ? mg_error_prefix("checkpoint at step %lld",
				    (long long)next_step)
		  : 0;
}

/* A number read back from checkpoint metadata: all of the text a decimal
 * integer in [lo, hi], else an error naming the key and the range. */
static int meta_int(const struct mg_st_file *f, const char *key, int64_t lo,
		    int64_t hi, int64_t *out)
{
	const char *v = mg_st_meta(f, key);
	if (!v)
		return mg_error("%s: metadata '%s' missing (not an mgrun "
				"checkpoint?)",
				f->path, key);
	char *end = NULL;
	long long x = 0;
	errno = 0;
	if (*v == '-' || (*v >= '0' && *v <= '9'))
		x = strtoll(v, &end, 10);
	if (!end || end == v || *end || errno || x < lo || x > hi)
		return mg_error("%s: metadata %s = \"%s\" is not an integer in "
				"[%lld, %lld]",
				f->path, key, v, (long long)lo, (long long)hi);
	*out = x;
	return 0;
}

static int meta_seed(const struct mg_st_file *f, uint64_t *out)
{
	const char *v = mg_st_meta(f, "seed");
	char *end = NULL;
	errno = 0;
	if (v && *v >= '0' && *v <= '9')
		*out = strtoull(v, &end, 10);
	if (!end || end == v || *end || errno)
		return mg_error("%s: metadata seed = \"%s\" is not an unsigned "
				"64-bit integer",
				f->path, v ? v : "(missing)");
	return 0;
}

static int meta_scale(const struct mg_st_file *f, double *out)
{
	const char *v = mg_st_meta(f, "loss_scale");
	char *end = NULL;
	double x = 0;
	if (v && *v >= '0' && *v <= '9')
		x = strtod(v, &end);
	if (!end || end == v || *end || !(x >= 1 && x <= FLT_MAX))
		return mg_error("%s: metadata loss_scale = \"%s\" is not a "
				"number in [1, %g]",
				f->path, v ? v : "(missing)", (double)FLT_MAX);
	*out = x;
	return 0;
}

/* Every number in the checkpoint's metadata, range-checked against each
 * other and against this run. */
static int load_counters(struct mg_trainer *t, const struct mg_st_file *f)
{
	int64_t next;
	uint64_t seed = 0;
	if (meta_int(f, "next_step", 0, INT64_MAX, &next) ||
	    meta_int(f, "optimizer_step", 0, next, &t->opt_step) ||
	    meta_int(f, "skipped_steps", 0, next, &t->skipped_steps) ||
	    meta_int(f, "good_steps", 0, 1999, &t->good_steps) ||
	    meta_scale(f, &t->loss_scale) || meta_seed(f, &seed))
		return -1;
	if (seed != t->r.ctx.seed)
		return mg_error("%s was written with seed %llu, this run has "
				"seed %llu (resuming would change the data "
				"order)",
				f->path, (unsigned long long)seed,
				(unsigned long long)t->r.ctx.seed);
	/* Like the seed, the global batch and the training set size fix
	 * the data order (older checkpoints lack them: not checked). */
	int64_t gb = t->batch * t->r.ctx.world,
		n = t->r.data->count(t->r.inst[MG_SEC_DATASET], MG_SPLIT_TRAIN),
		ck_gb = gb, ck_n = n;
	if ((mg_st_meta(f, "global_batch") &&
	     meta_int(f, "global_batch", 1, INT64_MAX, &ck_gb)) ||
	    (mg_st_meta(f, "train_samples") &&
	     meta_int(f, "train_samples", 1, INT64_MAX, &ck_n)))
		return -1;
	if (ck_gb != gb)
		return mg_error("%s was written with a global batch of %lld "
				"(run.batch_size x ranks), this run has %lld "
				"(resuming would change the data order)",
				f->path, (long long)ck_gb, (long long)gb);
	int64_t ck_k = t->r.accum;
	if (mg_st_meta(f, "grad_accum") &&
	    meta_int(f, "grad_accum", 1, 1 << 16, &ck_k))
		return -1;
	if (ck_k != t->r.accum)
		return mg_error("%s was written with run.grad_accum = %lld, "
				"this run has %lld (resuming would change the "
				"data order)",
				f->path, (long long)ck_k,
				(long long)t->r.accum);
	if (ck_n != n)
		return mg_error("%s was written for %lld training samples, "
				"this run has %lld (dataset.limit_train "
				"changed? resuming would change the data "
				"order)",
				f->path, (long long)ck_n, (long long)n);
	if (next > t->total_steps)
		return mg_error("%s is at step %lld, beyond this run's %lld "
				"steps (run.max_steps or run.epochs lowered?)",
				f->path, (long long)next,
				(long long)t->total_steps);
	/* At the last step: a run whose final writes a crash cut short
	 * (no report.json saying "finished") is completed, a finished one
	 * refused. Rank 0's run directory decides for every rank. */
	if (next == t->total_steps && !t->eval_only) {
		double done = t->r.ctx.rank == 0 &&
			      mg_report_has_status(t->r.run_dir, "finished");
		if (t->r.ctx.world > 1 &&
		    t->r.comm->all_reduce_host(t->r.comm, &done, 1, MG_F64,
					       MG_REDUCE_MAX))
			return -1;
		if (done)
			return mg_error("%s is at step %lld of %lld: the run "
					"is complete, nothing to resume (raise "
					"run.max_steps or run.epochs to train "
					"on)",
					f->path, (long long)next,
					(long long)t->total_steps);
		t->finishing = true;
	}
	t->start_step = next;
	const char *ep = mg_st_meta(f, "epochs");
	return ep ? mg_epochs_parse(t, ep, f->path) : 0;
}

int mg_trainer_load_checkpoint(struct mg_trainer *t)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/" MG_CKPT_FILE, t->r.run_dir);
	struct mg_ckpt ck;
	if (mg_ckpt_open_read(&ck, &t->r.ctx, path)) {
		mg_ckpt_free(&ck);
		return mg_error_prefix("--resume");
	}
	int rc = 0;
	const char *fmt = mg_st_meta(&ck.f, "format");
	const char *model = mg_st_meta(&ck.f, "model");
	if (!fmt || strcmp(fmt, MG_CKPT_FORMAT))
		rc = mg_error("%s is not an mgrun checkpoint (metadata "
			      "format is not " MG_CKPT_FORMAT ")",
			      path);
	else if (!model ||
		 strcmp(model, t->r.s->plugin[MG_SEC_MODEL].desc->name))
		rc = mg_error("%s holds model '%s', this run is '%s'", path,
			      model ? model : "?",
			      t->r.s->plugin[MG_SEC_MODEL].desc->name);
	/* The experiment first: a changed option is named as such, not
	 * by the data order or size it changes. */
	else if (!t->eval_only &&
		 mg_fingerprint_check(&t->fp, path,
				      mg_st_meta(&ck.f, "experiment"),
				      mg_st_meta(&ck.f, "input_files"),
				      t->r.s->resume_changed))
		rc = -1;
	else if (!(rc = load_counters(t, &ck.f)))
		rc = t->r.strat->load(t->r.inst[MG_SEC_STRATEGY], &ck);
	/* A tensor the checkpoint holds and this model did not take
	 * would vanish from the next checkpoint (lora_targets narrowed). */
	const char *left = rc ? NULL : mg_ckpt_unread(&ck);
	if (left)
		rc = mg_error("%s holds tensor '%s', which this run's model "
			      "does not load (its options changed?): refusing "
			      "to drop it",
			      path, left);
	mg_ckpt_free(&ck);
	if (rc)
		return mg_error_prefix("--resume");
	mg_info("resumed from %s at step %lld", path, (long long)t->start_step);
	return 0;
}
