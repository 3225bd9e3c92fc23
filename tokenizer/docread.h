/* tokenizer/docread.h: streams documents out of text or JSONL files, one at a time, so a
 * corpus is never loaded whole (memory is bounded by the longest document).
 *
 *   text:  each line is a document (the trailing "\n" or "\r\n" is not part of it); empty
 *          lines are skipped, so document k is not line k+1 when the file has some: the
 *          count is kept (docread_skipped) for the caller to report.
 *   jsonl: each non-blank line is a JSON object whose "text" string is the document; blank
 *          lines (empty or spaces and tabs) are skipped and counted the same way.
 *
 * Errors name the place: "data/x.jsonl:17: no \"text\" string field". */
#ifndef TOKENIZER_DOCREAD_H
#define TOKENIZER_DOCREAD_H
#include <stddef.h>
#include <stdint.h>

typedef enum { DOCREAD_TEXT = 0, DOCREAD_JSONL = 1 } docread_format_t;

typedef struct docread docread_t;

/* path "-" reads stdin. Returns 0 or a negative BPE_E* status. */
int docread_open(docread_t **r, const char *path, docread_format_t fmt, char *err, size_t errlen);
/* 1 with the next document in *text and *len (valid until the next call), 0 at the end, or a
 * negative BPE_E* status (BPE_EFORMAT for a bad line, BPE_EIO for a read error). */
int docread_next(docread_t *r, const char **text, size_t *len, char *err, size_t errlen);
uint64_t docread_offset(const docread_t *r); /* bytes consumed so far */
uint64_t docread_size(const docread_t *r);   /* file size, 0 when unknown (a pipe) */
uint64_t docread_skipped(const docread_t *r); /* blank lines skipped so far */
void docread_close(docread_t **r);
/* "text" -> DOCREAD_TEXT, "jsonl" -> DOCREAD_JSONL; -1 otherwise. */
int docread_format_parse(const char *s);
#endif
