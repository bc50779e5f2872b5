/*
 * idx.c - MNIST IDX reader: plain or gzip (zlib's inflate, multi-member
 * streams allowed), every header byte validated, the payload length
 * checked against the decompressed stream in both directions (truncated,
 * trailing bytes), and nothing accepted after the gzip stream either.
 */
#include "idx.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "mg/log.h"

/* Bytes read from the file per read(), the most asked of read() or
 * inflate() at once, and how many trailing bytes are counted before the
 * reader stops counting ("at least N"). */
#define IDX_INBUF (1 << 16)
#define IDX_CHUNK (1 << 24)
#define IDX_TRAILING_COUNT_MAX (16LL << 20)

struct reader {
	const char *path;
	int fd;
	bool is_gzip;	/* the file starts with 1f 8b */
	int64_t offset; /* decompressed bytes consumed so far */
	/* gzip only */
	z_stream z;
	bool z_init;
	bool in_eof;	  /* read() returned 0 */
	bool z_end;	  /* clean end: last member complete, nothing after */
	bool z_cut;	  /* the file ended inside a gzip member */
	int64_t in_total; /* compressed bytes read from the file */
	uint8_t *inbuf;
};

/* Compressed bytes consumed by inflate so far. */
static int64_t z_pos(const struct reader *r)
{
	return r->in_total - (int64_t)r->z.avail_in;
}

/* Keep at least want (<= IDX_INBUF) unconsumed input bytes when the file
 * has them. Returns 0 or -1 (error set). */
static int z_fill(struct reader *r, unsigned want)
{
	while (r->z.avail_in < want && !r->in_eof) {
		if (r->z.avail_in && r->z.next_in != r->inbuf)
			memmove(r->inbuf, r->z.next_in, r->z.avail_in);
		r->z.next_in = r->inbuf;
		ssize_t n = read(r->fd, r->inbuf + r->z.avail_in,
				 IDX_INBUF - r->z.avail_in);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return mg_error("%s: read error at byte %" PRId64
					": %s",
					r->path, r->in_total, strerror(errno));
		if (n == 0)
			r->in_eof = true;
		r->z.avail_in += (uInt)n;
		r->in_total += n;
	}
	return 0;
}

/* Decompress up to len bytes into buf. Returns the count (short at the
 * end of the data: z_end or z_cut says which), or -1 (error set). */
static int64_t z_read(struct reader *r, uint8_t *buf, int64_t len)
{
	r->z.next_out = buf;
	r->z.avail_out = (uInt)len;
	while (r->z.avail_out > 0 && !r->z_end && !r->z_cut) {
		if (z_fill(r, 1))
			return -1;
		if (r->z.avail_in == 0) {
			/* No more input in the middle of a member. */
			r->z_cut = true;
			break;
		}
		int ret = inflate(&r->z, Z_NO_FLUSH);
		if (ret == Z_STREAM_END) {
			/* Another member may follow; anything else is
			 * garbage after the stream. */
			if (z_fill(r, 2))
				return -1;
			if (r->z.avail_in == 0) {
				r->z_end = true;
			} else if (r->z.avail_in >= 2 &&
				   r->z.next_in[0] == 0x1f &&
				   r->z.next_in[1] == 0x8b) {
				inflateReset(&r->z);
			} else {
				return mg_error(
					"%s: garbage after the end of "
					"the gzip stream, at compressed "
					"offset %" PRId64,
					r->path, z_pos(r));
			}
		} else if (ret != Z_OK && ret != Z_BUF_ERROR) {
			return mg_error("%s: corrupt gzip data at compressed "
					"offset %" PRId64 " (zlib: %s)",
					r->path, z_pos(r),
					r->z.msg ? r->z.msg : zError(ret));
		}
	}
	return len - (int64_t)r->z.avail_out;
}

static int64_t plain_read(struct reader *r, uint8_t *buf, int64_t len)
{
	int64_t got = 0;

	while (got < len) {
		ssize_t n = read(r->fd, buf + got, (size_t)(len - got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return mg_error(
				"%s: read error at offset %" PRId64 ": %s",
				r->path, r->offset + got, strerror(errno));
		if (n == 0)
			break;
		got += n;
	}
	return got;
}

/*
 * Read up to len bytes of (decompressed) data. Returns the count, short
 * only at the end of the data, or -1 with the error set (I/O error,
 * corrupt compressed data, garbage after the gzip stream). Why a gzip
 * stream ended early is left for zmsg().
 */
static int64_t rd(struct reader *r, void *buf, int64_t len)
{
	int64_t got = 0;

	while (got < len) {
		int64_t want = len - got < IDX_CHUNK ? len - got : IDX_CHUNK;
		int64_t n = r->is_gzip
				    ? z_read(r, (uint8_t *)buf + got, want)
				    : plain_read(r, (uint8_t *)buf + got, want);
		if (n < 0)
			return -1;
		got += n;
		if (n < want)
			break;
	}
	r->offset += got;
	return got;
}

/* Why the data ended early: "" for the end of a plain file or of a
 * complete gzip stream, else where the compressed file was cut. */
static const char *zmsg(struct reader *r, char *buf, size_t len)
{
	buf[0] = 0;
	if (r->is_gzip && r->z_cut)
		snprintf(buf, len,
			 "; the gzip stream is cut off: the compressed file "
			 "ends at byte %" PRId64 " inside it",
			 r->in_total);
	return buf;
}

static const char *type_name(unsigned t)
{
	switch (t) {
	case 0x08:
		return "unsigned byte";
	case 0x09:
		return "signed byte";
	case 0x0B:
		return "short";
	case 0x0C:
		return "int";
	case 0x0D:
		return "float";
	case 0x0E:
		return "double";
	default:
		return "not an IDX type";
	}
}

/* "3 x 4 x 5 = 60" (several dims) or "60" (one) into buf; without the
 * total when it is not wanted (or could overflow). */
static const char *dims_str(char *buf, size_t len, int ndim, const int64_t *d,
			    bool with_total)
{
	size_t o = 0;
	int64_t total = 1;

	buf[0] = 0;
	for (int i = 0; i < ndim && o < len; i++) {
		o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64,
				      i ? " x " : "", d[i]);
		if (with_total)
			total *= d[i];
	}
	if (with_total && ndim > 1 && o < len)
		snprintf(buf + o, len - o, " = %" PRId64, total);
	return buf;
}

static int read_header(struct reader *r, int ndim, struct idx_file *f)
{
	uint8_t m[4];
	char why[128];
	int64_t n = rd(r, m, 4);

	if (n < 0)
		return -1;
	if (n < 4)
		return mg_error("%s: file ends at offset %" PRId64 ", inside "
				"the 4-byte IDX magic%s",
				r->path, n, zmsg(r, why, sizeof(why)));
	if (m[0] != 0 || m[1] != 0)
		return mg_error("%s: bad IDX magic %02x %02x %02x %02x at "
				"offset 0 (expected 00 00 08 %02x)%s",
				r->path, m[0], m[1], m[2], m[3], ndim,
				r->is_gzip ? " after gunzip" : "");
	if (m[2] != 0x08)
		return mg_error("%s: IDX element type 0x%02x (%s) at offset 2 "
				"is not supported: expected 0x08 "
				"(unsigned byte)",
				r->path, m[2], type_name(m[2]));
	if (m[3] != ndim)
		return mg_error("%s: IDX file has %u dimension%s (byte at "
				"offset 3), expected %d for %s",
				r->path, m[3], m[3] == 1 ? "" : "s", ndim,
				ndim == 1 ? "labels" : "images");

	f->ndim = ndim;
	for (int i = 0; i < ndim; i++) {
		uint8_t b[4];
		int64_t off = r->offset;
		n = rd(r, b, 4);
		if (n < 0)
			return -1;
		if (n < 4)
			return mg_error("%s: header ends at offset %" PRId64
					", inside dimension %d of %d%s",
					r->path, off + n, i, ndim,
					zmsg(r, why, sizeof(why)));
		uint32_t d = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
			     (uint32_t)b[2] << 8 | b[3];
		if (d == 0)
			return mg_error("%s: dimension %d (at offset %" PRId64
					") is 0",
					r->path, i, off);
		if (d > IDX_MAX_DIM)
			return mg_error("%s: dimension %d (at offset %" PRId64
					") is %" PRIu32 ", more than the %lld "
					"allowed",
					r->path, i, off, d, IDX_MAX_DIM);
		f->dims[i] = d;
	}
	return 0;
}

/* Count what follows the payload, up to IDX_TRAILING_COUNT_MAX. Returns
 * the count, or -1 when the rest of a gzip stream is corrupt. */
static int64_t count_trailing(struct reader *r)
{
	static const int64_t scratch_len = 1 << 16;
	uint8_t *scratch = malloc(scratch_len);
	int64_t total = 0;

	if (!scratch)
		return mg_error("%s: out of memory", r->path);
	while (total < IDX_TRAILING_COUNT_MAX) {
		int64_t n = rd(r, scratch, scratch_len);
		if (n < 0) {
			total = -1;
			break;
		}
		if (n == 0)
			break;
		total += n;
	}
	free(scratch);
	return total;
}

static int read_payload(struct reader *r, struct idx_file *f)
{
	int64_t want = 1;
	char why[128], dims[96];

	for (int i = 0; i < f->ndim; i++) {
		want *= f->dims[i];
		if (want > IDX_MAX_PAYLOAD) {
			dims_str(dims, sizeof(dims), f->ndim, f->dims, false);
			return mg_error("%s: header declares %s elements, more "
					"than the %lld bytes allowed",
					r->path, dims, IDX_MAX_PAYLOAD);
		}
	}

	/* Grow the buffer as data arrives, so a header that lies about the
	 * size costs only what the file really holds. */
	const int64_t start = r->offset;
	int64_t cap = want < (1 << 20) ? want : (1 << 20), have = 0;
	uint8_t *buf = malloc((size_t)cap);
	if (!buf)
		return mg_error("%s: out of memory (%" PRId64 " bytes)",
				r->path, cap);
	while (have < want) {
		if (have == cap) {
			int64_t ncap = cap * 2 < want ? cap * 2 : want;
			uint8_t *nb = realloc(buf, (size_t)ncap);
			if (!nb) {
				free(buf);
				return mg_error("%s: out of memory (%" PRId64
						" bytes)",
						r->path, ncap);
			}
			buf = nb;
			cap = ncap;
		}
		int64_t n = rd(r, buf + have, cap - have);
		if (n < 0) {
			free(buf);
			return -1;
		}
		if (n == 0)
			break;
		have += n;
	}
	if (have < want) {
		dims_str(dims, sizeof(dims), f->ndim, f->dims, true);
		free(buf);
		return mg_error("%s: truncated: header declares %s payload "
				"bytes, only %" PRId64 " present (data ends "
				"at offset %" PRId64 "%s)%s",
				r->path, dims, have, start + have,
				r->is_gzip ? " of the decompressed stream" : "",
				zmsg(r, why, sizeof(why)));
	}

	int64_t extra = count_trailing(r);
	if (extra < 0) {
		free(buf);
		return -1;
	}
	if (extra > 0) {
		dims_str(dims, sizeof(dims), f->ndim, f->dims, true);
		free(buf);
		return mg_error(
			"%s: %s%" PRId64 " trailing byte%s after the "
			"payload, which ends at offset %" PRId64
			" (header declares %s bytes)",
			r->path,
			extra >= IDX_TRAILING_COUNT_MAX ? "at least " : "",
			extra, extra == 1 ? "" : "s", start + want, dims);
	}
	/* The payload is complete but the gzip stream is not: its CRC and
	 * length were never checked. */
	if (r->is_gzip && r->z_cut) {
		free(buf);
		return mg_error("%s: incomplete gzip stream after the full "
				"payload: the compressed file ends at byte "
				"%" PRId64 " before the gzip trailer",
				r->path, r->in_total);
	}
	f->data = buf;
	f->bytes = (size_t)want;
	return 0;
}

int idx_read(const char *path, int ndim, struct idx_file *out)
{
	struct reader r = {.path = path};
	struct stat st;
	uint8_t magic[2];
	int rc;

	memset(out, 0, sizeof(*out));
	if (ndim < 1 || ndim > IDX_MAX_DIMS)
		return mg_error("%s: cannot read %d-dimensional IDX files",
				path, ndim);
	/* O_NONBLOCK: a FIFO must not block the open; refused below. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return mg_error("%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return mg_error("%s: not a regular file", path);
	}
	r.fd = fd;
	r.is_gzip = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f &&
		    magic[1] == 0x8b;
	if (r.is_gzip) {
		r.inbuf = malloc(IDX_INBUF);
		/* 16 + MAX_WBITS: a gzip wrapper, CRC and length checked. */
		if (!r.inbuf || inflateInit2(&r.z, 16 + MAX_WBITS) != Z_OK) {
			free(r.inbuf);
			close(fd);
			return mg_error("%s: cannot start gzip decompression",
					path);
		}
		r.z_init = true;
	}

	rc = read_header(&r, ndim, out);
	if (rc == 0)
		rc = read_payload(&r, out);
	if (r.z_init)
		inflateEnd(&r.z);
	free(r.inbuf);
	close(fd);
	if (rc != 0)
		idx_free(out);
	return rc;
}

void idx_free(struct idx_file *f)
{
	free(f->data);
	memset(f, 0, sizeof(*f));
}

int idx_load_split(const char *images_path, const char *labels_path,
		   int num_classes, int64_t limit, struct idx_split *out)
{
	struct idx_file im, lb;

	memset(out, 0, sizeof(*out));
	if (idx_read(images_path, 3, &im))
		return -1;
	if (idx_read(labels_path, 1, &lb)) {
		idx_free(&im);
		return -1;
	}
	if (im.dims[0] != lb.dims[0]) {
		mg_error("%s has %" PRId64 " images but %s has %" PRId64
			 " labels",
			 images_path, im.dims[0], labels_path, lb.dims[0]);
		goto fail;
	}
	for (int64_t i = 0; i < lb.dims[0]; i++) {
		if (lb.data[i] >= num_classes) {
			mg_error("%s: label %u of sample %" PRId64
				 " (at offset %" PRId64 ") is out of range "
				 "[0, %d)",
				 labels_path, lb.data[i], i, i + 8,
				 num_classes);
			goto fail;
		}
	}

	out->count = im.dims[0];
	out->rows = im.dims[1];
	out->cols = im.dims[2];
	if (limit > 0 && limit < out->count)
		out->count = limit;
	out->images = im.data;
	out->labels = lb.data;
	/* Give back what the limit leaves unused (shrinking cannot fail in
	 * any way that matters: keep the old block if it does). */
	if (out->count < im.dims[0]) {
		uint8_t *p =
			realloc(out->images,
				(size_t)(out->count * out->rows * out->cols));
		if (p)
			out->images = p;
		p = realloc(out->labels, (size_t)out->count);
		if (p)
			out->labels = p;
	}
	return 0;
fail:
	idx_free(&im);
	idx_free(&lb);
	return -1;
}

void idx_split_free(struct idx_split *s)
{
	free(s->images);
	free(s->labels);
	memset(s, 0, sizeof(*s));
}
