/*
 * tb_events.h - TensorBoard event files written by the run itself, so
 * `tensorboard --logdir runs/` shows live curves without a Python logger:
 * TFRecord framing (length, masked CRC-32C of it, the record, masked
 * CRC-32C of it) around hand-encoded `tensorflow.Event` protobufs whose
 * summaries hold scalar values (tag, simple_value).
 */
#ifndef MG_TB_EVENTS_H
#define MG_TB_EVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct mg_tb {
	FILE *f;
	uint8_t *buf; /* the event being built */
	size_t len, cap;
	size_t summary_at; /* where the open event's summary begins */
	int64_t step;
	double wall;
	int err; /* a failed allocation: the event is dropped, not cut */
};

/* Open DIR/events.out.tfevents.<unix seconds>.<host>.<pid>.mgrun (a new
 * file each process, as TensorBoard expects of a resumed run) and write
 * the file_version event. Returns 0 or -1 with the error set. */
int mg_tb_open(struct mg_tb *tb, const char *dir);
/* One event at `step`: begin, any number of values, end (which writes
 * and flushes it, so the curves are live). Does nothing when not open. */
void mg_tb_begin(struct mg_tb *tb, int64_t step);
void mg_tb_value(struct mg_tb *tb, const char *tag, double v);
int mg_tb_end(struct mg_tb *tb);
void mg_tb_close(struct mg_tb *tb);

/* CRC-32C (Castagnoli) of n bytes, and TFRecord's masked form. */
uint32_t mg_crc32c(const void *p, size_t n);
uint32_t mg_crc32c_masked(const void *p, size_t n);

#endif
