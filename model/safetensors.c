/* model/safetensors.c: the safetensors reader and writer (format notes in safetensors.h and
 * docs/FORMATS.md §3). The reader trusts nothing in the file: every size and offset is
 * checked against the real file size before any pointer into the data is formed. */
#include "common/errmsg.h"
#include "model/device.h"
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

typedef struct {
    char *name;
    const char *dtype;   /* points into the static dtype table */
    int esz;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    uint64_t begin, end; /* relative to the data section */
    float *aligned;      /* private aligned copy for an F32 tensor whose bytes are misaligned */
} st_entry_t;

struct st_file {
    char *path;
    uint8_t *map;
    size_t map_len;
    const uint8_t *data;  /* start of the data section, inside map */
    uint64_t data_len;
    int n;
    st_entry_t *e;        /* sorted by begin offset (= file order) */
    json_t *index;        /* name -> integer index into e */
    json_t *meta;         /* the __metadata__ object, or NULL */
    int checksummed;
};

static const struct { const char *name; int size; } st_dtypes[] = {
    {"F32", 4}, {"F64", 8}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
    {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1},
    {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

static int st_dtype_lookup(const char *s, const char **canon) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(s, st_dtypes[i].name) == 0) {
            *canon = st_dtypes[i].name;
            return st_dtypes[i].size;
        }
    return 0;
}

/* ---------------------------------------------------------------- writing */

static void st_put_u64le(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* fsync the directory holding path, so the rename itself survives a crash. */
static int st_fsync_parent(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int st_view_check(const tensor_view_t *t, const char *prefix, char *name, size_t cap,
                         char *err, size_t errlen) {
    size_t nl = strnlen(t->name, TENSOR_NAME_LEN);
    if (nl == 0 || nl == TENSOR_NAME_LEN)
        return err_fail(err, errlen, ST_EARG, "tensor name empty or not terminated");
    int w = snprintf(name, cap, "%s%s", prefix ? prefix : "", t->name);
    if (w < 0 || (size_t)w >= cap || w > ST_NAME_MAX)
        return err_fail(err, errlen, ST_EARG, "tensor name too long: %s%s", prefix ? prefix : "",
                       t->name);
    if (t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS)
        return err_fail(err, errlen, ST_EARG, "tensor %s: ndim %d out of range", name, t->ndim);
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] < 0)
            return err_fail(err, errlen, ST_EARG, "tensor %s: negative dimension", name);
    if (tensor_numel(t) > 0 && !t->data)
        return err_fail(err, errlen, ST_EARG, "tensor %s: NULL data", name);
    return ST_OK;
}

/* Builds the JSON header for the groups; the data section is the tensors back to back. */
static int st_header_build(const st_group_t *g, int ng, const char *const *meta_kv, int n_meta,
                           json_t **out, char *err, size_t errlen) {
    char name[ST_NAME_MAX + 2];
    json_t *root = json_object(), *meta = json_object();
    int rc = ST_ENOMEM;
    if (!root || !meta) goto fail;
    for (int i = 0; i < n_meta; i++) {
        const char *k = meta_kv[2 * i], *v = meta_kv[2 * i + 1];
        if (!k || !v || !*k) { rc = err_fail(err, errlen, ST_EARG, "metadata pair %d is NULL or empty", i); goto fail; }
        if (strcmp(k, "xxh3") == 0) { rc = err_fail(err, errlen, ST_EARG, "metadata key \"xxh3\" is reserved"); goto fail; }
        if (json_object_set_new(meta, k, json_string(v))) { rc = err_fail(err, errlen, ST_EARG, "metadata %s: not UTF-8", k); goto fail; }
    }
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) goto fail;
    XXH3_64bits_reset(hs);
    uint64_t off = 0;
    for (int gi = 0; gi < ng; gi++) {
        for (int i = 0; i < g[gi].n; i++) {
            const tensor_view_t *t = &g[gi].t[i];
            int c = st_view_check(t, g[gi].prefix, name, sizeof name, err, errlen);
            if (c) { XXH3_freeState(hs); rc = c; goto fail; }
            if (strcmp(name, "__metadata__") == 0 || json_object_get(root, name)) {
                XXH3_freeState(hs);
                rc = err_fail(err, errlen, ST_EARG, "duplicate or reserved tensor name %s", name);
                goto fail;
            }
            uint64_t nb = (uint64_t)tensor_numel(t) * sizeof(float);
            json_t *shape = json_array();
            for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
            json_t *ent = json_pack("{s:s, s:o, s:[I,I]}", "dtype", "F32", "shape", shape,
                                    "data_offsets", (json_int_t)off, (json_int_t)(off + nb));
            if (!ent || json_object_set_new(root, name, ent)) { XXH3_freeState(hs); goto fail; }
            if (nb) XXH3_64bits_update(hs, t->data, nb);
            off += nb;
        }
    }
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)XXH3_64bits_digest(hs));
    XXH3_freeState(hs);
    json_object_set_new(meta, "xxh3", json_string(hex));
    /* __metadata__ first, as the reference writer does; order does not matter to readers. */
    json_t *ordered = json_object();
    if (!ordered) goto fail;
    json_object_set_new(ordered, "__metadata__", meta);
    meta = NULL;
    json_object_update(ordered, root);
    json_decref(root);
    *out = ordered;
    return ST_OK;
fail:
    if (rc == ST_ENOMEM) err_fail(err, errlen, rc, "out of memory building the header");
    json_decref(root);
    json_decref(meta);
    return rc;
}

static int st_write_host(const char *path, const st_group_t *g, int ng,
                         const char *const *meta_kv, int n_meta, char *err, size_t errlen);

/* Views on a device other than the host are downloaded first (device.h: checkpoint I/O is
 * where parameters cross to the host); host views are written in place. */
int st_write_groups(const char *path, const st_group_t *g, int ng, const char *const *meta_kv,
                    int n_meta, char *err, size_t errlen) {
    int remote = 0;
    for (int gi = 0; gi < ng && g; gi++)
        for (int i = 0; i < g[gi].n && g[gi].t; i++) remote |= !device_is_host(g[gi].t[i].dev);
    if (!remote) return st_write_host(path, g, ng, meta_kv, n_meta, err, errlen);
    size_t nviews = 0, nfloats = 0;
    for (int gi = 0; gi < ng; gi++)
        for (int i = 0; i < g[gi].n; i++) nviews++, nfloats += (size_t)tensor_numel(&g[gi].t[i]);
    st_group_t *hg = calloc(ng, sizeof *hg);
    tensor_view_t *hv = calloc(nviews ? nviews : 1, sizeof *hv);
    float *buf = malloc(sizeof(float) * (nfloats ? nfloats : 1));
    int rc;
    if (!hg || !hv || !buf) {
        rc = err_fail(err, errlen, ST_ENOMEM, "%s: out of host memory for a copy of %zu floats", path, nfloats);
    } else {
        size_t at = 0, vi = 0;
        for (int gi = 0; gi < ng; gi++) {
            hg[gi] = g[gi];
            hg[gi].t = hv + vi;
            for (int i = 0; i < g[gi].n; i++, vi++) {
                hv[vi] = g[gi].t[i];
                hv[vi].data = buf + at;
                hv[vi].dev = NULL;
                tensor_view_download(&g[gi].t[i], hv[vi].data);
                at += (size_t)tensor_numel(&g[gi].t[i]);
            }
        }
        rc = st_write_host(path, hg, ng, meta_kv, n_meta, err, errlen);
    }
    free(hg);
    free(hv);
    free(buf);
    return rc;
}

static int st_write_host(const char *path, const st_group_t *g, int ng,
                         const char *const *meta_kv, int n_meta, char *err, size_t errlen) {
    if (!path || ng < 0 || (ng && !g) || n_meta < 0 || (n_meta && !meta_kv))
        return err_fail(err, errlen, ST_EARG, "st_write: bad arguments");
    for (int i = 0; i < ng; i++)
        if (g[i].n < 0 || (g[i].n && !g[i].t))
            return err_fail(err, errlen, ST_EARG, "st_write: bad tensor group %d", i);
    json_t *hdr = NULL;
    char why[256];
    int rc = st_header_build(g, ng, meta_kv, n_meta, &hdr, why, sizeof why);
    if (rc) return err_fail(err, errlen, rc, "%s: %s", path, why);
    char *js = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    if (!js) return err_fail(err, errlen, ST_ENOMEM, "%s: cannot serialise header", path);
    size_t hl = strlen(js), padded = (hl + 7) & ~(size_t)7;

    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        free(js);
        return err_fail(err, errlen, ST_EARG, "%s: path too long", path);
    }
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        rc = err_fail(err, errlen, ST_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        free(js);
        return rc;
    }
    uint8_t lenb[8];
    st_put_u64le(lenb, padded);
    int ok = fwrite(lenb, 1, 8, fp) == 8 && fwrite(js, 1, hl, fp) == hl;
    for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
    free(js);
    for (int gi = 0; ok && gi < ng; gi++)
        for (int i = 0; ok && i < g[gi].n; i++) {
            size_t nb = (size_t)tensor_numel(&g[gi].t[i]) * sizeof(float);
            ok = nb == 0 || fwrite(g[gi].t[i].data, 1, nb, fp) == nb;
        }
    int saved = errno;
    if (ok && fflush(fp) != 0) { ok = 0; saved = errno; }
    if (ok && fsync(fileno(fp)) != 0) { ok = 0; saved = errno; }
    if (fclose(fp) != 0 && ok) { ok = 0; saved = errno; }
    if (!ok) {
        unlink(tmp);
        return err_fail(err, errlen, ST_EIO, "%s: write failed: %s", tmp, strerror(saved));
    }
    if (rename(tmp, path) != 0) {
        saved = errno;
        unlink(tmp);
        return err_fail(err, errlen, ST_EIO, "%s: rename to %s failed: %s", tmp, path, strerror(saved));
    }
    if (st_fsync_parent(path) != 0)
        return err_fail(err, errlen, ST_EIO, "%s: fsync of directory failed: %s", path, strerror(errno));
    return ST_OK;
}

int st_write(const char *path, const tensor_view_t *t, int n, const char *const *meta_kv,
             int n_meta, char *err, size_t errlen) {
    st_group_t g = {NULL, t, n};
    return st_write_groups(path, &g, 1, meta_kv, n_meta, err, errlen);
}

/* ---------------------------------------------------------------- reading */

void st_close(st_file_t **fp) {
    if (!fp || !*fp) return;
    st_file_t *f = *fp;
    for (int i = 0; i < f->n; i++) {
        free(f->e[i].name);
        free(f->e[i].aligned);
    }
    free(f->e);
    json_decref(f->index);
    json_decref(f->meta);
    if (f->map) munmap(f->map, f->map_len);
    free(f->path);
    free(f);
    *fp = NULL;
}

static int st_cmp_begin(const void *a, const void *b) {
    const st_entry_t *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Parses one tensor entry; why gets the reason on failure. */
static int st_entry_parse(const char *name, json_t *v, uint64_t data_len, st_entry_t *e,
                          char *why, size_t wl) {
    if (strlen(name) == 0 || strlen(name) > ST_NAME_MAX)
        return err_fail(why, wl, ST_EFORMAT, "tensor name empty or longer than %d bytes", ST_NAME_MAX);
    if (!json_is_object(v)) return err_fail(why, wl, ST_EFORMAT, "entry %s is not an object", name);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *of = json_object_get(v, "data_offsets");
    if (!json_is_string(dt)) return err_fail(why, wl, ST_EFORMAT, "entry %s: dtype missing or not a string", name);
    if (!json_is_array(sh)) return err_fail(why, wl, ST_EFORMAT, "entry %s: shape missing or not an array", name);
    if (!json_is_array(of) || json_array_size(of) != 2)
        return err_fail(why, wl, ST_EFORMAT, "entry %s: data_offsets is not [begin, end]", name);
    e->esz = st_dtype_lookup(json_string_value(dt), &e->dtype);
    if (!e->esz)
        return err_fail(why, wl, ST_EFORMAT, "entry %s: unsupported dtype \"%.16s\"", name,
                       json_string_value(dt));
    if (json_array_size(sh) > TENSOR_MAX_DIMS)
        return err_fail(why, wl, ST_EFORMAT, "entry %s: %zu dimensions, at most %d supported", name,
                       json_array_size(sh), TENSOR_MAX_DIMS);
    e->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int d = 0; d < e->ndim; d++) {
        json_t *x = json_array_get(sh, d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return err_fail(why, wl, ST_EFORMAT, "entry %s: shape[%d] is not a non-negative integer", name, d);
        e->shape[d] = json_integer_value(x);
        if (__builtin_mul_overflow(numel, (uint64_t)e->shape[d], &numel))
            return err_fail(why, wl, ST_EFORMAT, "entry %s: shape overflows", name);
    }
    json_t *b = json_array_get(of, 0), *en = json_array_get(of, 1);
    if (!json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
        json_integer_value(en) < json_integer_value(b))
        return err_fail(why, wl, ST_EFORMAT, "entry %s: data_offsets are not 0 <= begin <= end", name);
    e->begin = (uint64_t)json_integer_value(b);
    e->end = (uint64_t)json_integer_value(en);
    uint64_t nbytes;
    if (__builtin_mul_overflow(numel, (uint64_t)e->esz, &nbytes) || nbytes != e->end - e->begin)
        return err_fail(why, wl, ST_EFORMAT, "entry %s: shape needs %llu bytes but offsets span %llu",
                       name, (unsigned long long)numel * e->esz,
                       (unsigned long long)(e->end - e->begin));
    if (e->end > data_len)
        return err_fail(why, wl, ST_EFORMAT,
                       "entry %s: data_offsets end %llu beyond the data section (%llu bytes; truncated?)",
                       name, (unsigned long long)e->end, (unsigned long long)data_len);
    return ST_OK;
}

/* Everything after the mapping: header JSON, entries, layout, checksum. */
static int st_parse(st_file_t *f, uint64_t hlen, char *why, size_t wl) {
    json_error_t je;
    json_t *root = json_loadb((const char *)f->map + 8, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) return err_fail(why, wl, ST_EFORMAT, "header is not valid JSON: %s", je.text);
    int rc = ST_OK;
    if (!json_is_object(root)) { rc = err_fail(why, wl, ST_EFORMAT, "header is not a JSON object"); goto out; }
    size_t cap = json_object_size(root);
    f->e = calloc(cap ? cap : 1, sizeof *f->e);
    f->index = json_object();
    if (!f->e || !f->index) { rc = err_fail(why, wl, ST_ENOMEM, "out of memory"); goto out; }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(v)) { rc = err_fail(why, wl, ST_EFORMAT, "__metadata__ is not an object"); goto out; }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv)
                if (!json_is_string(mv)) { rc = err_fail(why, wl, ST_EFORMAT, "__metadata__.%.64s is not a string", mk); goto out; }
            f->meta = json_incref(v);
            continue;
        }
        st_entry_t *e = &f->e[f->n];
        if ((rc = st_entry_parse(key, v, f->data_len, e, why, wl))) goto out;
        if (!(e->name = strdup(key))) { rc = err_fail(why, wl, ST_ENOMEM, "out of memory"); goto out; }
        f->n++;
    }
    /* The reference reader requires the tensors to tile the data section exactly; checking
     * the same catches overlaps, gaps and trailing bytes (a file cut or grown in transit). */
    qsort(f->e, f->n, sizeof *f->e, st_cmp_begin);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        if (f->e[i].begin != at) {
            rc = err_fail(why, wl, ST_EFORMAT, "tensor %s %s at byte %llu of the data section (expected %llu)",
                         f->e[i].name, f->e[i].begin < at ? "overlaps the previous one" : "leaves a gap",
                         (unsigned long long)f->e[i].begin, (unsigned long long)at);
            goto out;
        }
        at = f->e[i].end;
        json_object_set_new(f->index, f->e[i].name, json_integer(i));
    }
    if (at != f->data_len) {
        rc = err_fail(why, wl, ST_EFORMAT, "data section has %llu bytes but the tensors cover %llu",
                     (unsigned long long)f->data_len, (unsigned long long)at);
        goto out;
    }
    const char *sum = f->meta ? json_string_value(json_object_get(f->meta, "xxh3")) : NULL;
    if (sum) {
        char *endp;
        errno = 0;
        unsigned long long want = strtoull(sum, &endp, 16);
        if (strlen(sum) != 16 || *endp || errno) {
            rc = err_fail(why, wl, ST_EFORMAT, "__metadata__.xxh3 \"%.20s\" is not 16 hex digits", sum);
            goto out;
        }
        unsigned long long got = XXH3_64bits(f->data, f->data_len);
        if (got != want) {
            rc = err_fail(why, wl, ST_ECHECKSUM, "data checksum mismatch (xxh3 %016llx, header says %s): file corrupt",
                         got, sum);
            goto out;
        }
        f->checksummed = 1;
    }
    /* float* must be 4-aligned; a foreign file may place an F32 tensor after odd-sized ones. */
    for (int i = 0; i < f->n; i++) {
        st_entry_t *e = &f->e[i];
        if (e->esz == 4 && strcmp(e->dtype, "F32") == 0 && ((uintptr_t)(f->data + e->begin) & 3)) {
            e->aligned = malloc(e->end - e->begin ? e->end - e->begin : 4);
            if (!e->aligned) { rc = err_fail(why, wl, ST_ENOMEM, "out of memory"); goto out; }
            memcpy(e->aligned, f->data + e->begin, e->end - e->begin);
        }
    }
out:
    json_decref(root);
    return rc;
}

int st_open(st_file_t **out, const char *path, char *err, size_t errlen) {
    if (!out || !path) return err_fail(err, errlen, ST_EARG, "st_open: bad arguments");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_fail(err, errlen, ST_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return err_fail(err, errlen, ST_EIO, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return err_fail(err, errlen, ST_EFORMAT, "%s: not a safetensors file: %llu bytes, shorter than the 8-byte header size",
                       path, (unsigned long long)size);
    }
    st_file_t *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        close(fd);
        return err_fail(err, errlen, ST_ENOMEM, "%s: out of memory", path);
    }
    /* Private + writable: callers may scribble on views without touching the file. */
    f->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        st_close(&f);
        return err_fail(err, errlen, ST_EIO, "%s: mmap failed: %s", path, strerror(errno));
    }
    f->map_len = size;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)f->map[i] << (8 * i);
    if (hlen < 2 || hlen > ST_HEADER_MAX || hlen > size - 8) {
        st_close(&f);
        return err_fail(err, errlen, ST_EFORMAT,
                       "%s: not a safetensors file or truncated: header size %llu, file size %llu",
                       path, (unsigned long long)hlen, (unsigned long long)size);
    }
    f->data = f->map + 8 + hlen;
    f->data_len = size - 8 - hlen;
    char why[512];
    int rc = st_parse(f, hlen, why, sizeof why);
    if (rc) {
        st_close(&f);
        return err_fail(err, errlen, rc, "%s: %s", path, why);
    }
    *out = f;
    return ST_OK;
}

int st_count(const st_file_t *f) { return f ? f->n : 0; }
const char *st_path(const st_file_t *f) { return f ? f->path : NULL; }
int st_has_checksum(const st_file_t *f) { return f ? f->checksummed : 0; }

const char *st_name(const st_file_t *f, int i) {
    return f && i >= 0 && i < f->n ? f->e[i].name : NULL;
}

const char *st_meta_get(const st_file_t *f, const char *key) {
    if (!f || !f->meta || !key) return NULL;
    return json_string_value(json_object_get(f->meta, key));
}

int st_get_raw(const st_file_t *f, int i, st_tensor_t *out) {
    if (!f || !out || i < 0 || i >= f->n) return ST_EARG;
    const st_entry_t *e = &f->e[i];
    out->name = e->name;
    out->dtype = e->dtype;
    out->elem_size = e->esz;
    out->ndim = e->ndim;
    memset(out->shape, 0, sizeof out->shape);
    memcpy(out->shape, e->shape, sizeof(int64_t) * e->ndim);
    out->data = e->aligned ? (const void *)e->aligned : (const void *)(f->data + e->begin);
    out->nbytes = e->end - e->begin;
    return ST_OK;
}

static int st_index_of(const st_file_t *f, const char *name) {
    json_t *ix = f && name ? json_object_get(f->index, name) : NULL;
    return ix ? (int)json_integer_value(ix) : -1;
}

int st_find_raw(const st_file_t *f, const char *name, st_tensor_t *out) {
    int i = st_index_of(f, name);
    return i < 0 ? ST_ENOTFOUND : st_get_raw(f, i, out);
}

int st_find(st_file_t *f, const char *name, tensor_view_t *out) {
    st_tensor_t r;
    int rc = st_find_raw(f, name, &r);
    if (rc) return rc;
    if (strcmp(r.dtype, "F32") != 0) return ST_EDTYPE;
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->ndim = r.ndim;
    memcpy(out->shape, r.shape, sizeof out->shape);
    out->data = (float *)r.data;
    return ST_OK;
}

static void st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

int st_read_into_prefixed(st_file_t *f, const char *prefix, const tensor_view_t *dst, int n,
                          int strict, char *err, size_t errlen) {
    if (!f || n < 0 || (n && !dst)) return err_fail(err, errlen, ST_EARG, "st_read_into: bad arguments");
    int copied = 0;
    char key[ST_NAME_MAX + TENSOR_NAME_LEN + 2];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%s%s", prefix ? prefix : "", dst[i].name);
        st_tensor_t r;
        if (st_find_raw(f, key, &r) != ST_OK) {
            if (!strict) continue;
            return err_fail(err, errlen, ST_ENOTFOUND, "%s: no tensor named %s", f->path, key);
        }
        if (strcmp(r.dtype, "F32") != 0)
            return err_fail(err, errlen, ST_EDTYPE, "%s: tensor %s is %s, expected F32", f->path, key, r.dtype);
        int same = r.ndim == dst[i].ndim;
        for (int d = 0; same && d < r.ndim; d++) same = r.shape[d] == dst[i].shape[d];
        if (!same) {
            char a[96], b[96];
            st_shape_str(a, sizeof a, r.ndim, r.shape);
            st_shape_str(b, sizeof b, dst[i].ndim, dst[i].shape);
            return err_fail(err, errlen, ST_ESHAPE, "%s: tensor %s has shape %s, expected %s", f->path, key, a, b);
        }
        if (r.nbytes && !dst[i].data)
            return err_fail(err, errlen, ST_EARG, "st_read_into: %s has NULL data", dst[i].name);
        if (r.nbytes) tensor_view_upload(&dst[i], r.data);
        copied++;
    }
    return copied;
}

int st_read_into(st_file_t *f, const tensor_view_t *dst, int n, int strict, char *err, size_t errlen) {
    return st_read_into_prefixed(f, NULL, dst, n, strict, err, errlen);
}
