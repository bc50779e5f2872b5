/*
 * core_schema.c - declared options of the core's own sections. Validated
 * like plugin options, so typos get the same file:line messages.
 */
#include "engine/core_schema.h"

const struct mg_option mg_run_schema[] = {
	MG_OPT_E("device", "cpu", "cpu|cuda",
		 "where to compute: cpu, or cuda (one GPU per rank)"),
	MG_OPT_I("gpus", "1", 1, 1024,
		 "ranks to start on this machine, one per GPU (cuda): with "
		 "more than 1 and no outer launcher, mgrun starts and "
		 "supervises them itself; under srun or mpirun each process "
		 "is one rank and this is not used"),
	MG_OPT_E("precision", "fp32", "fp32|fp64|fp16|bf16",
		 "fp32, fp64: parameters, activations and gradients in that "
		 "type; fp16, bf16 (cuda): activations and gradients in half "
		 "precision, fp32 master weights and optimizer state, dynamic "
		 "loss scaling for fp16"),
	MG_OPT_B("tf32", "false",
		 "cuda: let fp32 convolutions and matrix products use the "
		 "tensor cores' TF32 mode (inputs rounded to 10 mantissa bits, "
		 "fp32 accumulation), as PyTorch does for convolutions by "
		 "default; off, fp32 is exact fp32"),
	MG_OPT_I("epochs", "1", 1, 100000, "training epochs"),
	MG_OPT_I("max_steps", "0", 0, 1e12,
		 "stop after this many optimizer steps in total (0: run all "
		 "epochs)"),
	MG_OPT_I("stop_after", "0", 0, 1e12,
		 "stop this process (with a checkpoint) after this many steps, "
		 "leaving the schedule as it is: for time-limited allocations; "
		 "continue with --resume (0: run to the end)"),
	MG_OPT_B("pin_memory", "true",
		 "page-locked host staging buffers, so input copies run "
		 "asynchronously (cuda)"),
	MG_OPT_B("cuda_graph", "true",
		 "capture the training step (transform, forward, backward, "
		 "optimizer) as a CUDA graph after two eager steps and replay "
		 "it: removes per-kernel launch overhead (cuda)"),
	MG_OPT_B("static_batch", "false",
		 "benchmarks: read, copy and transform the first step's batch "
		 "once and train on it every step, so the step is timed alone, "
		 "as benchmarks that replay one static device batch time it; "
		 "needs run.eval = false (not for training a model)"),
	MG_OPT_I("batch_size", "64", 1, 1 << 20,
		 "samples per rank per step (the global batch is this times "
		 "the ranks that compute different samples)"),
	MG_OPT_I("grad_accum", "1", 1, 1 << 16,
		 "micro-batches per optimizer step: gradients of grad_accum "
		 "forward/backward passes of batch_size are summed before one "
		 "optimizer step, equal to one grad_accum times larger batch "
		 "(every shipped strategy)"),
	MG_OPT_I("eval_batch_size", "256", 1, 1 << 20,
		 "samples per evaluation batch"),
	MG_OPT_B("eval", "true", "evaluate on the test split after each epoch"),
	MG_OPT_I("eval_every", "0", 0, 1e12,
		 "also evaluate every this many optimizer steps inside epochs "
		 "(with run.eval; 0: only at epoch ends); reported in "
		 "report.json's evals and TensorBoard's eval/ curves"),
	MG_OPT_I("eval_limit", "0", 0, 1e12,
		 "batches of run.eval_batch_size a rank evaluates at each "
		 "run.eval_every point (0: the whole test split); the epoch "
		 "ends always evaluate it whole"),
	MG_OPT_I("early_stop_patience", "0", 0, 1000000,
		 "stop (with a checkpoint, status stopped) when the held-out "
		 "loss has not improved for this many evaluations in a row "
		 "(0: never)"),
	MG_OPT_B("tensorboard", "true",
		 "write TensorBoard scalars (loss, learning rate, gradient "
		 "norm, step and phase times, memory by category, held-out "
		 "metrics) to an event file in the run directory, flushed "
		 "every step: `tensorboard --logdir runs/` shows live curves"),
	MG_OPT_I("seed", "42", 0, 9.2e18,
		 "seed for initialisation, shuffling and dropout; equal seeds "
		 "give equal runs"),
	MG_OPT_I("threads", "0", 0, 1024, "CPU threads for ops (0: all cores)"),
	MG_OPT_I("log_every", "50", 1, 1e9,
		 "print a progress line every this many steps when not on a "
		 "terminal"),
	MG_OPT_B("csv_full_precision", "false",
		 "write steps.csv's loss and grad_norm with 17 significant "
		 "digits (a double exactly), so two runs' curves can be "
		 "compared bit for bit; false: 9 and 6 digits"),
	MG_OPT_I("checkpoint_every", "0", 0, 1e12,
		 "also checkpoint every this many steps (0: at the end of each "
		 "epoch and of the run only)"),
	MG_OPT_F("checkpoint_every_s", "0", 0, 1e9,
		 "also checkpoint after the step during which this many "
		 "seconds passed since the last checkpoint: bounds the work a "
		 "kill -9 or a crash loses, whatever the step time (0: off)"),
	MG_OPT_F("collective_timeout_s", "600", 0, 1e9,
		 "several ranks: stop the whole job, naming the rank, the "
		 "collective and the step, when one collective (or the wait "
		 "for one) makes no progress for this many seconds - a peer "
		 "stuck in a kernel or a lost connection - instead of hanging "
		 "until the scheduler kills it; each wait is timed on its own, "
		 "so a slow step is never stopped (0: off)"),
	MG_OPT_B("checkpoint", "true", "write checkpoints"),
	MG_OPT_P("out_dir", "",
		 "folder that holds run directories (empty: runs/ in the "
		 "current directory; a relative path given in the INI file is "
		 "relative to the INI file's folder, one given by --set to "
		 "the current directory)"),
	MG_OPT_S("name", "",
		 "run directory name under out_dir (default: the INI file's "
		 "name)"),
	MG_OPT_END,
};

const struct mg_option mg_optimizer_schema[] = {
	MG_OPT_E("name", "sgd", "sgd|adamw", "optimizer"),
	MG_OPT_F("lr", "0.05", 0, 100, "peak learning rate"),
	MG_OPT_F("momentum", "0.9", 0, 1, "SGD momentum"),
	MG_OPT_F("dampening", "0", 0, 1, "SGD dampening"),
	MG_OPT_B("nesterov", "false", "SGD Nesterov momentum"),
	MG_OPT_F("weight_decay", "0", 0, 10,
		 "SGD: L2 penalty; AdamW: decoupled decay"),
	MG_OPT_B("decay_norm_and_bias", "false",
		 "apply weight decay to norm weights and biases too"),
	MG_OPT_F("beta1", "0.9", 0, 0.999999, "AdamW beta1"),
	MG_OPT_F("beta2", "0.999", 0, 0.99999999, "AdamW beta2"),
	MG_OPT_F("eps", "1e-8", 0, 1, "AdamW epsilon"),
	MG_OPT_F("max_grad_norm", "0", 0, 1e9,
		 "clip the global gradient L2 norm to this (0: no clipping)"),
	MG_OPT_E("schedule", "cosine", "constant|cosine",
		 "learning-rate schedule after warmup"),
	MG_OPT_I("warmup_steps", "0", 0, 1e12,
		 "linear warmup from 0 to lr over this many steps"),
	MG_OPT_F("min_lr", "0", 0, 100, "final learning rate of the cosine"),
	MG_OPT_END,
};

const struct mg_option mg_profile_schema[] = {
	MG_OPT_B("enabled", "false",
		 "collect CUDA API calls, memory copies, kernels and NCCL "
		 "collectives with CUPTI inside the run, over the window below "
		 "(cuda)"),
	MG_OPT_I("first_step", "5", 0, 1e12,
		 "first step of the profiling window (after the CUDA graph "
		 "capture, which happens at the run's third step)"),
	MG_OPT_I("steps", "20", 0, 1e12,
		 "steps in the window (0: to the end of the run)"),
	MG_OPT_F("seconds", "0", 0, 1e9,
		 "end the window after this many seconds instead (0: use "
		 "steps); the seed paper profiled the first 720 s"),
	MG_OPT_I("top_kernels", "10", 0, 1000,
		 "compute kernels listed by total time"),
	MG_OPT_B("nvtx", "true",
		 "mark each phase with an NVTX range, for Nsight Systems"),
	MG_OPT_END,
};

const struct mg_option mg_plugin_section_schema[] = {
	MG_OPT_S("name", "", "plugin name (found along the plugin path)"),
	MG_OPT_P("path", "",
		 "explicit plugin file, relative to the INI file (instead of "
		 "name)"),
	MG_OPT_END,
};

const char *mg_run_out_dir(const struct mg_opts *run)
{
	const char *d = mg_opt_str(run, "out_dir");
	return d[0] ? d : "runs";
}
