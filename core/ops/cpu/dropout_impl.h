/*
 * dropout_impl.h - dropout kernel for element type T (FN(name) suffix),
 * instantiated by dropout.c. Forward and backward are the same masked
 * scale: out[i] = in[i] * (keep(i) ? 1 / (1 - p) : 0).
 */

static void FN(dropout_apply)(const T *in, T *out, int64_t n, double p,
			      uint64_t key, int64_t offset, int nt)
{
	if (p >= 1) {
		for (int64_t i = 0; i < n; i++)
			out[i] = 0;
		return;
	}
	const T scale = (T)(1.0 / (1.0 - p));
#pragma omp parallel for num_threads(nt) schedule(static)
	for (int64_t i = 0; i < n; i++) {
		const bool keep =
			mg_rng_uniform(key, (uint64_t)(offset + i)) >= p;
		out[i] = keep ? in[i] * scale : (T)0;
	}
}

#undef T
#undef FN
