/*
 * tb_events.c - TensorBoard event files (tb_events.h). The protobuf is
 * written by hand: an Event is wall_time (field 1, double), step (2,
 * varint) and either file_version (3, string) or a Summary (5), whose
 * repeated Value (1) holds tag (1, string) and simple_value (2, float).
 * That is all TensorBoard needs for scalars, and it spares the project a
 * protobuf dependency for three message types.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/tb_events.h"
#include "mg/log.h"

static uint32_t crc_table[256];

/* The reflected Castagnoli polynomial, table built on first use. */
static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t mg_crc32c(const void *p, size_t n)
{
	if (!crc_table[1])
		crc_init();
	const uint8_t *b = p;
	uint32_t c = 0xffffffffu;
	for (size_t i = 0; i < n; i++)
		c = crc_table[(c ^ b[i]) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

uint32_t mg_crc32c_masked(const void *p, size_t n)
{
	uint32_t c = mg_crc32c(p, n);
	return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put(struct mg_tb *tb, const void *p, size_t n)
{
	if (tb->err)
		return;
	if (tb->len + n > tb->cap) {
		size_t cap = tb->cap ? tb->cap : 256;
		while (cap < tb->len + n)
			cap *= 2;
		uint8_t *q = realloc(tb->buf, cap);
		if (!q) {
			tb->err = 1;
			return;
		}
		tb->buf = q;
		tb->cap = cap;
	}
	memcpy(tb->buf + tb->len, p, n);
	tb->len += n;
}

static void put_varint(struct mg_tb *tb, uint64_t v)
{
	uint8_t b[10];
	int n = 0;
	do {
		b[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			b[n] |= 0x80;
		n++;
	} while (v);
	put(tb, b, (size_t)n);
}

/* Bytes put_varint writes for v. */
static size_t varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >>= 7)
		n++;
	return n;
}

static void put_le(struct mg_tb *tb, uint64_t v, int bytes)
{
	uint8_t b[8];
	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	put(tb, b, (size_t)bytes);
}

/* Field key: number << 3 | wire type (0 varint, 1 64-bit, 2 bytes,
 * 5 32-bit). */
static void put_key(struct mg_tb *tb, int field, int wire)
{
	put_varint(tb, (uint64_t)(field << 3 | wire));
}

static void put_string(struct mg_tb *tb, int field, const char *s)
{
	size_t n = strlen(s);
	put_key(tb, field, 2);
	put_varint(tb, n);
	put(tb, s, n);
}

/* The event's header: wall_time and step. */
static void event_head(struct mg_tb *tb, double wall, int64_t step)
{
	uint64_t bits;
	memcpy(&bits, &wall, sizeof bits);
	tb->len = 0;
	tb->err = 0;
	put_key(tb, 1, 1);
	put_le(tb, bits, 8);
	put_key(tb, 2, 0);
	put_varint(tb, (uint64_t)step);
}

/* Frame the built event as one record and flush it. */
static int write_record(struct mg_tb *tb)
{
	if (tb->err)
		return mg_error("tensorboard: out of memory");
	uint8_t head[12];
	uint64_t n = tb->len;
	for (int i = 0; i < 8; i++)
		head[i] = (uint8_t)(n >> (8 * i));
	uint32_t c = mg_crc32c_masked(head, 8);
	for (int i = 0; i < 4; i++)
		head[8 + i] = (uint8_t)(c >> (8 * i));
	uint32_t d = mg_crc32c_masked(tb->buf, tb->len);
	uint8_t tail[4];
	for (int i = 0; i < 4; i++)
		tail[i] = (uint8_t)(d >> (8 * i));
	if (fwrite(head, 1, sizeof head, tb->f) != sizeof head ||
	    fwrite(tb->buf, 1, tb->len, tb->f) != tb->len ||
	    fwrite(tail, 1, sizeof tail, tb->f) != sizeof tail || fflush(tb->f))
		return mg_error("tensorboard: writing an event: %s",
				strerror(errno));
	return 0;
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int mg_tb_open(struct mg_tb *tb, const char *dir)
{
	memset(tb, 0, sizeof *tb);
	char host[256] = "host", path[4096];
	gethostname(host, sizeof host - 1);
	host[sizeof host - 1] = 0;
	snprintf(path, sizeof path, "%s/events.out.tfevents.%lld.%s.%ld.mgrun",
		 dir, (long long)time(NULL), host, (long)getpid());
	tb->f = fopen(path, "wb");
	if (!tb->f)
		return mg_error("tensorboard: %s: %s", path, strerror(errno));
	event_head(tb, wall_now(), 0);
	put_string(tb, 3, "brain.Event:2");
	if (write_record(tb)) {
		mg_tb_close(tb);
		return -1;
	}
	return 0;
}

void mg_tb_begin(struct mg_tb *tb, int64_t step)
{
	if (!tb->f)
		return;
	tb->step = step;
	tb->wall = wall_now();
	event_head(tb, tb->wall, step);
	tb->summary_at = tb->len;
}

void mg_tb_value(struct mg_tb *tb, const char *tag, double v)
{
	if (!tb->f || !isfinite(v))
		return; /* TensorBoard draws no point for a missing value */
	/* Summary.Value (tag, simple_value) as one length-delimited value
	 * (field 1) of the summary, which mg_tb_end wraps */
	const size_t n = strlen(tag);
	put_key(tb, 1, 2);
	put_varint(tb, 1 + varint_len(n) + n + 1 + 4);
	put_string(tb, 1, tag);
	float f = (float)v;
	uint32_t bits;
	memcpy(&bits, &f, sizeof bits);
	put_key(tb, 2, 5);
	put_le(tb, bits, 4);
}

int mg_tb_end(struct mg_tb *tb)
{
	if (!tb->f || tb->err)
		return tb->f ? mg_error("tensorboard: out of memory") : 0;
	size_t vals = tb->len - tb->summary_at;
	if (!vals)
		return 0;
	/* Event.summary (field 5) wraps the values: move them behind its
	 * key and length. */
	uint8_t *copy = malloc(vals);
	if (!copy)
		return mg_error("tensorboard: out of memory");
	memcpy(copy, tb->buf + tb->summary_at, vals);
	tb->len = tb->summary_at;
	put_key(tb, 5, 2);
	put_varint(tb, vals);
	put(tb, copy, vals);
	free(copy);
	return write_record(tb);
}

void mg_tb_close(struct mg_tb *tb)
{
	if (tb->f)
		fclose(tb->f);
	free(tb->buf);
	memset(tb, 0, sizeof *tb);
}
