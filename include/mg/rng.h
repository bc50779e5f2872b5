/*
 * rng.h - counter-based random numbers.
 *
 * Every random value is a pure function of (key, counter), so parameter
 * initialisation, shuffling and dropout give the same values whatever the
 * rank count, shard layout or resume point.
 */
#ifndef MG_RNG_H
#define MG_RNG_H

#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A well-mixed 64-bit hash of (key, counter) (SplitMix64 finaliser). */
static inline uint64_t mg_rng_u64(uint64_t key, uint64_t counter)
{
	uint64_t z = key + 0x9E3779B97F4A7C15ull * (counter + 1);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* MurmurHash3's 64-bit finaliser: a bijective mix of one word, for hash
 * tables and content hashes (not a random stream: use mg_rng_u64). */
static inline uint64_t mg_fmix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Uniform in [0, 1) with 53 bits. */
static inline double mg_rng_uniform(uint64_t key, uint64_t counter)
{
	return (double)(mg_rng_u64(key, counter) >> 11) * 0x1.0p-53;
}

/* Derive a sub-key: mix a key with a label (unit index, epoch, ...). */
static inline uint64_t mg_rng_key(uint64_t key, uint64_t label)
{
	return mg_rng_u64(key ^ 0xD1B54A32D192ED03ull, label);
}

/* Standard normal (Box-Muller over two counters). */
MG_EXPORT double mg_rng_normal(uint64_t key, uint64_t counter);
/* The epoch's permutation of 0..n-1 (Fisher-Yates driven by key). */
MG_EXPORT void mg_rng_permutation(uint64_t key, int64_t n, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
