/* tokenizer/dataset.c: the LMDB dataset (tokenizer/dataset.h, docs/FORMATS.md §1).
 *
 * Writer: documents are encoded into an in-memory buffer and flushed in one LMDB write
 * transaction every ~8 MB, so memory stays bounded and a huge corpus is a few hundred commits.
 * The map starts small and doubles whenever LMDB reports MDB_MAP_FULL; because the buffer is
 * still held when that happens, the failed flush is simply retried in the larger map.
 * Reader: one read-only environment with one long-lived read transaction (the dataset is
 * immutable once "info" exists), so dataset_doc_read is one B-tree lookup and a copy out of
 * the mmap. MDB_NOTLS lets a handle move between threads (one thread at a time). */
#include "bus/utf8.h"
#include "common/errmsg.h"
#include "tokenizer/dataset.h"

#include <errno.h>
#include <lmdb.h>
#include <msgpack.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATASET_FLUSH_BYTES (8u << 20)
#define DATASET_MAP_INITIAL (1ull << 20) /* small: doubling is cheap, and tests exercise it */
#define DATASET_FORMAT_NAME "ft-dataset"

struct dataset {
    MDB_env *env;
    MDB_txn *txn; /* read transaction held for the handle's lifetime */
    MDB_dbi docs;
    dataset_meta_t meta;
    int shrunk;    /* data.mdb was cut under the open handle: no page is touched again */
    unsigned long long need; /* bytes data.mdb must hold: every page the environment uses */
    char path[4096];
    char why[600]; /* what the last EFORMAT/ELMDB from a document read found (dataset_doc_error) */
};

struct dataset_writer {
    MDB_env *env;
    MDB_dbi meta_dbi, docs_dbi;
    size_t mapsize;
    dataset_meta_t meta;
    char path[4096];
    /* pending documents: values concatenated in buf, doc i spans off[i]..off[i+1] */
    uint8_t *buf;
    size_t buf_len, buf_cap;
    size_t *off;
    size_t n_pending, off_cap;
    uint64_t first_pending; /* document index of pending doc 0 */
};

const char *dataset_strerror(int status) {
    switch (status) {
    case DATASET_OK: return "ok";
    case DATASET_ENOENT: return "no dataset at that path";
    case DATASET_EFORMAT: return "not a dataset of ours (format, version or meta)";
    case DATASET_ERANGE: return "out of range";
    case DATASET_ELMDB: return "LMDB error";
    case DATASET_ENOMEM: return "out of memory";
    case DATASET_EARG: return "bad argument";
    default: return "unknown dataset status";
    }
}

static void key_encode(uint64_t idx, uint8_t k[8]) {
    for (int i = 0; i < 8; i++) k[i] = (uint8_t)(idx >> (56 - 8 * i));
}

/* ---- meta as MessagePack -------------------------------------------------------------- */

static void pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_kv_u64(msgpack_packer *pk, const char *k, uint64_t v) {
    pack_str(pk, k);
    msgpack_pack_uint64(pk, v);
}

static void meta_pack(const dataset_meta_t *m, msgpack_sbuffer *sb) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 11);
    pack_str(&pk, "format");
    pack_str(&pk, DATASET_FORMAT_NAME);
    pack_kv_u64(&pk, "version", m->version);
    pack_kv_u64(&pk, "vocab_size", m->vocab_size);
    pack_kv_u64(&pk, "eot_id", m->eot_id);
    pack_kv_u64(&pk, "token_bytes", m->token_bytes);
    pack_kv_u64(&pk, "n_docs", m->n_docs);
    pack_kv_u64(&pk, "n_tokens", m->n_tokens);
    pack_kv_u64(&pk, "n_bytes", m->n_bytes);
    pack_str(&pk, "tokenizer");
    pack_str(&pk, m->tokenizer);
    pack_str(&pk, "tokenizer_hash");
    pack_str(&pk, m->tokenizer_hash);
    pack_str(&pk, "source");
    pack_str(&pk, m->source);
}

static int obj_is_key(const msgpack_object *k, const char *name) {
    size_t n = strlen(name);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp(k->via.str.ptr, name, n) == 0;
}

/* Copies a string field, refusing one that does not fit rather than silently cutting it. */
static int obj_str(const msgpack_object *v, char *out, size_t cap) {
    if (v->type != MSGPACK_OBJECT_STR || v->via.str.size >= cap) return -1;
    /* Not UTF-8 (or a NUL that would cut it short in C) is -2: the reason gets its own line,
     * since a string that passed here used to fail later and far away (the loader's info
     * reply could not be encoded, tokenizer info printed nothing). */
    if (!wire_utf8_valid(v->via.str.ptr, v->via.str.size) || memchr(v->via.str.ptr, 0, v->via.str.size)) return -2;
    memcpy(out, v->via.str.ptr, v->via.str.size);
    out[v->via.str.size] = 0;
    return 0;
}

static int obj_u64(const msgpack_object *v, uint64_t *out) {
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return -1;
    *out = v->via.u64;
    return 0;
}

/* Parses and validates the "info" map; err names the offending field. */
static int meta_unpack(const void *data, size_t len, dataset_meta_t *m, char *err, size_t errlen) {
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    int rc = DATASET_EFORMAT;
    if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len ||
        up.data.type != MSGPACK_OBJECT_MAP) {
        err_fail(err, errlen, 0, "meta \"info\" is not one MessagePack map");
        goto out;
    }
    memset(m, 0, sizeof *m);
    int seen_format = 0;
    unsigned seen = 0; /* bit per required numeric field */
    const msgpack_object_map *map = &up.data.via.map;
    for (uint32_t i = 0; i < map->size; i++) {
        const msgpack_object *k = &map->ptr[i].key, *v = &map->ptr[i].val;
        uint64_t u = 0;
        int bad = 0;
        if (obj_is_key(k, "format")) {
            char f[32];
            bad = obj_str(v, f, sizeof f) || strcmp(f, DATASET_FORMAT_NAME) != 0;
            seen_format = !bad;
            if (bad) { err_fail(err, errlen, 0, "meta: \"format\" is not \"%s\"", DATASET_FORMAT_NAME); goto out; }
        } else if (obj_is_key(k, "version")) {
            bad = obj_u64(v, &u); m->version = (uint32_t)u; seen |= 1;
            if (!bad && u != DATASET_FORMAT_VERSION) {
                err_fail(err, errlen, 0, "meta: version %llu, this build reads version %d",
                       (unsigned long long)u, DATASET_FORMAT_VERSION);
                goto out;
            }
        } else if (obj_is_key(k, "vocab_size")) {
            bad = obj_u64(v, &u) || u == 0 || u > UINT32_MAX; m->vocab_size = (uint32_t)u; seen |= 2;
        } else if (obj_is_key(k, "eot_id")) {
            bad = obj_u64(v, &u) || u > UINT32_MAX; m->eot_id = (uint32_t)u; seen |= 4;
        } else if (obj_is_key(k, "token_bytes")) {
            bad = obj_u64(v, &u) || (u != 2 && u != 4); m->token_bytes = (uint32_t)u; seen |= 8;
        } else if (obj_is_key(k, "n_docs")) {
            bad = obj_u64(v, &m->n_docs); seen |= 16;
        } else if (obj_is_key(k, "n_tokens")) {
            bad = obj_u64(v, &m->n_tokens); seen |= 32;
        } else if (obj_is_key(k, "n_bytes")) {
            bad = obj_u64(v, &m->n_bytes); seen |= 64;
        } else if (obj_is_key(k, "tokenizer")) { /* str fields: bad is -1 (type, size) or -2 (bytes) */
            bad = obj_str(v, m->tokenizer, sizeof m->tokenizer);
        } else if (obj_is_key(k, "tokenizer_hash")) {
            bad = obj_str(v, m->tokenizer_hash, sizeof m->tokenizer_hash);
        } else if (obj_is_key(k, "source")) {
            bad = obj_str(v, m->source, sizeof m->source);
        } /* unknown keys are ignored: a newer writer may add optional fields */
        if (bad == -2) {
            err_fail(err, errlen, 0, "meta: field \"%.*s\" is not UTF-8 text: rebuild the dataset (bin/tokenizer encode)",
                     (int)k->via.str.size, k->via.str.ptr);
            goto out;
        }
        if (bad) {
            err_fail(err, errlen, 0, "meta: field \"%.*s\" has a wrong type or value",
                   k->type == MSGPACK_OBJECT_STR ? (int)k->via.str.size : 1,
                   k->type == MSGPACK_OBJECT_STR ? k->via.str.ptr : "?");
            goto out;
        }
    }
    if (!seen_format) { err_fail(err, errlen, 0, "meta: \"format\" missing"); goto out; }
    if (seen != 127) { err_fail(err, errlen, 0, "meta: a required numeric field is missing"); goto out; }
    if (m->eot_id >= m->vocab_size) {
        err_fail(err, errlen, 0, "meta: eot_id %u >= vocab_size %u", m->eot_id, m->vocab_size);
        goto out;
    }
    if (m->token_bytes == 2 && m->vocab_size > 65536) {
        err_fail(err, errlen, 0, "meta: token_bytes 2 cannot hold vocab_size %u", m->vocab_size);
        goto out;
    }
    rc = DATASET_OK;
out:
    msgpack_unpacked_destroy(&up);
    return rc;
}

/* ---- reader ----------------------------------------------------------------------------- */

/* The SIGBUS guard. dataset_open checks that data.mdb holds every page, but another process
 * can truncate the file afterwards, and a read of a mapped page past the new end is a SIGBUS
 * in the reader (a loader, an evaluator): a crash without a word. So every document read runs
 * under a sigsetjmp, and a SIGBUS inside one jumps back to it: the read fails with a line, the
 * handle is marked and never touches the map again. A fault elsewhere in the process (not
 * inside a guarded read of this thread) gets the handler that was there before. Leaving LMDB's
 * mdb_get by a jump is sound for a read-only transaction: the cursor is on our stack and it
 * takes no lock. SA_NODEFER keeps SIGBUS unblocked after the jump (sigsetjmp(, 0) restores no
 * mask: no system call per read). */
static __thread sigjmp_buf *guard_jmp;
static struct sigaction guard_prev;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;

static void guard_on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    if (guard_jmp) siglongjmp(*guard_jmp, 1);
    sigaction(SIGBUS, &guard_prev, NULL); /* not ours: the fault, re-executed, goes there */
    if (si->si_code <= 0) raise(sig);     /* a kill(), not a fault: nothing re-executes */
}

static void guard_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &guard_prev);
}

/* After a SIGBUS in a read of ds: marks it and says what happened, in ds->why. */
static int shrunk_fail(dataset_t *ds) {
    ds->shrunk = 1;
    mdb_filehandle_t fd;
    struct stat st;
    char now[64] = "";
    if (mdb_env_get_fd(ds->env, &fd) == 0 && fstat(fd, &st) == 0) snprintf(now, sizeof now, "now %lld bytes; ", (long long)st.st_size);
    snprintf(ds->why, sizeof ds->why,
             "%.400s/data.mdb shrank under the reader (%sits pages need %llu): another process truncated it; rebuild it (bin/tokenizer encode)",
             ds->path, now, ds->need);
    return DATASET_EFORMAT;
}

int dataset_shrunk(const dataset_t *ds) { return ds && ds->shrunk; }

/* The latest meta page (read by mdb_env_info, past any read snapshot, and the file only grows
 * under a writer) names the last page in use; the file must reach its end. */
static int size_check(MDB_env *env, const char *path, unsigned long long *needp, char *err, size_t errlen) {
    MDB_envinfo ei;
    MDB_stat es;
    mdb_filehandle_t fd;
    struct stat st;
    int mrc;
    if ((mrc = mdb_env_info(env, &ei)) || (mrc = mdb_env_stat(env, &es)) || (mrc = mdb_env_get_fd(env, &fd)))
        return err_fail(err, errlen, DATASET_ELMDB, "dataset %s: %s", path, mdb_strerror(mrc));
    if (fstat(fd, &st) != 0)
        return err_fail(err, errlen, DATASET_ELMDB, "dataset %s: data.mdb: %s", path, strerror(errno));
    unsigned long long need = ((unsigned long long)ei.me_last_pgno + 1) * es.ms_psize;
    if (needp) *needp = need;
    if ((unsigned long long)st.st_size < need)
        return err_fail(err, errlen, DATASET_EFORMAT,
                        "dataset %s: data.mdb is truncated (%lld bytes; its pages need %llu): rebuild it (bin/tokenizer encode)",
                        path, (long long)st.st_size, need);
    return DATASET_OK;
}

int dataset_open(dataset_t **out, const char *path, char *err, size_t errlen) {
    if (!out || !path) return DATASET_EARG;
    *out = NULL;
    char file[4200];
    struct stat st;
    snprintf(file, sizeof file, "%s/data.mdb", path);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode) || stat(file, &st) != 0) {
        err_fail(err, errlen, 0, "dataset %s: no LMDB environment there (%s)", path,
               stat(path, &st) != 0 ? strerror(errno) : "no data.mdb");
        return DATASET_ENOENT;
    }
    /* An empty data.mdb looks to LMDB like a new environment, which it then fails to write
     * read-only ("Bad file descriptor"): say what it is instead. */
    if (st.st_size == 0) {
        err_fail(err, errlen, 0, "dataset %s: data.mdb is empty (0 bytes): rebuild it (bin/tokenizer encode)", path);
        return DATASET_EFORMAT;
    }
    dataset_t *ds = calloc(1, sizeof *ds);
    if (!ds) return DATASET_ENOMEM;
    int rc = DATASET_ELMDB, mrc;
    MDB_dbi meta_dbi;
    MDB_val k = {4, "info"}, v;
    if ((mrc = mdb_env_create(&ds->env)) || (mrc = mdb_env_set_maxdbs(ds->env, 2)) ||
        (mrc = mdb_env_open(ds->env, path, MDB_RDONLY | MDB_NOTLS, 0644)) ||
        (mrc = mdb_txn_begin(ds->env, NULL, MDB_RDONLY, &ds->txn))) {
        /* LMDB reads its two meta pages with read(), so a file cut inside them fails here
         * (MDB_INVALID) rather than faulting: name the likely cause. */
        long pg = sysconf(_SC_PAGESIZE);
        if (st.st_size < 2 * (off_t)(pg > 0 ? pg : 4096)) {
            err_fail(err, errlen, 0, "dataset %s: data.mdb is truncated (%lld bytes, less than LMDB's two meta pages): "
                     "rebuild it (bin/tokenizer encode)", path, (long long)st.st_size);
            rc = DATASET_EFORMAT;
        } else {
            err_fail(err, errlen, 0, "dataset %s: %s", path, mdb_strerror(mrc));
        }
        goto fail;
    }
    /* LMDB maps data.mdb and reads pages straight from the map: a page past the end of a
     * truncated file is a SIGBUS in whichever program touches it, with no message. So check,
     * before reading any page, that the file holds every page the environment says it uses. */
    if ((rc = size_check(ds->env, path, &ds->need, err, errlen))) goto fail;
    snprintf(ds->path, sizeof ds->path, "%s", path);
    pthread_once(&guard_once, guard_install);
    rc = DATASET_ELMDB;
    if ((mrc = mdb_dbi_open(ds->txn, "meta", 0, &meta_dbi)) || (mrc = mdb_dbi_open(ds->txn, "docs", 0, &ds->docs))) {
        err_fail(err, errlen, 0, "dataset %s: named db \"meta\"/\"docs\": %s", path, mdb_strerror(mrc));
        rc = DATASET_EFORMAT;
        goto fail;
    }
    if ((mrc = mdb_get(ds->txn, meta_dbi, &k, &v))) {
        err_fail(err, errlen, 0, "dataset %s: no \"info\" in meta (incomplete dataset?): %s", path, mdb_strerror(mrc));
        rc = DATASET_EFORMAT;
        goto fail;
    }
    char why[200];
    if ((rc = meta_unpack(v.mv_data, v.mv_size, &ds->meta, why, sizeof why))) {
        err_fail(err, errlen, 0, "dataset %s: %s", path, why);
        goto fail;
    }
    MDB_stat ms;
    if ((mrc = mdb_stat(ds->txn, ds->docs, &ms))) {
        err_fail(err, errlen, 0, "dataset %s: %s", path, mdb_strerror(mrc));
        rc = DATASET_ELMDB;
        goto fail;
    }
    if (ms.ms_entries != ds->meta.n_docs) {
        err_fail(err, errlen, 0, "dataset %s: meta says %llu documents, \"docs\" holds %llu", path,
               (unsigned long long)ds->meta.n_docs, (unsigned long long)ms.ms_entries);
        rc = DATASET_EFORMAT;
        goto fail;
    }
    *out = ds;
    return DATASET_OK;
fail:
    dataset_close(&ds);
    return rc;
}

const dataset_meta_t *dataset_meta(const dataset_t *ds) { return ds ? &ds->meta : NULL; }

/* Finds document idx; the value points into the read-only map until the handle closes. */
static int doc_get(dataset_t *ds, uint64_t idx, MDB_val *v) {
    if (!ds) return DATASET_EARG;
    if (idx >= ds->meta.n_docs) return DATASET_ERANGE;
    uint8_t kb[8];
    key_encode(idx, kb);
    MDB_val k = {8, kb};
    int mrc = mdb_get(ds->txn, ds->docs, &k, v);
    if (mrc == MDB_NOTFOUND) { /* a hole: the dataset is damaged */
        snprintf(ds->why, sizeof ds->why, "missing from \"docs\" (a damaged dataset: rebuild it)");
        return DATASET_EFORMAT;
    }
    if (mrc) {
        snprintf(ds->why, sizeof ds->why, "LMDB: %s", mdb_strerror(mrc));
        return DATASET_ELMDB;
    }
    /* A value that is not a whole number of tokens is a damaged file, not a document. */
    if (v->mv_size % ds->meta.token_bytes != 0) {
        snprintf(ds->why, sizeof ds->why, "%zu bytes, not a whole number of %u-byte tokens (a damaged dataset: rebuild it)",
                 v->mv_size, ds->meta.token_bytes);
        return DATASET_EFORMAT;
    }
    if (v->mv_size / ds->meta.token_bytes > UINT32_MAX) {
        snprintf(ds->why, sizeof ds->why, "%zu tokens, more than the 2^32-1 a document may hold",
                 v->mv_size / ds->meta.token_bytes);
        return DATASET_EFORMAT;
    }
    return DATASET_OK;
}

const char *dataset_doc_error(const dataset_t *ds, int status) {
    if (ds && ds->why[0] && (status == DATASET_EFORMAT || status == DATASET_ELMDB)) return ds->why;
    return dataset_strerror(status);
}

static int doc_len(dataset_t *ds, uint64_t idx, uint32_t *len) {
    MDB_val v;
    int rc = doc_get(ds, idx, &v);
    if (rc) return rc;
    if (len) *len = (uint32_t)(v.mv_size / ds->meta.token_bytes);
    return DATASET_OK;
}

int dataset_doc_len(dataset_t *ds, uint64_t idx, uint32_t *len) {
    if (!ds) return DATASET_EARG;
    if (ds->shrunk) return DATASET_EFORMAT; /* ds->why still says why */
    sigjmp_buf jb;
    if (sigsetjmp(jb, 0)) {
        guard_jmp = NULL;
        return shrunk_fail(ds);
    }
    guard_jmp = &jb;
    int rc = doc_len(ds, idx, len);
    guard_jmp = NULL;
    return rc;
}

/* Little-endian values are not aligned inside LMDB pages: assemble from bytes (the
 * compiler turns these into plain loads on x86). */
static void tokens_decode(const uint8_t *p, uint32_t tb, uint32_t *out, uint32_t n) {
    if (tb == 2) {
        for (uint32_t i = 0; i < n; i++) out[i] = (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
    } else {
        for (uint32_t i = 0; i < n; i++)
            out[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                     (uint32_t)p[4 * i + 3] << 24;
    }
}

static int doc_read_range(dataset_t *ds, uint64_t idx, uint32_t from, uint32_t *out, uint32_t n,
                          uint32_t *got, uint32_t *len) {
    MDB_val v;
    int rc = doc_get(ds, idx, &v);
    if (rc) return rc;
    uint32_t total = (uint32_t)(v.mv_size / ds->meta.token_bytes);
    if (len) *len = total;
    uint32_t m = from >= total ? 0 : (total - from < n ? total - from : n);
    if (m && !out) return DATASET_EARG;
    tokens_decode((const uint8_t *)v.mv_data + (size_t)from * ds->meta.token_bytes, ds->meta.token_bytes, out, m);
    if (got) *got = m;
    return DATASET_OK;
}

int dataset_doc_read_range(dataset_t *ds, uint64_t idx, uint32_t from, uint32_t *out, uint32_t n,
                           uint32_t *got, uint32_t *len) {
    if (!ds) return DATASET_EARG;
    if (ds->shrunk) return DATASET_EFORMAT;
    sigjmp_buf jb;
    if (sigsetjmp(jb, 0)) {
        guard_jmp = NULL;
        return shrunk_fail(ds);
    }
    guard_jmp = &jb;
    int rc = doc_read_range(ds, idx, from, out, n, got, len);
    guard_jmp = NULL;
    return rc;
}

int dataset_doc_read(dataset_t *ds, uint64_t idx, uint32_t *out, uint32_t cap, uint32_t *len) {
    return dataset_doc_read_range(ds, idx, 0, out, cap, NULL, len);
}

void dataset_close(dataset_t **pds) {
    if (!pds || !*pds) return;
    dataset_t *ds = *pds;
    if (ds->txn) mdb_txn_abort(ds->txn);
    if (ds->env) mdb_env_close(ds->env);
    free(ds);
    *pds = NULL;
}

/* ---- writer ----------------------------------------------------------------------------- */

static int mkdir_p(const char *path) {
    char tmp[4096];
    if (strlen(path) >= sizeof tmp) return -1;
    strcpy(tmp, path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0775) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0775) != 0 && errno != EEXIST) return -1;
    return 0;
}

int dataset_writer_open(dataset_writer_t **out, const char *path, const dataset_meta_t *meta,
                        int overwrite, char *err, size_t errlen) {
    if (!out || !path || !meta) return DATASET_EARG;
    *out = NULL;
    if (meta->vocab_size == 0 || meta->eot_id >= meta->vocab_size) {
        err_fail(err, errlen, 0, "dataset %s: vocab_size %u / eot_id %u invalid", path, meta->vocab_size, meta->eot_id);
        return DATASET_EARG;
    }
    if (strlen(path) >= 4000) { err_fail(err, errlen, 0, "dataset path too long"); return DATASET_EARG; }
    /* dataset_open refuses a non-UTF-8 string, so never write one (source is cleaned below). */
    if (!wire_utf8_valid(meta->tokenizer, strnlen(meta->tokenizer, sizeof meta->tokenizer)) ||
        !wire_utf8_valid(meta->tokenizer_hash, strnlen(meta->tokenizer_hash, sizeof meta->tokenizer_hash))) {
        err_fail(err, errlen, 0, "dataset %s: the tokenizer name or hash is not UTF-8 text", path);
        return DATASET_EARG;
    }
    char file[4200], lock[4200];
    snprintf(file, sizeof file, "%s/data.mdb", path);
    snprintf(lock, sizeof lock, "%s/lock.mdb", path);
    struct stat st;
    if (stat(file, &st) == 0) {
        if (!overwrite) {
            err_fail(err, errlen, 0, "dataset %s: already exists (overwrite not requested)", path);
            return DATASET_EARG;
        }
        if (unlink(file) != 0 || (unlink(lock) != 0 && errno != ENOENT)) {
            err_fail(err, errlen, 0, "dataset %s: cannot remove the old one: %s", path, strerror(errno));
            return DATASET_EARG;
        }
    }
    if (mkdir_p(path) != 0) {
        err_fail(err, errlen, 0, "dataset %s: cannot create directory: %s", path, strerror(errno));
        return DATASET_ENOENT;
    }
    dataset_writer_t *w = calloc(1, sizeof *w);
    if (!w) return DATASET_ENOMEM;
    w->meta = *meta;
    w->meta.version = DATASET_FORMAT_VERSION;
    w->meta.token_bytes = meta->vocab_size <= 65536 ? 2 : 4;
    w->meta.n_docs = w->meta.n_tokens = w->meta.n_bytes = 0;
    /* The strings must be NUL-terminated within their arrays whatever the caller passed. */
    w->meta.tokenizer[sizeof w->meta.tokenizer - 1] = 0;
    w->meta.tokenizer_hash[sizeof w->meta.tokenizer_hash - 1] = 0;
    w->meta.source[sizeof w->meta.source - 1] = 0;
    /* source is the input file names (any bytes, and cut at 255 maybe inside a character):
     * write it as UTF-8, bad bytes as U+FFFD, cut at a character boundary. */
    char clean[sizeof w->meta.source];
    wire_utf8_clean(clean, sizeof clean, w->meta.source, strlen(w->meta.source));
    memcpy(w->meta.source, clean, sizeof clean);
    snprintf(w->path, sizeof w->path, "%s", path);
    w->mapsize = DATASET_MAP_INITIAL;
    w->off_cap = 1024;
    w->off = malloc(w->off_cap * sizeof *w->off);
    if (!w->off) { free(w); return DATASET_ENOMEM; }
    w->off[0] = 0;
    int mrc;
    MDB_txn *txn = NULL;
    /* NOSYNC: intermediate commits need no durability (a dataset without "info" is refused
     * anyway); dataset_writer_close syncs once before and after writing "info". */
    if ((mrc = mdb_env_create(&w->env)) || (mrc = mdb_env_set_maxdbs(w->env, 2)) ||
        (mrc = mdb_env_set_mapsize(w->env, w->mapsize)) ||
        (mrc = mdb_env_open(w->env, path, MDB_NOSYNC, 0664)) || (mrc = mdb_txn_begin(w->env, NULL, 0, &txn)) ||
        (mrc = mdb_dbi_open(txn, "meta", MDB_CREATE, &w->meta_dbi)) ||
        (mrc = mdb_dbi_open(txn, "docs", MDB_CREATE, &w->docs_dbi)) || (mrc = mdb_txn_commit(txn))) {
        if (txn && mrc) mdb_txn_abort(txn);
        err_fail(err, errlen, 0, "dataset %s: %s", path, mdb_strerror(mrc));
        dataset_writer_abort(&w);
        return DATASET_ELMDB;
    }
    *out = w;
    return DATASET_OK;
}

/* Writes the pending documents in one transaction; on MDB_MAP_FULL doubles the map and
 * retries (the documents are still in the buffer). */
static int writer_flush(dataset_writer_t *w, char *err, size_t errlen) {
    if (w->n_pending == 0) return DATASET_OK;
    for (;;) {
        MDB_txn *txn;
        int mrc = mdb_txn_begin(w->env, NULL, 0, &txn);
        if (mrc) { err_fail(err, errlen, 0, "dataset %s: %s", w->path, mdb_strerror(mrc)); return DATASET_ELMDB; }
        for (size_t i = 0; i < w->n_pending && !mrc; i++) {
            uint8_t kb[8];
            key_encode(w->first_pending + i, kb);
            MDB_val k = {8, kb}, v = {w->off[i + 1] - w->off[i], w->buf + w->off[i]};
            /* Keys arrive in increasing order, so APPEND fills pages completely. */
            mrc = mdb_put(txn, w->docs_dbi, &k, &v, MDB_APPEND);
        }
        if (!mrc) mrc = mdb_txn_commit(txn);
        else mdb_txn_abort(txn);
        if (mrc == MDB_MAP_FULL) {
            w->mapsize *= 2;
            if ((mrc = mdb_env_set_mapsize(w->env, w->mapsize))) {
                err_fail(err, errlen, 0, "dataset %s: growing the map to %zu bytes: %s", w->path, w->mapsize,
                       mdb_strerror(mrc));
                return DATASET_ELMDB;
            }
            continue;
        }
        if (mrc) { err_fail(err, errlen, 0, "dataset %s: %s", w->path, mdb_strerror(mrc)); return DATASET_ELMDB; }
        break;
    }
    w->first_pending += w->n_pending;
    w->n_pending = 0;
    w->buf_len = 0;
    return DATASET_OK;
}

int dataset_writer_add(dataset_writer_t *w, const uint32_t *tokens, uint32_t n, uint64_t n_bytes,
                       char *err, size_t errlen) {
    if (!w || (n && !tokens)) return DATASET_EARG;
    const uint32_t tb = w->meta.token_bytes;
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] >= w->meta.vocab_size) {
            err_fail(err, errlen, 0, "dataset %s: document %llu token %u: id %u >= vocab_size %u", w->path,
                   (unsigned long long)(w->first_pending + w->n_pending), i, tokens[i], w->meta.vocab_size);
            return DATASET_ERANGE;
        }
    size_t need = w->buf_len + (size_t)n * tb;
    if (need > w->buf_cap) {
        size_t cap = w->buf_cap ? w->buf_cap : (1u << 16);
        while (cap < need) cap *= 2;
        uint8_t *nb = realloc(w->buf, cap);
        if (!nb) return DATASET_ENOMEM;
        w->buf = nb;
        w->buf_cap = cap;
    }
    if (w->n_pending + 2 > w->off_cap) {
        size_t *no = realloc(w->off, 2 * w->off_cap * sizeof *no);
        if (!no) return DATASET_ENOMEM;
        w->off = no;
        w->off_cap *= 2;
    }
    uint8_t *p = w->buf + w->buf_len;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = tokens[i];
        *p++ = (uint8_t)t;
        *p++ = (uint8_t)(t >> 8);
        if (tb == 4) { *p++ = (uint8_t)(t >> 16); *p++ = (uint8_t)(t >> 24); }
    }
    w->buf_len = need;
    w->n_pending++;
    w->off[w->n_pending] = w->buf_len;
    w->meta.n_docs++;
    w->meta.n_tokens += n;
    w->meta.n_bytes += n_bytes;
    if (w->buf_len >= DATASET_FLUSH_BYTES) return writer_flush(w, err, errlen);
    return DATASET_OK;
}

int dataset_writer_close(dataset_writer_t **pw, char *err, size_t errlen) {
    if (!pw || !*pw) return DATASET_EARG;
    dataset_writer_t *w = *pw;
    int rc = writer_flush(w, err, errlen);
    if (rc) return rc;
    int mrc = mdb_env_sync(w->env, 1);
    if (mrc) { err_fail(err, errlen, 0, "dataset %s: sync: %s", w->path, mdb_strerror(mrc)); return DATASET_ELMDB; }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    meta_pack(&w->meta, &sb);
    for (;;) {
        MDB_txn *txn;
        MDB_val k = {4, "info"}, v = {sb.size, sb.data};
        mrc = mdb_txn_begin(w->env, NULL, 0, &txn);
        if (!mrc) {
            mrc = mdb_put(txn, w->meta_dbi, &k, &v, 0);
            if (!mrc) mrc = mdb_txn_commit(txn);
            else mdb_txn_abort(txn);
        }
        if (mrc == MDB_MAP_FULL) {
            w->mapsize *= 2;
            if (!(mrc = mdb_env_set_mapsize(w->env, w->mapsize))) continue;
        }
        break;
    }
    msgpack_sbuffer_destroy(&sb);
    if (!mrc) mrc = mdb_env_sync(w->env, 1);
    if (mrc) { err_fail(err, errlen, 0, "dataset %s: writing info: %s", w->path, mdb_strerror(mrc)); return DATASET_ELMDB; }
    dataset_writer_abort(pw); /* frees; "info" is already committed */
    return DATASET_OK;
}

void dataset_writer_abort(dataset_writer_t **pw) {
    if (!pw || !*pw) return;
    dataset_writer_t *w = *pw;
    if (w->env) mdb_env_close(w->env);
    free(w->buf);
    free(w->off);
    free(w);
    *pw = NULL;
}
