/*
 * test_idx.c - the IDX reader against fixtures written here: good files
 * (plain and gzip) and one broken file per kind of damage, each checked
 * for an error that names the file and the specific problem.
 *
 * usage: test_idx FIXTURE_DIR
 */
#include <inttypes.h>
#include <sys/stat.h>

#include "idx.h"
#include "testutil.h"

#define N 3
#define R 4
#define C 5
#define PAY (N * R * C)

static const char *dir;
static uint8_t pixels[PAY];
static const uint8_t labels[N] = {3, 0, 9};
static const uint32_t img_dims[3] = {N, R, C};
static const uint32_t lbl_dims[1] = {N};

static char *fx(const char *name)
{
	static char buf[8][512];
	static int k;
	char *p = buf[k++ % 8];
	snprintf(p, 512, "%s/%s", dir, name);
	return p;
}

/* Write an images file with the given header fields and payload size. */
static char *images(const char *name, int gz, uint8_t type, int ndim,
		    const uint32_t *dims, size_t pay_len)
{
	uint8_t buf[64 + PAY + 64];
	uint8_t pay[PAY + 64];
	memcpy(pay, pixels, PAY);
	for (size_t i = PAY; i < sizeof(pay); i++)
		pay[i] = 0xEE;
	size_t n = idx_bytes(buf, type, ndim, dims, pay, pay_len);
	char *p = fx(name);
	write_file(p, gz, buf, n);
	return p;
}

static char *labels_file(const char *name, int gz, uint32_t count,
			 const uint8_t *vals)
{
	uint8_t buf[64];
	size_t n = idx_bytes(buf, 0x08, 1, &count, vals, count);
	char *p = fx(name);
	write_file(p, gz, buf, n);
	return p;
}

static void test_good(void)
{
	for (int gz = 0; gz < 2; gz++) {
		char *im = images(gz ? "good-img.gz" : "good-img", gz, 0x08, 3,
				  img_dims, PAY);
		char *lb = labels_file(gz ? "good-lbl.gz" : "good-lbl", gz, N,
				       labels);
		struct idx_file f;
		CHECK(idx_read(im, 3, &f) == 0);
		CHECK(f.ndim == 3 && f.dims[0] == N && f.dims[1] == R &&
		      f.dims[2] == C && f.bytes == PAY);
		CHECK(f.data && memcmp(f.data, pixels, PAY) == 0);
		idx_free(&f);

		struct idx_split s;
		int rc = idx_load_split(im, lb, 10, 0, &s);
		CHECK(rc == 0);
		if (rc == 0) {
			CHECK(s.count == N && s.rows == R && s.cols == C);
			CHECK(memcmp(s.images, pixels, PAY) == 0);
			CHECK(memcmp(s.labels, labels, N) == 0);
			idx_split_free(&s);
		} else {
			fprintf(stderr, "  %s\n", mg_last_error());
		}

		/* limit keeps the first samples. */
		rc = idx_load_split(im, lb, 10, 2, &s);
		CHECK(rc == 0 && s.count == 2);
		if (rc == 0) {
			CHECK(memcmp(s.images, pixels, 2 * R * C) == 0);
			CHECK(s.labels[0] == 3 && s.labels[1] == 0);
			idx_split_free(&s);
		}
		/* A limit above the count keeps all. */
		rc = idx_load_split(im, lb, 10, 1000, &s);
		CHECK(rc == 0 && s.count == N);
		if (rc == 0)
			idx_split_free(&s);
	}
}

static void test_truncated(void)
{
	struct idx_file f;
	char *p;

	/* Header only: no payload at all. */
	p = images("hdr-only", 0, 0x08, 3, img_dims, 0);
	CHECK_ERR(idx_read(p, 3, &f), p, "truncated",
		  "header declares 3 x 4 x 5 = 60 payload bytes",
		  "only 0 present", "data ends at offset 16");
	CHECK(f.data == NULL);

	/* Half the payload, plain and gzip (a well-formed gzip stream of a
	 * short IDX file: the same message). */
	p = images("half", 0, 0x08, 3, img_dims, PAY / 2);
	CHECK_ERR(idx_read(p, 3, &f), p, "truncated", "60 payload bytes",
		  "only 30 present", "data ends at offset 46");
	p = images("half.gz", 1, 0x08, 3, img_dims, PAY / 2);
	CHECK_ERR(idx_read(p, 3, &f), p, "truncated", "60 payload bytes",
		  "only 30 present", "data ends at offset 46");

	/* The compressed file itself cut short: where it ends is given. */
	size_t len;
	char at[64];
	p = images("cut.gz", 1, 0x08, 3, img_dims, PAY);
	uint8_t *z = read_whole(p, &len);
	p = fx("cut-short.gz");
	write_file(p, 0, z, len - 12);
	snprintf(at, sizeof(at), "compressed file ends at byte %zu", len - 12);
	CHECK_ERR(idx_read(p, 3, &f), p, "truncated", "60 payload bytes",
		  "of the decompressed stream", "gzip stream is cut off", at);
	/* ... and cut inside the 8-byte gzip trailer (CRC, length): the
	 * payload is all there but the stream is incomplete. */
	p = fx("cut-trailer.gz");
	write_file(p, 0, z, len - 3);
	snprintf(at, sizeof(at), "ends at byte %zu before the gzip trailer",
		 len - 3);
	CHECK_ERR(idx_read(p, 3, &f), p, "incomplete gzip stream", at);
	free(z);

	/* Empty file, and a header cut inside the dimensions. */
	p = fx("empty");
	write_file(p, 0, "", 0);
	CHECK_ERR(idx_read(p, 3, &f), p, "file ends at offset 0",
		  "inside the 4-byte IDX magic");
	uint8_t hdr[16];
	idx_bytes(hdr, 0x08, 3, img_dims, NULL, 0);
	p = fx("hdr-cut");
	write_file(p, 0, hdr, 10);
	CHECK_ERR(idx_read(p, 3, &f), p, "header ends at offset 10",
		  "inside dimension 1 of 3");
	p = fx("hdr-cut.gz");
	write_file(p, 1, hdr, 10);
	CHECK_ERR(idx_read(p, 3, &f), p, "header ends at offset 10",
		  "inside dimension 1 of 3");
}

static void test_header(void)
{
	struct idx_file f;
	char *p;
	uint8_t buf[16 + PAY];
	size_t n = idx_bytes(buf, 0x08, 3, img_dims, pixels, PAY);

	buf[0] = 0x01;
	buf[1] = 0x02;
	p = fx("bad-magic");
	write_file(p, 0, buf, n);
	CHECK_ERR(idx_read(p, 3, &f), p, "bad IDX magic 01 02 08 03",
		  "at offset 0", "expected 00 00 08 03");
	p = fx("bad-magic.gz");
	write_file(p, 1, buf, n);
	CHECK_ERR(idx_read(p, 3, &f), p, "bad IDX magic 01 02 08 03",
		  "after gunzip");

	p = images("type-float", 0, 0x0D, 3, img_dims, PAY);
	CHECK_ERR(idx_read(p, 3, &f), p, "element type 0x0d (float)",
		  "offset 2", "expected 0x08");
	p = images("type-junk", 0, 0x42, 3, img_dims, PAY);
	CHECK_ERR(idx_read(p, 3, &f), p, "element type 0x42",
		  "not an IDX type");

	/* Images file with 2 dims; labels file read as images and the other
	 * way round. */
	const uint32_t d2[2] = {N, R * C};
	p = images("ndim2", 0, 0x08, 2, d2, PAY);
	CHECK_ERR(idx_read(p, 3, &f), p, "has 2 dimensions (byte at",
		  "offset 3", "expected 3 for images");
	p = labels_file("as-images", 0, N, labels);
	CHECK_ERR(idx_read(p, 3, &f), p, "has 1 dimension (byte at",
		  "expected 3 for images");
	p = images("as-labels", 0, 0x08, 3, img_dims, PAY);
	CHECK_ERR(idx_read(p, 1, &f), p, "has 3 dimensions",
		  "expected 1 for labels");

	const uint32_t dz[3] = {N, 0, C};
	p = images("zero-dim", 0, 0x08, 3, dz, 0);
	CHECK_ERR(idx_read(p, 3, &f), p, "dimension 1 (at offset 8) is 0");
	const uint32_t dz0[3] = {0, R, C};
	p = images("zero-count", 0, 0x08, 3, dz0, 0);
	CHECK_ERR(idx_read(p, 3, &f), p, "dimension 0 (at offset 4) is 0");

	const uint32_t dbig[3] = {0xFFFFFFFFu, R, C};
	p = images("huge-dim", 0, 0x08, 3, dbig, PAY);
	CHECK_ERR(idx_read(p, 3, &f), p, "dimension 0 (at offset 4)",
		  "4294967295", "more than the");
	const uint32_t dprod[3] = {100000000u, 28, 28};
	p = images("huge-product", 0, 0x08, 3, dprod, PAY);
	CHECK_ERR(idx_read(p, 3, &f), p, "100000000 x 28 x 28",
		  "more than the 4294967296 bytes allowed");
	/* Under the cap but a lie: must fail fast as truncated, without
	 * allocating the 3.9 GB the header claims. */
	const uint32_t dlie[3] = {5000000u, 28, 28};
	p = images("lying-count", 0, 0x08, 3, dlie, PAY);
	CHECK_ERR(idx_read(p, 3, &f), p, "truncated",
		  "3920000000 payload bytes", "only 60 present");
}

static void test_trailing(void)
{
	struct idx_file f;
	char *p;
	uint8_t buf[16 + PAY + 5];
	size_t n = idx_bytes(buf, 0x08, 3, img_dims, pixels, PAY);

	memset(buf + n, 0xAB, 5);
	for (int gz = 0; gz < 2; gz++) {
		p = fx(gz ? "trailing.gz" : "trailing");
		write_file(p, gz, buf, n + 5);
		CHECK_ERR(idx_read(p, 3, &f), p, "5 trailing bytes",
			  "payload, which ends at offset 76");
	}
	uint8_t lb[8 + N + 1];
	size_t m = idx_bytes(lb, 0x08, 1, lbl_dims, labels, N);
	lb[m] = 1;
	p = fx("trailing-lbl");
	write_file(p, 0, lb, m + 1);
	CHECK_ERR(idx_read(p, 1, &f), p, "1 trailing byte after",
		  "ends at offset 11");
}

/* gzip-level damage: corrupt deflate data, a bad CRC, garbage after the
 * stream; and a valid multi-member stream (as `cat a.gz b.gz` makes). */
static void test_gzip(void)
{
	struct idx_file f;
	size_t len;
	char at[64];
	char *p = images("gz-src.gz", 1, 0x08, 3, img_dims, PAY);
	uint8_t *z = read_whole(p, &len);
	uint8_t *buf = malloc(len + 16);

	/* Garbage after the stream. */
	memcpy(buf, z, len);
	memcpy(buf + len, "JUNK", 4);
	p = fx("gz-garbage.gz");
	write_file(p, 0, buf, len + 4);
	snprintf(at, sizeof(at), "at compressed offset %zu", len);
	CHECK_ERR(idx_read(p, 3, &f), p,
		  "garbage after the end of the gzip stream", at);

	/* CRC32 (trailer bytes len-8..len-5) wrong. */
	memcpy(buf, z, len);
	buf[len - 8] ^= 0xFF;
	p = fx("gz-crc.gz");
	write_file(p, 0, buf, len);
	CHECK_ERR(idx_read(p, 3, &f), p, "corrupt gzip data",
		  "incorrect data check");

	/* Unknown compression method in the gzip header (byte 2). */
	memcpy(buf, z, len);
	buf[2] = 7;
	p = fx("gz-method.gz");
	write_file(p, 0, buf, len);
	CHECK_ERR(idx_read(p, 3, &f), p, "corrupt gzip data",
		  "compressed offset", "unknown compression method");
	free(buf);
	free(z);

	/* Two members: header + 7 payload bytes, then the rest. */
	uint8_t raw[16 + PAY];
	size_t n = idx_bytes(raw, 0x08, 3, img_dims, pixels, PAY);
	char *a = fx("mm-a.gz"), *b = fx("mm-b.gz");
	write_file(a, 1, raw, 23);
	write_file(b, 1, raw + 23, n - 23);
	size_t la, lb;
	uint8_t *za = read_whole(a, &la), *zb = read_whole(b, &lb);
	uint8_t *cat = malloc(la + lb);
	memcpy(cat, za, la);
	memcpy(cat + la, zb, lb);
	p = fx("multi-member.gz");
	write_file(p, 0, cat, la + lb);
	CHECK(idx_read(p, 3, &f) == 0);
	CHECK(f.data && f.bytes == PAY && memcmp(f.data, pixels, PAY) == 0);
	idx_free(&f);
	free(cat);
	free(za);
	free(zb);
}

static void test_split_checks(void)
{
	struct idx_split s;
	char *im = images("sp-img", 0, 0x08, 3, img_dims, PAY);
	char *lb2 = labels_file("sp-lbl2", 0, 2, labels);
	const uint8_t bad[N] = {3, 0, 10};
	char *lbbad = labels_file("sp-lbl-bad.gz", 1, N, bad);
	char *lb = labels_file("sp-lbl", 0, N, labels);

	CHECK_ERR(idx_load_split(im, lb2, 10, 0, &s), im, lb2, "has 3 images",
		  "has 2 labels");
	CHECK(s.images == NULL && s.labels == NULL);
	CHECK_ERR(idx_load_split(im, lbbad, 10, 0, &s), lbbad,
		  "label 10 of sample 2", "at offset 10",
		  "out of range [0, 10)");
	/* Same labels, more classes: fine. */
	CHECK(idx_load_split(im, lbbad, 11, 0, &s) == 0);
	idx_split_free(&s);
	/* Errors in either file pass through with that file's name. */
	char *bad_img = fx("bad-magic");
	CHECK_ERR(idx_load_split(bad_img, lb, 10, 0, &s), bad_img, "magic");
	char *bad_lbl = fx("trailing-lbl");
	CHECK_ERR(idx_load_split(im, bad_lbl, 10, 0, &s), bad_lbl, "trailing");
}

static void test_files(void)
{
	struct idx_file f;
	char *p = fx("does-not-exist");

	CHECK_ERR(idx_read(p, 3, &f), p, "cannot open",
		  "No such file or directory");
	CHECK_ERR(idx_read(dir, 3, &f), dir, "not a regular file");
}

int main(int argc, char **argv)
{
	dir = argc > 1 ? argv[1] : ".";
	mkdir(dir, 0777);
	for (int i = 0; i < PAY; i++)
		pixels[i] = (uint8_t)(i * 37 + 11);

	test_good();
	test_truncated();
	test_header();
	test_trailing();
	test_gzip();
	test_split_checks();
	test_files();
	return t_done("test_idx");
}
