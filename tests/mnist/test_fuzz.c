/*
 * test_fuzz.c - random single-byte corruptions, truncations and appended
 * bytes of small good IDX files (plain and gzip) must never crash or hang
 * the reader (run it under ASan/UBSan: -DMG_SANITIZE=ON). Every outcome
 * is either an error naming the file or, where the damage cannot matter,
 * exactly the original data.
 *
 * usage: test_fuzz FIXTURE_DIR [ITERATIONS]
 */
#include <sys/stat.h>

#include "idx.h"
#include "mg/rng.h"
#include "testutil.h"

#define N 10
#define R 8
#define C 8
#define PAY (N * R * C)

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	const int iters = argc > 2 ? atoi(argv[2]) : 200;
	uint8_t pixels[PAY], labels[N];
	uint8_t plain[16 + PAY], lplain[8 + N];
	const uint32_t dims[3] = {N, R, C}, ldims[1] = {N};
	char good_gz[512], path[512], lpath[512];
	int ok = 0, failed = 0;

	mkdir(dir, 0777);
	for (int i = 0; i < PAY; i++)
		pixels[i] = (uint8_t)((i % 61) * 4);
	for (int i = 0; i < N; i++)
		labels[i] = (uint8_t)i;
	size_t plen = idx_bytes(plain, 0x08, 3, dims, pixels, PAY);
	size_t llen = idx_bytes(lplain, 0x08, 1, ldims, labels, N);
	snprintf(good_gz, sizeof(good_gz), "%s/fuzz-good.gz", dir);
	write_file(good_gz, 1, plain, plen);
	size_t zlen;
	uint8_t *gz = read_whole(good_gz, &zlen);
	snprintf(lpath, sizeof(lpath), "%s/fuzz-labels", dir);
	write_file(lpath, 0, lplain, llen);

	for (int it = 0; it < iters; it++) {
		/* Targets: 0 plain images, 1 gzip images, 2 plain labels. */
		const int target = it % 3;
		const uint8_t *src = target == 0   ? plain
				     : target == 1 ? gz
						   : lplain;
		const size_t len = target == 0	 ? plen
				   : target == 1 ? zlen
						 : llen;
		uint8_t buf[16 + PAY + zlen + 64];
		uint64_t r = mg_rng_u64(0x5eed, (uint64_t)it);
		size_t at = (size_t)(r % len);
		int op = (int)((r >> 32) % 10);
		size_t n = len;
		int changed_header = 0, changed_payload = 0;

		memcpy(buf, src, len);
		if (op < 7) { /* change one byte to a different value */
			buf[at] ^= (uint8_t)(1 + (r >> 40) % 255);
			if (target != 1) {
				size_t hdr = target == 2 ? 8 : 16;
				changed_header = at < hdr;
				changed_payload = at >= hdr;
			}
		} else if (op < 9) { /* truncate */
			n = at;
		} else { /* append 1..64 bytes */
			size_t k = 1 + (r >> 40) % 64;
			for (size_t i = 0; i < k; i++)
				buf[len + i] = (uint8_t)(r >> (i % 8));
			n = len + k;
		}
		snprintf(path, sizeof(path), "%s/fuzz-%03d%s", dir, it,
			 target == 1 ? ".gz" : "");
		write_file(path, 0, buf, n);

		struct idx_split s;
		int rc = target == 2 ? idx_load_split(good_gz, path, 10, 0, &s)
				     : idx_load_split(path, lpath, 10, 0, &s);
		if (rc == 0) {
			ok++;
			/* Only damage that leaves the data intact may pass:
			 * a payload byte (plain) or a gzip header field. */
			CHECK(n == len && !changed_header);
			CHECK(s.count == N && s.rows == R && s.cols == C);
			if (target == 2) {
				CHECK(changed_payload ||
				      memcmp(s.labels, labels, N) == 0);
			} else if (!changed_payload) {
				CHECK(memcmp(s.images, pixels, PAY) == 0);
			} else {
				CHECK(memcmp(s.images, buf + 16, PAY) == 0);
			}
			idx_split_free(&s);
		} else {
			failed++;
			const char *msg = mg_last_error();
			CHECK(strstr(msg, path) != NULL);
			/* A changed plain header byte or a changed length
			 * must fail. */
			CHECK(!changed_payload || target == 2);
			if (it < 30)
				printf("  %s\n", msg);
		}
		remove(path);
	}
	free(gz);
	printf("test_fuzz: %d iterations: %d loaded, %d rejected\n", iters, ok,
	       failed);
	CHECK(ok > 0 && failed > 0);
	return t_done("test_fuzz");
}
