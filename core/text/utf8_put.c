/*
 * utf8_put.c - a code point as UTF-8 (mg/tokenizer.h), in a file of its
 * own so that the chat-template lexer's fuzz build takes it without the
 * tokenizer.
 */
#include "mg/tokenizer.h"

size_t mg_utf8_put(uint32_t cp, char *o)
{
	if (cp < 0x80)
		return o[0] = (char)cp, 1;
	if (cp < 0x800)
		return o[0] = (char)(0xC0 | cp >> 6),
		       o[1] = (char)(0x80 | (cp & 0x3F)), 2;
	if (cp < 0x10000)
		return o[0] = (char)(0xE0 | cp >> 12),
		       o[1] = (char)(0x80 | (cp >> 6 & 0x3F)),
		       o[2] = (char)(0x80 | (cp & 0x3F)), 3;
	o[0] = (char)(0xF0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
	o[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}
