/*
 * tokenizer.h - Hugging Face tokenizer.json, encode and decode.
 *
 * The text side of the LLM track: dataset plugins (instruction data,
 * plain-text corpora), `mgrun tokenize` and `mgrun generate` turn text
 * into the ids the model was trained on with the tokenizer the model
 * ships, so it lives in libmg and third-party dataset plugins use it too.
 *
 * Supported is what Llama 2, Llama 3 and Mistral files use: the BPE model
 * (merges by rank, byte-level or SentencePiece-style with byte fallback
 * and unk), normalizers (Prepend, Replace with a string, Strip,
 * Sequence; NFC and Lowercase, which no supported file uses, are refused),
 * pre-tokenizers (Split with a PCRE2 regex, ByteLevel, Metaspace,
 * Sequence), post-processors (TemplateProcessing, ByteLevel, Sequence)
 * and decoders (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace,
 * Sequence). Added tokens are matched in the raw text first, as
 * `tokenizers` does by default. A file that uses anything else is refused
 * at load with the component named.
 *
 * A loaded tokenizer is immutable: encode and decode may run on many
 * threads at once.
 */
#ifndef MG_TOKENIZER_H
#define MG_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mg_tokenizer;

/* A growable id vector; encode appends. Free v with free(). */
struct mg_ids {
	int32_t *v;
	int64_t n, cap;
};

/* Special tokens from tokenizer_config.json (or the file's added tokens
 * when there is no config): -1 where the tokenizer has none. */
struct mg_tokenizer_specials {
	int32_t bos, eos, pad, unk;
	int add_bos, add_eos; /* tokenizer_config's add_bos_token and
				 add_eos_token, when present; else -1 */
};

/* Encode flags. */
enum {
	/* Run the post-processor (BOS for Llama 2): `tokenizer(text)`'s
	 * add_special_tokens=True. */
	MG_TOK_ADD_SPECIAL = 1 << 0,
	/* Do not match added/special tokens in the text: "<|eot_id|>" in
	 * user data is then plain text, not the control token. */
	MG_TOK_NO_ADDED = 1 << 1,
};

/* Decode flags. */
enum {
	MG_TOK_SKIP_SPECIAL = 1 << 0, /* skip_special_tokens=True */
};

/*
 * Load path: a tokenizer.json, or a folder holding one. tokenizer_config
 * .json beside it is read when present (BOS/EOS/PAD names, add_bos_token,
 * chat_template). Returns NULL after mg_error() said what is wrong (the
 * file and, for JSON errors, the offset).
 */
MG_EXPORT struct mg_tokenizer *mg_tokenizer_load(const char *path);
MG_EXPORT void mg_tokenizer_free(struct mg_tokenizer *t);

/* Append the ids of text[0..len) (UTF-8) to out. Invalid UTF-8 is an
 * error naming the byte offset. Returns 0 or -1 (error set). */
MG_EXPORT int mg_tokenizer_encode(const struct mg_tokenizer *t,
				  const char *text, size_t len, unsigned flags,
				  struct mg_ids *out);

/* Decode ids into a NUL-terminated malloc'd string (length in *len when
 * len is not NULL). An id outside the vocabulary is an error. */
MG_EXPORT int mg_tokenizer_decode(const struct mg_tokenizer *t,
				  const int32_t *ids, int64_t n, unsigned flags,
				  char **text, size_t *len);

/* The offset of the first byte of s[0..len) that is not valid UTF-8
 * (overlong forms, surrogates and code points above U+10FFFF are
 * invalid), or len when all is valid: what encode checks, for readers
 * that report bad data by file and offset before tokenizing. */
MG_EXPORT size_t mg_utf8_valid(const char *s, size_t len);
/* Code point cp (at most 0x10FFFF) as UTF-8 into out (room for 4 bytes);
 * returns the bytes written (ABI 1.11). */
MG_EXPORT size_t mg_utf8_put(uint32_t cp, char *out);

/* Added in ABI 1.10: the first string of JSON text s[0..len) that holds a
 * NUL character (a \u0000 escape or a raw 0 byte), which a C string
 * (cJSON's valuestring) silently cuts there. Returns the offset of its
 * opening quote, or len when no string holds one; the field it belongs
 * to is copied into key (at most keycap bytes with the NUL, as written in
 * the file): the object key it is the value of, the key naming the array
 * that holds it, or the key itself; "" at the top level. For readers
 * that refuse such text by file, line and field; s should be valid JSON
 * (parse it first: other text is scanned safely, but the field named may
 * be wrong). */
MG_EXPORT size_t mg_json_nul_string(const char *s, size_t len, char *key,
				    size_t keycap);

/* One past the largest id (model vocabulary and added tokens). */
MG_EXPORT int64_t mg_tokenizer_vocab_size(const struct mg_tokenizer *t);
/* The id of a token string (vocabulary or added), or -1. */
MG_EXPORT int32_t mg_tokenizer_token_id(const struct mg_tokenizer *t,
					const char *token);
/* The token string of id as stored in the file, or NULL. */
MG_EXPORT const char *mg_tokenizer_token(const struct mg_tokenizer *t,
					 int32_t id);
/* 1 when id is an added token marked special. */
MG_EXPORT int mg_tokenizer_is_special(const struct mg_tokenizer *t, int32_t id);
MG_EXPORT void mg_tokenizer_specials(const struct mg_tokenizer *t,
				     struct mg_tokenizer_specials *out);
/* tokenizer_config.json's chat_template, or NULL (the "default" one of
 * the list form). mg/chat.h renders it (mg_tokenizer_apply_chat_template);
 * datasets also use the text to recognise the chat format (Llama 3
 * headers, Llama 2 [INST], ChatML). */
MG_EXPORT const char *mg_tokenizer_chat_template(const struct mg_tokenizer *t);
/* A hex digest of the files' bytes (tokenizer.json and the config), for
 * caches keyed on the tokenizer. */
MG_EXPORT const char *mg_tokenizer_digest(const struct mg_tokenizer *t);

#ifdef __cplusplus
}
#endif
#endif
