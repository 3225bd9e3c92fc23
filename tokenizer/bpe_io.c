/* tokenizer/bpe_io.c: see bpe_io.h. */
#include "common/errmsg.h"
#include "tokenizer/bpe_io.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tokenizer/b64.h"

/* Adds the specials of a JSON object {"text": id, ...}. */
static int io_add_specials(bpe_vocab_t *v, json_t *obj, const char *path, char *err, size_t errlen) {
    if (!obj) return BPE_OK;
    if (!json_is_object(obj))
        return err_fail(err, errlen, BPE_EFORMAT, "%s: special_tokens is not an object", path);
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (json_int_t)BPE_NO_RANK)
            return err_fail(err, errlen, BPE_EFORMAT, "%s: special token %s has no valid id", path, key);
        char e[160];
        int rc = bpe_vocab_add_special(v, key, (uint32_t)json_integer_value(val), e, sizeof e);
        if (rc < 0) return err_fail(err, errlen, rc, "%s: %s", path, e);
    }
    return BPE_OK;
}

/* Parses tiktoken's compact bpe_ranks text (see bpe_io.h). */
static int io_parse_ranks(bpe_vocab_t *v, const char *s, const char *path, char *err, size_t errlen) {
    uint8_t buf[1024];
    long lineno = 0;
    while (*s) {
        const char *eol = strchr(s, '\n');
        if (!eol) eol = s + strlen(s);
        lineno++;
        /* field 0 is a marker tiktoken skips; field 1 the first rank of the line */
        const char *p = memchr(s, ' ', eol - s);
        if (eol == s) { s = *eol ? eol + 1 : eol; continue; }
        if (!p) return err_fail(err, errlen, BPE_EFORMAT, "%s: bpe_ranks line %ld: no rank field", path, lineno);
        char *end;
        errno = 0;
        unsigned long long rank = strtoull(p + 1, &end, 10);
        if (end == p + 1 || errno || rank >= BPE_NO_RANK || (*end != ' ' && end != eol))
            return err_fail(err, errlen, BPE_EFORMAT, "%s: bpe_ranks line %ld: bad first rank", path, lineno);
        p = end;
        while (p < eol) {
            p++; /* the space */
            const char *q = memchr(p, ' ', eol - p);
            if (!q) q = eol;
            if (q - p == 0 || (size_t)(q - p) > sizeof buf)
                return err_fail(err, errlen, BPE_EFORMAT, "%s: bpe_ranks: bad token at rank %llu", path, rank);
            long n = b64_decode(p, q - p, buf);
            if (n <= 0)
                return err_fail(err, errlen, BPE_EFORMAT, "%s: bpe_ranks: bad base64 at rank %llu", path, rank);
            if (rank >= BPE_NO_RANK)
                return err_fail(err, errlen, BPE_EFORMAT, "%s: bpe_ranks: rank overflow", path);
            char e[160];
            int rc = bpe_vocab_add(v, buf, (uint32_t)n, (uint32_t)rank, e, sizeof e);
            if (rc < 0) return err_fail(err, errlen, rc, "%s: %s", path, e);
            rank++;
            p = q;
        }
        s = *eol ? eol + 1 : eol;
    }
    return BPE_OK;
}

int bpe_vocab_load_tiktoken_json(bpe_vocab_t **out, const char *path, char *err, size_t errlen) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        if (access(path, R_OK) != 0)
            return err_fail(err, errlen, BPE_ENOENT, "%s: %s", path, strerror(errno));
        return err_fail(err, errlen, BPE_EFORMAT, "%s:%d: %s", path, je.line, je.text);
    }
    bpe_vocab_t *v = NULL;
    int rc = bpe_vocab_new(&v, err, errlen);
    if (rc < 0) goto done;
    json_t *pat = json_object_get(root, "pat_str"), *ranks = json_object_get(root, "bpe_ranks");
    if (!json_is_string(pat) || !json_is_string(ranks)) {
        rc = err_fail(err, errlen, BPE_EFORMAT, "%s: no \"pat_str\"/\"bpe_ranks\" strings", path);
        goto done;
    }
    if ((rc = io_parse_ranks(v, json_string_value(ranks), path, err, errlen)) < 0) goto done;
    if ((rc = io_add_specials(v, json_object_get(root, "special_tokens"), path, err, errlen)) < 0)
        goto done;
    char name[256];
    snprintf(name, sizeof name, "%s", path);
    char *base = basename(name), *dot = strrchr(base, '.');
    if (dot && strcmp(dot, ".json") == 0) *dot = 0;
    if (bpe_vocab_set_pattern(v, json_string_value(pat)) < 0 || bpe_vocab_set_name(v, base) < 0) {
        rc = err_fail(err, errlen, BPE_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = bpe_vocab_check(v, err, errlen)) < 0) goto done;
done:
    json_decref(root);
    if (rc < 0) bpe_vocab_free(&v);
    *out = v;
    return rc;
}

int bpe_vocab_make_bytes(bpe_vocab_t **out, char *err, size_t errlen) {
    bpe_vocab_t *v = NULL;
    int rc = bpe_vocab_new(&v, err, errlen);
    for (uint32_t b = 0; rc == 0 && b < 256; b++) {
        uint8_t c = (uint8_t)b;
        rc = bpe_vocab_add(v, &c, 1, b, err, errlen);
    }
    if (rc == 0) rc = bpe_vocab_add_special(v, BPE_EOT_TEXT, 256, err, errlen);
    if (rc == 0 && bpe_vocab_set_name(v, "bytes") < 0) rc = err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    if (rc < 0) bpe_vocab_free(&v);
    *out = v;
    return rc;
}

int bpe_vocab_load_file(bpe_vocab_t **out, const char *path, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return err_fail(err, errlen, errno == ENOENT ? BPE_ENOENT : BPE_EIO, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bpe_vocab_t *v = NULL;
    json_t *hdr = NULL;
    long lineno = 1, count = 0;
    int rc = BPE_OK;
    const size_t mlen = strlen(BPE_FILE_MAGIC);
    if ((n = getline(&line, &cap, f)) <= 0 || strncmp(line, BPE_FILE_MAGIC " ", mlen + 1) != 0) {
        rc = err_fail(err, errlen, BPE_EFORMAT, "%s:1: not a vocabulary file (no \"%s\" header)", path, BPE_FILE_MAGIC);
        goto done;
    }
    char *end;
    long version = strtol(line + mlen + 1, &end, 10);
    if (version != BPE_FILE_VERSION) {
        rc = err_fail(err, errlen, BPE_EFORMAT, "%s:1: version %ld, this build reads %d", path, version, BPE_FILE_VERSION);
        goto done;
    }
    json_error_t je;
    hdr = json_loads(end, JSON_DISABLE_EOF_CHECK, &je);
    json_t *pat = hdr ? json_object_get(hdr, "pattern") : NULL, *name = hdr ? json_object_get(hdr, "name") : NULL;
    json_t *ntok = hdr ? json_object_get(hdr, "n_tokens") : NULL;
    if (!json_is_string(pat) || !json_is_string(name) || !json_is_integer(ntok)) {
        rc = err_fail(err, errlen, BPE_EFORMAT, "%s:1: header needs \"pattern\", \"name\" and \"n_tokens\"", path);
        goto done;
    }
    if (json_integer_value(ntok) < 0) {
        rc = err_fail(err, errlen, BPE_EFORMAT, "%s:1: header's n_tokens %lld is negative", path,
                      (long long)json_integer_value(ntok));
        goto done;
    }
    if ((rc = bpe_vocab_new(&v, err, errlen)) < 0) goto done;
    if (bpe_vocab_set_pattern(v, json_string_value(pat)) < 0 || bpe_vocab_set_name(v, json_string_value(name)) < 0) {
        rc = err_fail(err, errlen, BPE_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = io_add_specials(v, json_object_get(hdr, "special_tokens"), path, err, errlen)) < 0) goto done;
    uint8_t buf[1024];
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (line[n - 1] != '\n') {
            rc = err_fail(err, errlen, BPE_EFORMAT, "%s:%ld: truncated line", path, lineno);
            goto done;
        }
        char *sp = memchr(line, ' ', n);
        long blen = -1;
        if (sp && sp - line <= (long)(4 * sizeof buf / 3)) blen = b64_decode(line, sp - line, buf);
        errno = 0;
        unsigned long long id = sp ? strtoull(sp + 1, &end, 10) : 0;
        if (sp && sp - line > (long)(4 * sizeof buf / 3)) {
            rc = err_fail(err, errlen, BPE_EFORMAT, "%s:%ld: a token of over %zu bytes (%ld base64 characters)", path,
                          lineno, sizeof buf, (long)(sp - line));
            goto done;
        }
        if (blen <= 0 || errno || end == sp + 1 || *end != '\n' || id >= BPE_NO_RANK) {
            rc = err_fail(err, errlen, BPE_EFORMAT, "%s:%ld: expected \"<base64 token> <id>\"", path, lineno);
            goto done;
        }
        char e[160];
        if ((rc = bpe_vocab_add(v, buf, (uint32_t)blen, (uint32_t)id, e, sizeof e)) < 0) {
            rc = err_fail(err, errlen, rc, "%s:%ld: %s", path, lineno, e);
            goto done;
        }
        count++;
    }
    if (ferror(f)) {
        rc = err_fail(err, errlen, BPE_EIO, "%s: read error", path);
        goto done;
    }
    if (count != json_integer_value(ntok)) {
        rc = err_fail(err, errlen, BPE_EFORMAT, "%s: %s: %ld tokens, header says %lld", path,
                      count < json_integer_value(ntok) ? "truncated" : "more tokens than its header", count,
                      (long long)json_integer_value(ntok));
        goto done;
    }
    if ((rc = bpe_vocab_check(v, err, errlen)) < 0) {
        char e[200];
        snprintf(e, sizeof e, "%s", err ? err : "");
        rc = err_fail(err, errlen, rc, "%s: %s", path, e);
    }
done:
    free(line);
    fclose(f);
    json_decref(hdr);
    if (rc < 0) bpe_vocab_free(&v);
    *out = v;
    return rc;
}

int bpe_vocab_save_file(const bpe_vocab_t *v, const char *path, char *err, size_t errlen) {
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) return err_fail(err, errlen, BPE_ENOMEM, "out of memory");
    snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return err_fail(err, errlen, BPE_EIO, "%s: %s", path, strerror(e));
    }
    FILE *f = fdopen(fd, "wb");
    json_t *hdr = json_object(), *spec = json_object();
    json_object_set_new(hdr, "name", json_string(bpe_vocab_name(v)));
    json_object_set_new(hdr, "pattern", json_string(bpe_vocab_pattern(v)));
    json_object_set_new(hdr, "n_tokens", json_integer(bpe_vocab_n_ordinary(v)));
    for (int i = 0; i < bpe_vocab_n_special(v); i++) {
        uint32_t id;
        const char *s = bpe_vocab_special(v, i, &id);
        json_object_set_new(spec, s, json_integer(id));
    }
    json_object_set_new(hdr, "special_tokens", spec);
    char *js = json_dumps(hdr, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(hdr);
    int ok = f && js && fprintf(f, "%s %d %s\n", BPE_FILE_MAGIC, BPE_FILE_VERSION, js) > 0;
    free(js);
    char b64[1500];
    for (uint32_t id = 0; ok && id < bpe_vocab_size(v); id++) {
        uint32_t len;
        const uint8_t *t = bpe_vocab_token(v, id, &len);
        if (!t || bpe_vocab_is_special(v, id)) continue;
        if (len > 1024) { ok = 0; break; }
        b64_encode(t, len, b64);
        ok = fprintf(f, "%s %u\n", b64, id) > 0;
    }
    if (ok) ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    int e = errno;
    if (f) {
        if (fclose(f) != 0) ok = 0;
    } else {
        close(fd);
    }
    if (ok && rename(tmp, path) != 0) { ok = 0; e = errno; }
    if (!ok) {
        unlink(tmp);
        free(tmp);
        return err_fail(err, errlen, BPE_EIO, "%s: write failed: %s", path, strerror(e));
    }
    free(tmp);
    /* make the rename itself durable */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return BPE_OK;
}

static int io_is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The directories an encoding name is looked up in, in order: $FT_TIKTOKEN_DIR; next to the
 * running program, as `make install` lays it out (PREFIX/bin/x -> PREFIX/share/freetf/tiktoken)
 * and as a checkout has it (bin/x -> data/tiktoken/encoders); the working directory's
 * data/tiktoken/encoders. Writes up to cap entries into dirs (storage in buf); returns how many. */
static int io_encoding_dirs(const char *dirs[], int cap, char buf[2][4096]) {
    int n = 0;
    const char *env = getenv("FT_TIKTOKEN_DIR");
    if (env && *env && n < cap) dirs[n++] = env;
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *bin = dirname(exe); /* PREFIX/bin */
        snprintf(buf[0], sizeof buf[0], "%s/../share/freetf/tiktoken", bin);
        snprintf(buf[1], sizeof buf[1], "%s/../data/tiktoken/encoders", bin);
        if (n < cap) dirs[n++] = buf[0];
        if (n < cap) dirs[n++] = buf[1];
    }
    if (n < cap) dirs[n++] = "data/tiktoken/encoders";
    return n;
}

int bpe_vocab_open(bpe_vocab_t **out, const char *spec, char *err, size_t errlen) {
    *out = NULL;
    if (!spec || !*spec) return err_fail(err, errlen, BPE_EARG, "empty vocabulary name");
    if (strcmp(spec, "bytes") == 0) return bpe_vocab_make_bytes(out, err, errlen);
    if (!strchr(spec, '/') && !io_is_file(spec)) {
        const char *dirs[4];
        char buf[2][4096], p[4200];
        int n = io_encoding_dirs(dirs, 4, buf);
        for (int i = 0; i < n; i++) {
            snprintf(p, sizeof p, "%s/%s.json", dirs[i], spec);
            if (io_is_file(p)) return bpe_vocab_load_tiktoken_json(out, p, err, errlen);
        }
        return err_fail(err, errlen, BPE_ENOENT,
                        "%s: no such vocabulary file, nor %s.json in $FT_TIKTOKEN_DIR, PREFIX/share/freetf/tiktoken "
                        "next to this program, or data/tiktoken/encoders (run `make data`, or `make install`)",
                        spec, spec);
    }
    FILE *f = fopen(spec, "rb");
    if (!f) return err_fail(err, errlen, errno == ENOENT ? BPE_ENOENT : BPE_EIO, "%s: %s", spec, strerror(errno));
    int c = fgetc(f);
    fclose(f);
    if (c == '{') return bpe_vocab_load_tiktoken_json(out, spec, err, errlen);
    return bpe_vocab_load_file(out, spec, err, errlen);
}
