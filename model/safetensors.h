/* model/safetensors.h: read and write Hugging Face safetensors files.
 *
 * Layout (https://huggingface.co/docs/safetensors): an 8-byte little-endian u64 N, then N bytes
 * of JSON (padded with spaces to a multiple of 8), then the data section. The JSON maps each
 * tensor name to {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the
 * data section, plus an optional "__metadata__" object of string -> string.
 *
 * We write only F32 (what our models hold) and store "xxh3" = hex XXH3-64 of the data section
 * in __metadata__, so a flipped byte is caught on open. We read F32 as tensor views and, so a
 * foreign file still opens, also the other dtypes (raw bytes, see st_find_raw).
 *
 * Ownership: an st_file_t owns a private copy-on-write mapping of the file; every pointer it
 * hands out (names, metadata values, tensor data) is valid until st_close. Writing into a
 * view's data changes only this process's copy, never the file. */
#ifndef MODEL_SAFETENSORS_H
#define MODEL_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "model/tensor.h"

/* Status codes (0 ok). Each call that fails also writes one line into err. */
enum {
    ST_OK = 0,
    ST_EARG = -1,      /* bad argument (NULL, n < 0, duplicate or empty name, ...) */
    ST_EIO = -2,       /* open/read/write/fsync/rename failed */
    ST_EFORMAT = -3,   /* not a safetensors file, or one that breaks the format */
    ST_ECHECKSUM = -4, /* the data section does not match the stored xxh3 */
    ST_ENOTFOUND = -5, /* no tensor of that name */
    ST_ESHAPE = -6,    /* shape differs from the one asked for */
    ST_EDTYPE = -7,    /* tensor is not F32 where F32 was needed */
    ST_ENOMEM = -8,
};

/* Longest tensor name we accept in a file (optimizer names add a prefix to HF names, so this
 * is larger than TENSOR_NAME_LEN; st_find truncates into tensor_view_t.name). */
#define ST_NAME_MAX 255
/* The reference implementation refuses headers above 100 MB; so do we. */
#define ST_HEADER_MAX 100000000ull

typedef struct st_file st_file_t;

/* Raw description of one entry, any dtype. */
typedef struct {
    const char *name;
    const char *dtype;        /* "F32", "I64", "BF16", ... */
    int elem_size;            /* bytes per element */
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    const void *data;         /* into the mapping; valid until st_close */
    uint64_t nbytes;
} st_tensor_t;

/* A group of views written under a common name prefix ("exp_avg." + HF name). */
typedef struct {
    const char *prefix;       /* NULL or "" for none */
    const tensor_view_t *t;
    int n;
} st_group_t;

/* Write n F32 tensors (in the given order) to path atomically: path.tmp, fsync, rename,
 * fsync the directory. meta_kv holds n_meta key/value pairs (meta_kv[2i], meta_kv[2i+1]);
 * the key "xxh3" is reserved. Names must be unique, non-empty, at most ST_NAME_MAX bytes. */
int st_write(const char *path, const tensor_view_t *t, int n, const char *const *meta_kv,
             int n_meta, char *err, size_t errlen);
/* Same, with tensors taken from several prefixed groups (names are prefix + view name). */
int st_write_groups(const char *path, const st_group_t *g, int ng, const char *const *meta_kv,
                    int n_meta, char *err, size_t errlen);

/* Open and validate path completely (sizes, JSON, dtypes, shapes, offsets, overlaps, xxh3 if
 * present). On failure *f stays NULL and err names the file and the fault. */
int st_open(st_file_t **f, const char *path, char *err, size_t errlen);
void st_close(st_file_t **f);

int st_count(const st_file_t *f);                   /* tensors, not counting __metadata__ */
const char *st_name(const st_file_t *f, int i);      /* i in [0, st_count), file order; NULL otherwise */
const char *st_meta_get(const st_file_t *f, const char *key);  /* NULL when absent */
int st_has_checksum(const st_file_t *f);             /* 1 when an xxh3 was present and verified */

/* Raw entry by index or name (any dtype). */
int st_get_raw(const st_file_t *f, int i, st_tensor_t *out);
int st_find_raw(const st_file_t *f, const char *name, st_tensor_t *out);

/* F32 tensor by name as a view into the mapping. ST_ENOTFOUND / ST_EDTYPE otherwise. */
int st_find(st_file_t *f, const char *name, tensor_view_t *out);

/* Copy each dst[i] (looked up as prefix + dst[i].name; prefix may be NULL) into dst[i].data.
 * Shapes must match exactly and dtypes be F32. strict: every name must exist; otherwise
 * missing ones are skipped. Returns the number of tensors copied (>= 0), or a negative code. */
int st_read_into(st_file_t *f, const tensor_view_t *dst, int n, int strict, char *err,
                 size_t errlen);
int st_read_into_prefixed(st_file_t *f, const char *prefix, const tensor_view_t *dst, int n,
                          int strict, char *err, size_t errlen);

/* Path the file was opened from (for messages). */
const char *st_path(const st_file_t *f);

#endif
