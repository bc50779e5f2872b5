/*
 * test_fashion.c - the real Fashion-MNIST files (Debian's
 * dataset-fashion-mnist) load through the IDX reader with the known
 * counts, label histograms, first labels and pixel checksums. Skips (77)
 * when the files are not installed.
 *
 * usage: test_fashion [DIR]
 */
#include <inttypes.h>
#include <math.h>
#include <unistd.h>

#include "idx.h"
#include "testutil.h"

/* Reference values computed independently from the .gz files with zlib
 * (FNV-1a 64 over the payload bytes, pixel sums, histograms). */
static const uint8_t train_first_labels[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
static const uint8_t test_first_labels[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
static const uint8_t train_img0_row14[28] = {
	0,   0,	  1,   4,   6,	 7,   2,   0,	0,   0,	  0,   0,   237, 226,
	217, 223, 222, 219, 222, 221, 216, 223, 229, 215, 218, 255, 77,	 0};

static void check_split(const char *dir, const char *img, const char *lbl,
			int64_t count, const uint8_t *first_labels,
			uint64_t img_fnv, uint64_t img0_fnv, uint64_t img0_sum)
{
	char ip[1024], lp[1024];
	struct idx_split s;

	snprintf(ip, sizeof(ip), "%s/%s", dir, img);
	snprintf(lp, sizeof(lp), "%s/%s", dir, lbl);
	int rc = idx_load_split(ip, lp, 10, 0, &s);
	CHECK(rc == 0);
	if (rc) {
		fprintf(stderr, "  %s\n", mg_last_error());
		return;
	}
	CHECK(s.count == count && s.rows == 28 && s.cols == 28);
	CHECK(memcmp(s.labels, first_labels, 10) == 0);

	int64_t hist[10] = {0};
	for (int64_t i = 0; i < s.count; i++)
		hist[s.labels[i]]++;
	for (int k = 0; k < 10; k++)
		CHECK(hist[k] == count / 10);

	uint64_t sum = 0;
	for (int i = 0; i < 784; i++)
		sum += s.images[i];
	CHECK(sum == img0_sum);
	CHECK(fnv1a(s.images, 784) == img0_fnv);
	CHECK(fnv1a(s.images, (size_t)(s.count * 784)) == img_fnv);
	if (count == 60000)
		CHECK(memcmp(s.images + 14 * 28, train_img0_row14, 28) == 0);

	/* limit: the first N, same bytes. */
	struct idx_split l;
	rc = idx_load_split(ip, lp, 10, 100, &l);
	CHECK(rc == 0 && l.count == 100);
	if (rc == 0) {
		CHECK(memcmp(l.images, s.images, 100 * 784) == 0);
		CHECK(memcmp(l.labels, s.labels, 100) == 0);
		idx_split_free(&l);
	}

	/* The normalisation defaults in the plugin come from here. */
	if (count == 60000) {
		double m = 0, q = 0;
		const int64_t n = s.count * 784;
		for (int64_t i = 0; i < n; i++) {
			double x = s.images[i] / 255.0;
			m += x;
			q += x * x;
		}
		m /= (double)n;
		double sd = sqrt(q / (double)n - m * m);
		printf("fashion-mnist train: mean %.6f std %.6f\n", m, sd);
		CHECK(fabs(m - 0.28604) < 5e-6 && fabs(sd - 0.35302) < 5e-6);
	}
	idx_split_free(&s);
}

int main(int argc, char **argv)
{
	const char *dir =
		argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
	char probe[1024];

	snprintf(probe, sizeof(probe), "%s/train-images-idx3-ubyte.gz", dir);
	if (access(probe, R_OK) != 0) {
		printf("test_fashion: %s not installed, skipped\n", probe);
		return 77;
	}
	check_split(dir, "train-images-idx3-ubyte.gz",
		    "train-labels-idx1-ubyte.gz", 60000, train_first_labels,
		    0x050b77af9a8ee8ceull, 0x674b256561eaaeceull, 76247);
	check_split(dir, "t10k-images-idx3-ubyte.gz",
		    "t10k-labels-idx1-ubyte.gz", 10000, test_first_labels,
		    0xf7f117c45d853273ull, 0x385faf9d3b841015ull, 33456);
	return t_done("test_fashion");
}
