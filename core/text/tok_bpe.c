/*
 * tok_bpe.c - the BPE model on one pre-tokenized piece: initial symbols
 * (bytes for byte-level vocabularies; characters otherwise, with
 * <0xNN> byte fallback and a fused unk), then merges by rank. The merge
 * loop keeps the symbols in a linked list and candidate pairs in a binary
 * heap ordered by (rank, position), as tokenizers' Word::merge_all does,
 * so a long word (a whole SentencePiece-style line) costs O(n log n).
 */
#include <stdlib.h>

#include "mg/log.h"
#include "tok_internal.h"

struct bpe {
	struct tok_sym *sym;
	int32_t n;
	struct tok_heap_ent *heap;
	size_t nh;
};

static int heap_less(const struct tok_heap_ent *a, const struct tok_heap_ent *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct bpe *w, int32_t rank, int32_t pos, int32_t id,
		      int32_t l, int32_t r)
{
	size_t i = w->nh++;
	struct tok_heap_ent e = {rank, pos, id, l, r};
	while (i) {
		size_t p = (i - 1) / 2;
		if (!heap_less(&e, &w->heap[p]))
			break;
		w->heap[i] = w->heap[p];
		i = p;
	}
	w->heap[i] = e;
}

static struct tok_heap_ent heap_pop(struct bpe *w)
{
	struct tok_heap_ent top = w->heap[0], e = w->heap[--w->nh];
	size_t i = 0, n = w->nh;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && heap_less(&w->heap[c + 1], &w->heap[c]))
			c++;
		if (!heap_less(&w->heap[c], &e))
			break;
		w->heap[i] = w->heap[c];
		i = c;
	}
	if (n)
		w->heap[i] = e;
	return top;
}

static void add_sym(struct bpe *w, int32_t id, int32_t len)
{
	struct tok_sym *y = &w->sym[w->n];
	y->id = id;
	y->len = len;
	y->prev = w->n - 1;
	y->next = -1;
	if (w->n)
		w->sym[w->n - 1].next = w->n;
	w->n++;
}

static void try_pair(const struct mg_tokenizer *t, struct bpe *w, int32_t a)
{
	int32_t b = w->sym[a].next;
	if (b < 0)
		return;
	const struct tok_merge_ent *m =
		tok_merges_get(&t->merges, w->sym[a].id, w->sym[b].id);
	if (m)
		heap_push(w, m->rank, a, m->id, w->sym[a].id, w->sym[b].id);
}

/* The initial symbols of a character-level (SentencePiece-style) word. */
static void init_chars(const struct mg_tokenizer *t, struct bpe *w,
		       const char *s, size_t len)
{
	int32_t unk_len = 0; /* pending (fused) unk bytes */
	size_t i = 0;
	while (i < len) {
		uint32_t cp;
		int n = 1;
		int32_t id = (unsigned char)s[i] < 0x80
				     ? t->ascii_id[(unsigned char)s[i]]
				     : -1;
		if ((unsigned char)s[i] >= 0x80) {
			n = tok_utf8_decode(s + i, len - i, &cp);
			id = tok_strmap_get(&t->vocab, s + i, (size_t)n);
		}
		if (id >= 0) {
			if (unk_len)
				add_sym(w, t->unk_id, unk_len);
			unk_len = 0;
			add_sym(w, id, n);
		} else {
			int ok = t->byte_fallback;
			for (int k = 0; ok && k < n; k++)
				ok = t->byte_id[(unsigned char)s[i + k]] >= 0;
			if (ok) {
				if (unk_len)
					add_sym(w, t->unk_id, unk_len);
				unk_len = 0;
				for (int k = 0; k < n; k++)
					add_sym(w,
						t->byte_id[(
							unsigned char)s[i + k]],
						1);
			} else if (t->unk_id >= 0) {
				if (unk_len && !t->fuse_unk) {
					add_sym(w, t->unk_id, unk_len);
					unk_len = 0;
				}
				unk_len += n;
			} /* no unk token: the character is dropped */
		}
		i += (size_t)n;
	}
	if (unk_len)
		add_sym(w, t->unk_id, unk_len);
}

int tok_bpe_word(const struct mg_tokenizer *t, struct tok_scratch *s,
		 const char *word, size_t len, struct mg_ids *out)
{
	if (!len)
		return 0;
	if (t->ignore_merges) { /* Llama 3: a whole-vocab piece as is */
		int32_t id = tok_strmap_get(t->bytelevel ? &t->raw : &t->vocab,
					    word, len);
		if (id >= 0)
			return tok_ids_push(out, id);
	}
	if (len > s->symcap) {
		size_t cap = len < 64 ? 64 : len;
		void *a = realloc(s->sym, cap * sizeof *s->sym);
		if (!a)
			return mg_error("tokenizer: out of memory");
		s->sym = a;
		void *b = realloc(s->heap, cap * 2 * sizeof *s->heap);
		if (!b)
			return mg_error("tokenizer: out of memory");
		s->heap = b;
		s->symcap = cap;
	}
	struct bpe w = {s->sym, 0, s->heap, 0};
	if (t->bytelevel) {
		for (size_t i = 0; i < len; i++) {
			int32_t id = t->byte_id[(unsigned char)word[i]];
			if (id >= 0)
				add_sym(&w, id, 1);
			else if (t->unk_id >= 0)
				add_sym(&w, t->unk_id, 1);
		}
	} else {
		init_chars(t, &w, word, len);
	}
	/* each merge removes one symbol and pushes at most two pairs, so
	 * the heap never exceeds 2 * len */
	for (int32_t i = 0; i + 1 < w.n; i++)
		try_pair(t, &w, i);
	while (w.nh) {
		struct tok_heap_ent top = heap_pop(&w);
		struct tok_sym *a = &w.sym[top.pos];
		if (!a->len || a->next < 0)
			continue;
		struct tok_sym *b = &w.sym[a->next];
		if (a->id != top.l || b->id != top.r) {
			/* the pair changed since the push: valid only if the
			 * new pair merges to the same token (tokenizers'
			 * test), else a neighbour merged first */
			const struct tok_merge_ent *m =
				tok_merges_get(&t->merges, a->id, b->id);
			if (!m || m->id != top.id)
				continue;
		}
		a->id = top.id;
		a->len += b->len;
		b->len = 0;
		a->next = b->next;
		if (a->next >= 0)
			w.sym[a->next].prev = top.pos;
		if (a->prev >= 0)
			try_pair(t, &w, a->prev);
		try_pair(t, &w, top.pos);
	}
	for (int32_t i = w.n ? 0 : -1; i >= 0; i = w.sym[i].next)
		if (tok_ids_push(out, w.sym[i].id))
			return -1;
	return 0;
}
