/*
 * tok_bytelevel.c - GPT-2's byte <-> unicode map (bytes_to_unicode):
 * printable Latin-1 bytes stand for themselves, the other 68 bytes for
 * U+0100 upwards, so that every byte sequence is a printable string. The
 * byte-level vocabularies (Llama 3, GPT-2) are written in it.
 */
#include <pthread.h>

#include "tok_internal.h"

#define R4(a) a, a + 1, a + 2, a + 3
#define R8(a) R4(a), R4(a + 4)
#define R16(a) R8(a), R8(a + 8)

/* 0x00-0x20 -> U+0100-U+0120, 0x21-0x7E themselves, 0x7F-0xA0 ->
 * U+0121-U+0142, 0xA1-0xAC themselves, 0xAD -> U+0143, 0xAE-0xFF
 * themselves. */
const uint16_t tok_byte_to_cp[256] = {
	R16(0x100), R16(0x110), 0x120,			    /* 00-20 */
	R8(0x21),   R4(0x29),	0x2D,	   0x2E,      0x2F, /* 21-2F */
	R16(0x30),  R16(0x40),	R16(0x50), R8(0x60),  R4(0x68),
	0x6C, /* ..6C */
	0x6D,	    0x6E,	0x6F,	   R8(0x70),  R4(0x78),
	0x7C,	    0x7D,	0x7E,		  /* ..7E */
	R16(0x121), R16(0x131), 0x141,	   0x142, /* 7F-A0 */
	R8(0xA1),   R4(0xA9),	0x143,		  /* A1-AD */
	0xAE,	    0xAF,	R16(0xB0), R16(0xC0), R16(0xD0),
	R16(0xE0),  R16(0xF0)};

static int16_t cp_byte[0x144];
static pthread_once_t cp_once = PTHREAD_ONCE_INIT;

static void cp_init(void)
{
	for (int i = 0; i < 0x144; i++)
		cp_byte[i] = -1;
	for (int b = 0; b < 256; b++)
		cp_byte[tok_byte_to_cp[b]] = (int16_t)b;
}

int tok_cp_to_byte(uint32_t cp)
{
	pthread_once(&cp_once, cp_init);
	return cp < 0x144 ? cp_byte[cp] : -1;
}

long tok_bytelevel_unmap(const char *s, size_t len, char *out)
{
	size_t i = 0;
	long n = 0;
	while (i < len) {
		uint32_t cp;
		i += (size_t)tok_utf8_decode(s + i, len - i, &cp);
		int b = tok_cp_to_byte(cp);
		if (b < 0)
			return -1;
		out[n++] = (char)b;
	}
	return n;
}
