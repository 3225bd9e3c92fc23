/* bus/keys.c: CURVE key files (see keys.h). */
#include "bus/keys.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/errmsg.h"

#define LINE_MAX_BYTES 4096

int bus_keys_valid(const char *s) {
    uint8_t raw[32];
    return s && strlen(s) == BUS_KEY_Z85 - 1 && zmq_z85_decode(raw, s) != NULL;
}

int bus_keys_generate(bus_keypair_t *kp, char *err, size_t errlen) {
    if (zmq_curve_keypair(kp->pub, kp->sec) != 0)
        return err_fail(err, errlen, BUS_ERR_REFUSED, "cannot make a key pair: %s (is libzmq built with CURVE?)",
                        zmq_strerror(zmq_errno()));
    return 0;
}

/* Writes text to path through a temporary file in the same directory: a crash leaves either
 * the old state or the whole new file, never half a key. */
static int write_atomic(const char *path, const char *text, mode_t mode, int force, char *err,
                        size_t errlen) {
    if (!force && access(path, F_OK) == 0)
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s exists (keys are not replaced without --force)", path);
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: path too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0) return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    int ok = fchmod(fd, mode) == 0 && write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    if (close(fd) != 0 && ok) ok = 0, e = errno;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) e = errno;
        unlink(tmp);
        return err_fail(err, errlen, BUS_ERR_REFUSED, "writing %s: %s", path, strerror(e));
    }
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd); /* the rename itself survives a crash */
        close(dfd);
    }
    return 0;
}

int bus_keys_write(const char *prefix, const bus_keypair_t *kp, const char *name, int force,
                   char *err, size_t errlen) {
    char path[4100], text[512];
    if (!bus_keys_valid(kp->pub) || !bus_keys_valid(kp->sec))
        return err_fail(err, errlen, BUS_ERR_REFUSED, "bus_keys_write: not a key pair");
    if (strlen(prefix) > 4000) return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: path too long", prefix);
    if (strpbrk(name, "\n\r")) return err_fail(err, errlen, BUS_ERR_REFUSED, "a key name is one line");
    snprintf(path, sizeof path, "%s.key", prefix);
    snprintf(text, sizeof text,
             "# CURVE key pair (Z85), written by bin/bus keygen: keep it private (mode 0600)\n"
             "# name %.200s\npublic %s\nsecret %s\n", name, kp->pub, kp->sec);
    int rc = write_atomic(path, text, 0600, force, err, errlen);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s.pub", prefix);
    snprintf(text, sizeof text, "%s %.200s\n", kp->pub, name);
    return write_atomic(path, text, 0644, force, err, errlen);
}

/* Calls fn(line, lineno, ctx) for every line that is not blank or a comment, with leading
 * blanks skipped and the line end removed. fn returns 0 to go on, else a status. */
typedef int (*line_fn)(char *line, int lineno, void *ctx, char *err, size_t errlen);

static int each_line(const char *path, line_fn fn, void *ctx, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: %s", path, strerror(errno));
    char line[LINE_MAX_BYTES];
    int lineno = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n') {
            rc = err_fail(err, errlen, BUS_ERR_REFUSED, "%s:%d: line longer than %d bytes", path, lineno,
                          LINE_MAX_BYTES - 2);
            break;
        }
        line[strcspn(line, "\r\n")] = 0;
        char *p = line + strspn(line, " \t");
        if (*p == 0 || *p == '#') continue;
        rc = fn(p, lineno, ctx, err, errlen);
    }
    if (!rc && ferror(f)) rc = err_fail(err, errlen, BUS_ERR_REFUSED, "%s: read error", path);
    fclose(f);
    return rc;
}

/* The first blank-separated word of line, cut off in place; *rest is what follows. */
static char *word(char *line, char **rest) {
    char *end = line + strcspn(line, " \t");
    *rest = *end ? end + 1 + strspn(end + 1, " \t") : end;
    *end = 0;
    return line;
}

typedef struct {
    const char *path;
    bus_keypair_t *kp;
} pair_ctx_t;

static int pair_line(char *line, int lineno, void *c, char *err, size_t errlen) {
    pair_ctx_t *pc = c;
    char *rest, *what = word(line, &rest), *val = word(rest, &rest);
    char *dst = !strcmp(what, "public") ? pc->kp->pub : !strcmp(what, "secret") ? pc->kp->sec : NULL;
    if (!dst || *rest)
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s:%d: want \"public KEY\" or \"secret KEY\"", pc->path,
                        lineno);
    if (!bus_keys_valid(val))
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s:%d: %s key is not 40 characters of Z85", pc->path,
                        lineno, what);
    memcpy(dst, val, BUS_KEY_Z85);
    return 0;
}

int bus_keys_read_pair(const char *path, bus_keypair_t *kp, char *err, size_t errlen) {
    struct stat st;
    memset(kp, 0, sizeof *kp);
    if (stat(path, &st) != 0) return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: %s", path, strerror(errno));
    if (st.st_mode & 077)
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: a secret key that others may read or write (mode %03o; "
                        "chmod 600 it)", path, (unsigned)(st.st_mode & 0777));
    pair_ctx_t pc = {path, kp};
    int rc = each_line(path, pair_line, &pc, err, errlen);
    if (rc) return rc;
    if (!kp->pub[0] || !kp->sec[0])
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: needs a \"public\" and a \"secret\" line", path);
    char derived[BUS_KEY_Z85];
    if (zmq_curve_public(derived, kp->sec) != 0 || strcmp(derived, kp->pub) != 0)
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: the public key is not the secret key's", path);
    return 0;
}

typedef struct {
    const char *path;
    void *arr; /* char[][BUS_KEY_Z85] or bus_trust_t[] */
    int n, cap;
} list_ctx_t;

/* Room for one more element of elem bytes in lc->arr. */
static int grow(list_ctx_t *lc, size_t elem) {
    if (lc->n < lc->cap) return 0;
    int cap = lc->cap ? 2 * lc->cap : 16;
    void *p = realloc(lc->arr, elem * (size_t)cap);
    if (!p) return -1;
    lc->arr = p;
    lc->cap = cap;
    return 0;
}

static int list_line(char *line, int lineno, void *c, char *err, size_t errlen) {
    list_ctx_t *lc = c;
    char *rest, *key = word(line, &rest);
    if (!bus_keys_valid(key))
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s:%d: not a 40-character Z85 public key", lc->path, lineno);
    if (grow(lc, BUS_KEY_Z85)) return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: out of memory", lc->path);
    memcpy((char *)lc->arr + (size_t)BUS_KEY_Z85 * lc->n++, key, BUS_KEY_Z85);
    return 0;
}

int bus_keys_read_list(const char *path, char (**keys)[BUS_KEY_Z85], int *n, char *err, size_t errlen) {
    list_ctx_t lc = {.path = path};
    int rc = each_line(path, list_line, &lc, err, errlen);
    if (rc) {
        free(lc.arr);
        return rc;
    }
    *keys = lc.arr;
    *n = lc.n;
    return 0;
}

static int trust_line(char *line, int lineno, void *c, char *err, size_t errlen) {
    list_ctx_t *lc = c;
    char *rest, *pattern = word(line, &rest), *key = word(rest, &rest);
    if (!*key || *rest)
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s:%d: want \"ENDPOINT-PATTERN SERVER-PUBLIC-KEY\"", lc->path,
                        lineno);
    if (!bus_keys_valid(key))
        return err_fail(err, errlen, BUS_ERR_REFUSED, "%s:%d: not a 40-character Z85 public key", lc->path, lineno);
    if (grow(lc, sizeof(bus_trust_t))) return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: out of memory", lc->path);
    bus_trust_t *t = (bus_trust_t *)lc->arr + lc->n;
    if (!(t->pattern = strdup(pattern))) return err_fail(err, errlen, BUS_ERR_REFUSED, "%s: out of memory", lc->path);
    memcpy(t->key, key, BUS_KEY_Z85);
    lc->n++;
    return 0;
}

int bus_keys_read_trust(const char *path, bus_trust_t **t, int *n, char *err, size_t errlen) {
    list_ctx_t lc = {.path = path};
    int rc = each_line(path, trust_line, &lc, err, errlen);
    bus_trust_t *arr = lc.arr;
    if (rc) {
        bus_keys_trust_free(&arr, lc.n);
        return rc;
    }
    *t = arr;
    *n = lc.n;
    return 0;
}

void bus_keys_trust_free(bus_trust_t **t, int n) {
    if (!t || !*t) return;
    for (int i = 0; i < n; i++) free((*t)[i].pattern);
    free(*t);
    *t = NULL;
}

const char *bus_keys_trusted(const bus_trust_t *t, int n, const char *endpoint) {
    for (int i = 0; i < n; i++)
        if (fnmatch(t[i].pattern, endpoint, 0) == 0) return t[i].key;
    return NULL;
}
