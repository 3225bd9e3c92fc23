/* model/checkpoint.c: writing, finding, verifying and loading checkpoint directories
 * (layout and atomicity rule in checkpoint.h and docs/FORMATS.md §3). */
#include "common/errmsg.h"
#include "model/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "model/mixer_config.h"
#include "model/safetensors.h"

#define CKPT_PATH_MAX 4096
#define CKPT_DIR_MAX 3800      /* leaves room for "/ckpt-<step>.tmp/<file>" */
#define CKPT_MANIFEST_MAX 65536 /* a real one is a few hundred bytes */

static const char *const CKPT_REQUIRED[] = {"config.json", "model.safetensors", "state.json"};
#define CKPT_N_REQUIRED 3

/* Appends one line to a '\n'-separated warning buffer, dropping what does not fit. */
static void ck_warn(char *warn, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ck_warn(char *warn, size_t cap, const char *fmt, ...) {
    if (!warn || !cap) return;
    size_t at = strnlen(warn, cap);
    if (at + 2 >= cap) return;
    if (at) warn[at++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(warn + at, cap - at, fmt, ap);
    va_end(ap);
}

/* dir + "/" + name. Directory arguments are bounded at the entry points (CKPT_DIR_MAX), so
 * this cannot truncate; if it somehow did, the empty path makes the following open fail. */
static void ck_join(char *out, size_t cap, const char *dir, const char *name) {
    if (snprintf(out, cap, "%s/%s", dir, name) >= (int)cap) out[0] = 0;
}

/* Maps a safetensors status onto ours (the message is already in err). */
static int ck_st_code(int st) {
    switch (st) {
    case ST_EIO: return CKPT_EIO;
    case ST_ECHECKSUM: return CKPT_ECORRUPT;
    case ST_ENOTFOUND: case ST_ESHAPE: case ST_EDTYPE: return CKPT_EMISMATCH;
    case ST_ENOMEM: return CKPT_ENOMEM;
    case ST_EARG: return CKPT_EARG;
    default: return CKPT_EFORMAT;
    }
}

int ckpt_dir_name(char *buf, size_t cap, const char *run_dir, int64_t step) {
    if (!buf || !run_dir || step < 0 || strlen(run_dir) > CKPT_DIR_MAX - 32) return CKPT_EARG;
    int w = snprintf(buf, cap, "%s/ckpt-%08lld", run_dir, (long long)step);
    return w < 0 || (size_t)w >= cap ? CKPT_EARG : 0;
}

/* "ckpt-" + at least 8 digits and nothing else -> step; -1 otherwise (".tmp" included). */
static int64_t ck_parse_name(const char *name) {
    if (strncmp(name, "ckpt-", 5) != 0) return -1;
    const char *d = name + 5;
    size_t n = strspn(d, "0123456789");
    if (n < 8 || n > 18 || d[n] != 0) return -1;
    return strtoll(d, NULL, 10);
}

/* ---------------------------------------------------------------- small file helpers */

static int ck_fsync_path(const char *path, int dir) {
    int fd = open(path, dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int ck_write_file(const char *path, const char *buf, size_t n, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return err_fail(err, errlen, CKPT_EIO, "%s: cannot create: %s", path, strerror(errno));
    size_t at = 0;
    while (at < n) {
        ssize_t w = write(fd, buf + at, n - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            return err_fail(err, errlen, CKPT_EIO, "%s: write failed: %s", path, strerror(e));
        }
        at += (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return err_fail(err, errlen, CKPT_EIO, "%s: fsync failed: %s", path, strerror(e));
    }
    if (close(fd) != 0) return err_fail(err, errlen, CKPT_EIO, "%s: close failed: %s", path, strerror(errno));
    return 0;
}

static int ck_write_json(const char *path, const json_t *j, size_t flags, char *err, size_t errlen) {
    char *s = json_dumps(j, flags);
    if (!s) return err_fail(err, errlen, CKPT_ENOMEM, "%s: cannot serialise JSON", path);
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) { free(s); return err_fail(err, errlen, CKPT_ENOMEM, "%s: out of memory", path); }
    t[n] = '\n';
    t[n + 1] = 0;
    int rc = ck_write_file(path, t, n + 1, err, errlen);
    free(t);
    return rc;
}

/* Size and XXH3-64 of a file, streamed so size does not matter. */
static int ck_hash_file(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_fail(err, errlen, CKPT_ECORRUPT, "%s: cannot open: %s", path, strerror(errno));
    XXH3_state_t *s = XXH3_createState();
    char *buf = malloc(1 << 20);
    if (!s || !buf) {
        close(fd);
        XXH3_freeState(s);
        free(buf);
        return err_fail(err, errlen, CKPT_ENOMEM, "%s: out of memory", path);
    }
    XXH3_64bits_reset(s);
    uint64_t total = 0;
    int rc = 0;
    for (;;) {
        ssize_t r = read(fd, buf, 1 << 20);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) { rc = err_fail(err, errlen, CKPT_EIO, "%s: read failed: %s", path, strerror(errno)); break; }
        if (r == 0) break;
        XXH3_64bits_update(s, buf, (size_t)r);
        total += (uint64_t)r;
    }
    close(fd);
    *size = total;
    *hash = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    free(buf);
    return rc;
}

/* Removes a checkpoint-like directory: MANIFEST first, so a half-deleted one never looks
 * complete, then the plain files, then the directory. We never create subdirectories. */
static int ck_remove_dir(const char *dir) {
    char p[CKPT_PATH_MAX];
    ck_join(p, sizeof p, dir, "MANIFEST");
    unlink(p);
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
    return rmdir(dir);
}

/* ---------------------------------------------------------------- manifest */

static const char *const CKPT_FILES[] = {"config.json", "model.safetensors", "optimizer.safetensors",
                                         "state.json"};
#define CKPT_N_FILES 4

static int ck_write_manifest(const char *dir, int64_t step, char *err, size_t errlen) {
    char buf[2048], p[CKPT_PATH_MAX];
    size_t at = (size_t)snprintf(buf, sizeof buf, "%s\nstep %lld\n", CKPT_MANIFEST_MAGIC, (long long)step);
    for (int i = 0; i < CKPT_N_FILES; i++) {
        ck_join(p, sizeof p, dir, CKPT_FILES[i]);
        if (access(p, F_OK) != 0) continue; /* optimizer.safetensors is optional */
        uint64_t size, hash;
        int rc = ck_hash_file(p, &size, &hash, err, errlen);
        if (rc) return rc;
        at += (size_t)snprintf(buf + at, sizeof buf - at, "file %s %llu %016llx\n", CKPT_FILES[i],
                               (unsigned long long)size, (unsigned long long)hash);
    }
    /* The end line hashes everything above it, so a torn or edited manifest is caught too. */
    at += (size_t)snprintf(buf + at, sizeof buf - at, "end %016llx\n",
                           (unsigned long long)XXH3_64bits(buf, at));
    ck_join(p, sizeof p, dir, "MANIFEST");
    return ck_write_file(p, buf, at, err, errlen);
}

int ckpt_verify_ex(const char *dir, int full, char *err, size_t errlen) {
    if (!dir || strlen(dir) > CKPT_DIR_MAX) return err_fail(err, errlen, CKPT_EARG, "ckpt_verify: no directory or path too long");
    char p[CKPT_PATH_MAX];
    ck_join(p, sizeof p, dir, "MANIFEST");
    FILE *fp = fopen(p, "rb");
    if (!fp)
        return err_fail(err, errlen, CKPT_ECORRUPT, "%s: no MANIFEST (%s): checkpoint incomplete", dir,
                       strerror(errno));
    /* buf is tokenised in place; text keeps the bytes as written for the end-line hash. */
    char *buf = malloc(2 * (CKPT_MANIFEST_MAX + 1)), *text = buf + CKPT_MANIFEST_MAX + 1;
    if (!buf) { fclose(fp); return err_fail(err, errlen, CKPT_ENOMEM, "%s: out of memory", p); }
    size_t n = fread(buf, 1, CKPT_MANIFEST_MAX + 1, fp);
    fclose(fp);
    int rc = 0;
    if (n <= CKPT_MANIFEST_MAX) memcpy(text, buf, n);
    if (n > CKPT_MANIFEST_MAX) { rc = err_fail(err, errlen, CKPT_EFORMAT, "%s: larger than %d bytes", p, CKPT_MANIFEST_MAX); goto out; }
    buf[n] = 0;
    if (strlen(buf) != n) { rc = err_fail(err, errlen, CKPT_EFORMAT, "%s: contains NUL bytes", p); goto out; }
    size_t ml = strlen(CKPT_MANIFEST_MAGIC);
    if (n < ml + 1 || memcmp(buf, CKPT_MANIFEST_MAGIC, ml) != 0 || buf[ml] != '\n') {
        rc = err_fail(err, errlen, CKPT_EFORMAT, "%s: not a checkpoint manifest (want first line \"%s\")", p, CKPT_MANIFEST_MAGIC);
        goto out;
    }
    int have[CKPT_N_FILES] = {0}, ended = 0, has_step = 0;
    long long step = -1;
    char *save = NULL;
    size_t line_at = 0;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line_at = (size_t)(line - buf);
        if (line_at == 0) continue; /* the magic line */
        if (ended) { rc = err_fail(err, errlen, CKPT_EFORMAT, "%s: text after the end line", p); goto out; }
        char name[64], extra;
        unsigned long long size, hash;
        if (sscanf(line, "step %lld %c", &step, &extra) == 1 && step >= 0) {
            has_step = 1;
        } else if (sscanf(line, "file %63s %llu %16llx %c", name, &size, &hash, &extra) == 3) {
            int k = -1;
            for (int i = 0; i < CKPT_N_FILES; i++)
                if (strcmp(name, CKPT_FILES[i]) == 0) k = i;
            if (k < 0 || have[k]) { rc = err_fail(err, errlen, CKPT_EFORMAT, "%s: unknown or repeated file \"%s\"", p, name); goto out; }
            have[k] = 1;
            char fp2[CKPT_PATH_MAX];
            ck_join(fp2, sizeof fp2, dir, name);
            struct stat sb;
            if (stat(fp2, &sb) != 0) { rc = err_fail(err, errlen, CKPT_ECORRUPT, "%s: missing (listed in MANIFEST)", fp2); goto out; }
            if ((unsigned long long)sb.st_size != size) {
                rc = err_fail(err, errlen, CKPT_ECORRUPT, "%s: %lld bytes, MANIFEST says %llu (truncated?)", fp2,
                             (long long)sb.st_size, size);
                goto out;
            }
            if (full) {
                uint64_t got_size, got;
                if ((rc = ck_hash_file(fp2, &got_size, &got, err, errlen))) goto out;
                if (got != hash || got_size != size) {
                    rc = err_fail(err, errlen, CKPT_ECORRUPT, "%s: xxh3 %016llx, MANIFEST says %016llx (corrupt)", fp2,
                                 (unsigned long long)got, hash);
                    goto out;
                }
            }
        } else if (sscanf(line, "end %16llx %c", &hash, &extra) == 1) {
            if (XXH3_64bits(text, line_at) != hash) {
                rc = err_fail(err, errlen, CKPT_ECORRUPT, "%s: its own checksum does not match (edited or torn)", p);
                goto out;
            }
            ended = 1;
        } else {
            rc = err_fail(err, errlen, CKPT_EFORMAT, "%s: bad line \"%.60s\"", p, line);
            goto out;
        }
    }
    if (!ended) { rc = err_fail(err, errlen, CKPT_ECORRUPT, "%s: no end line (torn write)", p); goto out; }
    if (!has_step) { rc = err_fail(err, errlen, CKPT_EFORMAT, "%s: no step line", p); goto out; }
    for (int i = 0; i < CKPT_N_REQUIRED; i++)
        for (int k = 0; k < CKPT_N_FILES; k++)
            if (!strcmp(CKPT_REQUIRED[i], CKPT_FILES[k]) && !have[k]) {
                rc = err_fail(err, errlen, CKPT_ECORRUPT, "%s: does not list %s", p, CKPT_REQUIRED[i]);
                goto out;
            }
    /* A directory renamed by hand to another step would resume at the wrong place. */
    const char *base = strrchr(dir, '/');
    int64_t named = ck_parse_name(base ? base + 1 : dir);
    if (named >= 0 && named != step)
        rc = err_fail(err, errlen, CKPT_ECORRUPT, "%s: written for step %lld but the directory says %lld", p,
                     step, (long long)named);
out:
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------- scanning */

static int ck_cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of every ckpt-<digits> directory, newest first. Missing run_dir: *n = 0. */
static int ck_scan(const char *run_dir, int64_t **steps, int *n, char *err, size_t errlen) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return err_fail(err, errlen, CKPT_EIO, "%s: cannot list: %s", run_dir, strerror(errno));
    }
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = ck_parse_name(e->d_name);
        if (s < 0) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *t = realloc(*steps, sizeof **steps * cap);
            if (!t) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                *n = 0;
                return err_fail(err, errlen, CKPT_ENOMEM, "%s: out of memory", run_dir);
            }
            *steps = t;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    qsort(*steps, *n, sizeof **steps, ck_cmp_desc);
    return 0;
}

int ckpt_is_damage(int code) {
    return code == CKPT_EIO || code == CKPT_EFORMAT || code == CKPT_ECORRUPT || code == CKPT_ECONFIG ||
           code == CKPT_EMISMATCH;
}

int ckpt_open(const char *dir, ckpt_load_fn load, void *ctx, char *err, size_t errlen) {
    int rc = ckpt_verify(dir, err, errlen);
    if (rc || !load) return rc;
    char why[1024] = "";
    rc = load(ctx, dir, why, sizeof why);
    /* every verdict names the checkpoint, whatever the loader's message starts with */
    if (rc && strncmp(why, dir, strlen(dir)) == 0) return err_fail(err, errlen, rc, "%s", why);
    /* a load that forgot its reason still gets a line that says something */
    if (rc && !why[0]) return err_fail(err, errlen, rc, "%s: cannot be loaded (code %d, no reason given)", dir, rc);
    if (rc) return err_fail(err, errlen, rc, "%s: %s", dir, why);
    return 0;
}

/* Appends name to a ", "-separated list, ending it with "..." once it is full. */
static void ck_list_add(char *list, size_t cap, const char *name) {
    size_t at = strnlen(list, cap);
    if (at + 4 >= cap || (at >= 3 && !strcmp(list + at - 3, "..."))) return;
    int w = snprintf(list + at, cap - at, "%s%s", at ? ", " : "", name);
    if (w < 0 || (size_t)w >= cap - at) snprintf(list + at, cap - at, "%s...", at ? ", " : "");
}

int ckpt_open_newest(const char *run_dir, ckpt_load_fn load, void *ctx, ckpt_pick_t *pick, char *err,
                     size_t errlen) {
    return ckpt_open_newest_below(run_dir, INT64_MAX, load, ctx, pick, err, errlen);
}

int ckpt_open_newest_below(const char *run_dir, int64_t below, ckpt_load_fn load, void *ctx, ckpt_pick_t *pick,
                           char *err, size_t errlen) {
    if (!pick) return err_fail(err, errlen, CKPT_EARG, "ckpt_open_newest: no result buffer");
    memset(pick, 0, sizeof *pick);
    pick->step = -1;
    if (!run_dir || strlen(run_dir) > CKPT_DIR_MAX - 32)
        return err_fail(err, errlen, CKPT_EARG, "ckpt_open_newest: no run directory or path too long");
    int64_t *steps;
    int n, rc = ck_scan(run_dir, &steps, &n, err, errlen);
    if (rc) return rc;
    int found = 0;
    for (int i = 0; i < n && !found; i++) {
        char dir[CKPT_PATH_MAX], why[1024];
        if (steps[i] >= below || ckpt_dir_name(dir, sizeof dir, run_dir, steps[i])) continue;
        rc = ckpt_open(dir, load, ctx, why, sizeof why);
        if (rc && !ckpt_is_damage(rc)) {
            free(steps);
            return err_fail(err, errlen, rc, "%s", why);
        }
        if (rc) {
            ck_warn(pick->warn, sizeof pick->warn, "skipping %s", why);
            const char *base = strrchr(dir, '/');
            ck_list_add(pick->skipped, sizeof pick->skipped, base ? base + 1 : dir);
            pick->n_skipped++;
            continue;
        }
        snprintf(pick->path, sizeof pick->path, "%s", dir);
        pick->step = steps[i];
        found = 1;
    }
    free(steps);
    return found;
}

int ckpt_find_latest(const char *run_dir, char *out_path, size_t cap, int64_t *step, char *warn,
                     size_t warnlen, char *err, size_t errlen) {
    if (warn && warnlen) warn[0] = 0;
    ckpt_pick_t *pick = malloc(sizeof *pick);
    if (!pick) return err_fail(err, errlen, CKPT_ENOMEM, "out of memory");
    int found = ckpt_open_newest(run_dir, NULL, NULL, pick, err, errlen);
    if (found >= 0 && warn && warnlen) snprintf(warn, warnlen, "%s", pick->warn);
    if (found == 1 && out_path && cap) {
        if (strlen(pick->path) >= cap)
            found = err_fail(err, errlen, CKPT_EARG, "%s: path too long for the caller's buffer", pick->path);
        else
            strcpy(out_path, pick->path);
    }
    if (found == 1 && step) *step = pick->step;
    free(pick);
    return found;
}

int ckpt_list(const char *run_dir, int full, int64_t **steps, int *n, char *warn, size_t warnlen,
              char *err, size_t errlen) {
    if (!run_dir || !steps || !n || strlen(run_dir) > CKPT_DIR_MAX - 32) return err_fail(err, errlen, CKPT_EARG, "ckpt_list: bad arguments");
    if (warn && warnlen) warn[0] = 0;
    int64_t *all;
    int na, rc = ck_scan(run_dir, &all, &na, err, errlen);
    if (rc) return rc;
    int64_t *ok = na ? malloc(sizeof *ok * na) : NULL;
    if (na && !ok) { free(all); return err_fail(err, errlen, CKPT_ENOMEM, "%s: out of memory", run_dir); }
    int k = 0;
    for (int i = na - 1; i >= 0; i--) { /* oldest first */
        char dir[CKPT_PATH_MAX], why[512];
        if (ckpt_dir_name(dir, sizeof dir, run_dir, all[i])) continue;
        if (ckpt_verify_ex(dir, full, why, sizeof why) != 0) {
            ck_warn(warn, warnlen, "skipping %s", why);
            continue;
        }
        ok[k++] = all[i];
    }
    free(all);
    if (k == 0) { free(ok); ok = NULL; }
    *steps = ok;
    *n = k;
    return 0;
}

/* ---------------------------------------------------------------- saving */

static int ck_mkdir(const char *path, char *err, size_t errlen) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) {
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return 0;
        return err_fail(err, errlen, CKPT_EIO, "%s: exists and is not a directory", path);
    }
    return err_fail(err, errlen, CKPT_EIO, "%s: cannot create directory: %s", path, strerror(errno));
}

/* mkdir -p: every missing parent of path, then path. */
static int ck_mkdir_parents(const char *path, char *err, size_t errlen) {
    char p[CKPT_PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return err_fail(err, errlen, CKPT_EARG, "%s: path too long", path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/' || s[-1] == '/') continue;
        *s = 0;
        int rc = ck_mkdir(p, err, errlen);
        *s = '/';
        if (rc) return rc;
    }
    return ck_mkdir(p, err, errlen);
}

int ckpt_run_dir_prepare(const char *run_dir, char *err, size_t errlen) {
    if (!run_dir || !*run_dir || strlen(run_dir) > CKPT_DIR_MAX - 32)
        return err_fail(err, errlen, CKPT_EARG, "run directory: empty or path too long");
    int rc = ck_mkdir_parents(run_dir, err, errlen);
    if (rc) return rc;
    /* access(W_OK) would ignore read-only mounts and ACL details: try what a save will do */
    char p[CKPT_PATH_MAX];
    snprintf(p, sizeof p, "%s/.write-test-%ld", run_dir, (long)getpid());
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return err_fail(err, errlen, CKPT_EIO, "%s: cannot create files in it: %s", run_dir, strerror(errno));
    close(fd);
    unlink(p);
    return 0;
}

int ckpt_run_dir_lock(const char *run_dir, int *fd, char *err, size_t errlen) {
    *fd = -1;
    char p[CKPT_PATH_MAX];
    if (snprintf(p, sizeof p, "%s/.lock", run_dir) >= (int)sizeof p)
        return err_fail(err, errlen, CKPT_EARG, "%s: path too long", run_dir);
    int f = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0) return err_fail(err, errlen, CKPT_EIO, "%s: %s", p, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[32] = "";
        ssize_t n = pread(f, holder, sizeof holder - 1, 0);
        close(f);
        if (e != EWOULDBLOCK) return err_fail(err, errlen, CKPT_EIO, "%s: flock: %s", p, strerror(e));
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        return err_fail(err, errlen, CKPT_EREFUSED, "%s is in use by another writer (pid %s); one run directory takes one trainer",
                        run_dir, *holder ? holder : "unknown");
    }
    /* the holder's pid, for the refusal line of the next one (informative only: the lock is the flock) */
    char line[32];
    int len = snprintf(line, sizeof line, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, line, (size_t)len, 0) != len) { /* the lock holds without it */ }
    *fd = f;
    return 0;
}

/* Old checkpoints beyond the newest keep_last complete ones (the new one counts and is kept). */
static void ck_prune(const char *run_dir, int64_t keep_step, int keep_last) {
    if (keep_last <= 0) return;
    int64_t *steps;
    int n;
    if (ck_scan(run_dir, &steps, &n, NULL, 0) != 0) return;
    int kept = 1;
    for (int i = 0; i < n; i++) {
        /* Newer than what we just wrote: left from an abandoned future (a resume from an
         * older step); not ours to judge, so left alone. */
        if (steps[i] >= keep_step) continue;
        char dir[CKPT_PATH_MAX];
        if (ckpt_dir_name(dir, sizeof dir, run_dir, steps[i])) continue;
        if (kept < keep_last) {
            kept += ckpt_verify(dir, NULL, 0) == 0; /* an incomplete one does not count */
            continue;
        }
        ck_remove_dir(dir);
    }
    free(steps);
}

/* A crashed save leaves ckpt-*.tmp directories; no reader looks at them, so remove them. */
static void ck_remove_stale_tmp(const char *run_dir) {
    DIR *d = opendir(run_dir);
    if (!d) return;
    struct dirent *e;
    char names[64][64];
    int n = 0;
    while ((e = readdir(d)) && n < 64) {
        size_t l = strlen(e->d_name);
        if (!strncmp(e->d_name, "ckpt-", 5) && l > 4 && l < 64 && !strcmp(e->d_name + l - 4, ".tmp"))
            memcpy(names[n++], e->d_name, l + 1);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        char p[CKPT_PATH_MAX];
        ck_join(p, sizeof p, run_dir, names[i]);
        ck_remove_dir(p);
    }
}

static int ck_check_views(const char *what, const tensor_view_t *v, int n, char *err, size_t errlen) {
    if (n < 0 || (n && !v)) return err_fail(err, errlen, CKPT_EARG, "%s: bad view array", what);
    return 0;
}

/* Writes the five files into tmp (all fsynced, MANIFEST last). */
static int ck_write_all(const char *tmp, int64_t step, const model_config_t *cfg,
                        const tensor_view_t *params, int np, const tensor_view_t *opt_m,
                        const tensor_view_t *opt_v, int nopt, const json_t *state, char *err,
                        size_t errlen) {
    char p[CKPT_PATH_MAX], stepstr[32];
    snprintf(stepstr, sizeof stepstr, "%lld", (long long)step);
    json_t *cj = ckpt_config_to_json(cfg);
    if (!cj) return err_fail(err, errlen, CKPT_ENOMEM, "config.json: out of memory");
    ck_join(p, sizeof p, tmp, "config.json");
    /* 15 significant digits print the shortest float decimals (cfg_real) without noise. */
    int rc = ck_write_json(p, cj, JSON_INDENT(2) | JSON_REAL_PRECISION(15), err, errlen);
    json_decref(cj);
    if (rc) return rc;
    /* transformers refuses safetensors files whose metadata lacks format=pt. */
    const char *meta[] = {"format", "pt", "ft_step", stepstr};
    ck_join(p, sizeof p, tmp, "model.safetensors");
    if ((rc = st_write(p, params, np, meta, 2, err, errlen))) return ck_st_code(rc);
    if (nopt > 0) {
        st_group_t g[2] = {{"exp_avg.", opt_m, nopt}, {"exp_avg_sq.", opt_v, nopt}};
        ck_join(p, sizeof p, tmp, "optimizer.safetensors");
        if ((rc = st_write_groups(p, g, 2, meta, 2, err, errlen))) return ck_st_code(rc);
    }
    json_t *empty = NULL;
    if (!state) state = empty = json_object();
    ck_join(p, sizeof p, tmp, "state.json");
    rc = ck_write_json(p, state, JSON_INDENT(2), err, errlen);
    json_decref(empty);
    if (rc) return rc;
    return ck_write_manifest(tmp, step, err, errlen);
}

int ckpt_save(const char *run_dir, int64_t step, const model_config_t *cfg,
              const tensor_view_t *params, int np, const tensor_view_t *opt_m,
              const tensor_view_t *opt_v, int nopt, const json_t *state, int keep_last,
              char *out_path, size_t cap, char *err, size_t errlen) {
    if (!run_dir || !cfg || step < 0) return err_fail(err, errlen, CKPT_EARG, "ckpt_save: bad arguments");
    int rc;
    if ((rc = ck_check_views("params", params, np, err, errlen)) ||
        (nopt > 0 && ((rc = ck_check_views("exp_avg", opt_m, nopt, err, errlen)) ||
                      (rc = ck_check_views("exp_avg_sq", opt_v, nopt, err, errlen)))))
        return rc;
    if (state && !json_is_object(state)) return err_fail(err, errlen, CKPT_EARG, "ckpt_save: state is not a JSON object");
    char why[512];
    if (ckpt_config_validate(cfg, why, sizeof why))
        return err_fail(err, errlen, CKPT_ECONFIG, "ckpt_save: invalid config: %s", why);
    char final[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX + 8];
    if (ckpt_dir_name(final, sizeof final, run_dir, step))
        return err_fail(err, errlen, CKPT_EARG, "%s: path too long", run_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    if ((rc = ck_mkdir_parents(run_dir, err, errlen))) return rc;
    ck_remove_stale_tmp(run_dir);
    if ((rc = ck_mkdir(tmp, err, errlen))) return rc;

    rc = ck_write_all(tmp, step, cfg, params, np, opt_m, opt_v, nopt, state, err, errlen);
    if (!rc && ck_fsync_path(tmp, 1) != 0)
        rc = err_fail(err, errlen, CKPT_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, final) != 0) {
        if (errno == ENOTEMPTY || errno == EEXIST) {
            /* Re-saving a step: swap atomically so a complete ckpt-<step> exists throughout;
             * the old one ends up under the .tmp name and is removed below. */
            if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) != 0)
                rc = err_fail(err, errlen, CKPT_EIO, "%s: cannot replace: %s", final, strerror(errno));
        } else {
            rc = err_fail(err, errlen, CKPT_EIO, "%s: rename to %s failed: %s", tmp, final, strerror(errno));
        }
    }
    ck_remove_dir(tmp); /* after success: the old copy of a re-saved step; after failure: the debris */
    if (rc) return rc;
    if (ck_fsync_path(run_dir, 1) != 0)
        return err_fail(err, errlen, CKPT_EIO, "%s: fsync failed: %s", run_dir, strerror(errno));
    ck_prune(run_dir, step, keep_last);
    if (out_path && cap) snprintf(out_path, cap, "%s", final);
    return 0;
}

/* ---------------------------------------------------------------- loading */

/* The blocks of a family's encoder side (docs/FORMATS.md §4, §4b, §6), counted from the tensor
 * names: the masked mixers' autoencoders and memory models hold exactly ft_encoder_layers blocks
 * "encoder.layers.<l>.", l = 0..n-1; a Free Transformer holds its one encoder block
 * "free.encoder."; a Latent-thought LM has a cross-attention (names "model.layers.<l>.cross_attn*")
 * in every one of its num_hidden_layers blocks. Counted over the header's names (distinct indices),
 * so a huge count in config.json makes nothing big; the first mismatch is one line. */
static int ck_cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* How many distinct l some name "<pre><l>.<sub>..." has (sub "": any name under the block), and
 * the first l >= 0 that none has (the count when they are 0..count-1); -1 when out of memory. */
static long long ck_count_blocks(json_t *h, const char *pre, const char *sub, long long *missing) {
    long long *idx = malloc(sizeof *idx * (json_object_size(h) + 1)), n = 0, distinct = 0;
    if (!idx) return -1;
    const size_t np = strlen(pre), ns = strlen(sub);
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v) {
        if (strncmp(k, pre, np) || k[np] < '0' || k[np] > '9') continue;
        char *end;
        long long l = strtoll(k + np, &end, 10);
        if (*end == '.' && !strncmp(end + 1, sub, ns)) idx[n++] = l;
    }
    qsort(idx, (size_t)n, sizeof *idx, ck_cmp_ll);
    *missing = -1;
    for (long long i = 0; i < n; i++) {
        if (i && idx[i] == idx[i - 1]) continue;
        if (idx[i] != distinct && *missing < 0) *missing = distinct;
        distinct++;
    }
    if (*missing < 0) *missing = distinct;
    free(idx);
    return distinct;
}

static int ck_check_blocks(json_t *h, const char *dir, const model_config_t *cfg, char *err, size_t errlen) {
    long long miss = 0, n = 0;
    if (mixer_kind_has_encoder(cfg->kind)) {
        if ((n = ck_count_blocks(h, "encoder.layers.", "", &miss)) < 0)
            return err_fail(err, errlen, CKPT_ENOMEM, "%s/model.safetensors: out of memory", dir);
        if (n != cfg->encoder_layers || miss != n) {
            char gap[80] = "";
            if (miss != n) snprintf(gap, sizeof gap, " (encoder.layers.%lld. missing)", miss);
            return err_fail(err, errlen, CKPT_EMISMATCH, "%s/config.json: ft_encoder_layers is %d but model.safetensors holds "
                            "%lld encoder block(s)%s", dir, cfg->encoder_layers, n, gap);
        }
    }
    if (cfg->kind == MODEL_FREE) {
        int has = 0;
        const char *k;
        json_t *v;
        json_object_foreach(h, k, v) has |= !strncmp(k, "free.encoder.", 13);
        if (!has)
            return err_fail(err, errlen, CKPT_EMISMATCH, "%s/config.json: ft_model_kind free (one encoder block) but "
                            "model.safetensors holds 0 encoder blocks (no free.encoder.* tensor)", dir);
    }
    if (cfg->kind == MODEL_LTM) { /* the decoder's blocks are 0..num_hidden_layers-1 (checked before) */
        if ((n = ck_count_blocks(h, "model.layers.", "cross_attn", &miss)) < 0)
            return err_fail(err, errlen, CKPT_ENOMEM, "%s/model.safetensors: out of memory", dir);
        if (n != cfg->n_layers)
            return err_fail(err, errlen, CKPT_EMISMATCH, "%s/config.json: ft_model_kind ltm, num_hidden_layers %d but "
                            "model.safetensors holds a cross-attention in %lld of them (none in model.layers.%lld.)",
                            dir, cfg->n_layers, n, miss);
    }
    return 0;
}

/* One tensor that config.json implies: its shape, and whether it may be absent (CK_MAY: checked
 * where present, the kinds differ), must be present (CK_NEED) or must be absent (CK_NONE: a
 * tensor the config says this model does not have, which the loader would silently ignore). */
enum { CK_MAY, CK_NEED, CK_NONE };
typedef struct {
    char name[TENSOR_NAME_LEN];
    int nd, rule;
    long long want[4];
    const char *field; /* the config.json field(s) the shape or the presence comes from, as printed */
    const char *none;  /* CK_NONE: which config has it */
} ck_want_t;
typedef struct { ck_want_t t[96]; int n; } ck_wants_t;

static void ck_want(ck_wants_t *w, int rule, const char *pre, const char *suf, const char *field, const char *none,
                    int nd, long long a, long long b, long long c, long long d) {
    if (w->n >= (int)(sizeof w->t / sizeof w->t[0])) return; /* sized for every kind below */
    ck_want_t *t = &w->t[w->n++];
    snprintf(t->name, sizeof t->name, "%s%s", pre, suf);
    t->nd = nd, t->rule = rule, t->field = field, t->none = none;
    t->want[0] = a, t->want[1] = b, t->want[2] = c, t->want[3] = d;
}

static void ck_shape_str(char *s, size_t cap, json_t *sh, const long long *want, int nd) {
    snprintf(s, cap, "[");
    size_t n = sh ? json_array_size(sh) : (size_t)nd;
    for (size_t d = 0; d < n && d < 4; d++)
        snprintf(s + strlen(s), cap - strlen(s), "%s%lld", d ? "," : "", sh ? json_integer_value(json_array_get(sh, d)) : want[d]);
    snprintf(s + strlen(s), cap - strlen(s), "]");
}

/* The sizes config.json gives that model.safetensors' header shows (docs/FORMATS.md §3, §4, §4b,
 * §6). The head: lm_head.weight (vocab_size, hidden_size) exactly when tie_word_embeddings is
 * false. In block 0 of every stack (model.layers.0., decoder.layers.0., encoder.layers.0., the Free
 * Transformer's free.encoder.), where present: intermediate_size (the SwiGLU's F), the
 * attention's widths (heads * hd and kv_heads * hd, hd = hidden_size / num_attention_heads), the
 * masked mixers' mixing weight (ft_mixer_heads, ft_mixer_kernel, max_position_embeddings as its
 * side) and bias. Then what each family adds, present exactly when its config says: the mixers'
 * input/output projections (D, D) when ft_mixer_heads > 1; the Free Transformer's read-out
 * (H, D) and post-sampler (D, 2^H), H = ft_latent_bits; the autoencoders' and memory models'
 * down/up projections (d_e, D) / (D, d_e) when ft_embed_dim d_e < hidden_size, the memory
 * projection (D, d_e), the unroll (D, D/2) when ft_unroll, memory.start (D) when
 * ft_memory_start. The first mismatch is one line naming the config field(s), the tensor, its
 * shape and the expected one. */
static int ck_check_sizes(json_t *h, const char *dir, const model_config_t *cfg, char *err, size_t errlen) {
    static const char *const blk[] = {"model.layers.0.", "decoder.layers.0.", "encoder.layers.0.", "free.encoder."};
    static const char *const att[] = {"self_attn.", "cross_attn."};
    const long long D = cfg->d_model, F = cfg->d_ff, T = cfg->max_seq, hd = cfg->n_heads ? D / cfg->n_heads : 0;
    const long long Q = cfg->n_heads * hd, KV = cfg->n_kv_heads * hd, hm = cfg->mixer_heads;
    char field[160], heads[160], mix[200], proj[80], bits[120], emb[120], unroll[80], start[80], tie[120];
    snprintf(field, sizeof field, "intermediate_size %d, hidden_size %d", cfg->d_ff, cfg->d_model);
    snprintf(heads, sizeof heads, "num_attention_heads %d, num_key_value_heads %d, hidden_size %d (head dim %lld)",
             cfg->n_heads, cfg->n_kv_heads, cfg->d_model, hd);
    snprintf(mix, sizeof mix, "ft_mixer_heads %d, ft_mixer_kernel %d, max_position_embeddings %d", cfg->mixer_heads,
             cfg->mixer_kernel, cfg->max_seq);
    ck_wants_t w = {.n = 0};
    /* the head: lm_head.weight (V, D) exactly when untied, in every kind (tied: the embedding is
     * the head, and an lm_head.weight the loader skipped would be the trained head lost) */
    snprintf(tie, sizeof tie, "tie_word_embeddings %s, vocab_size %d, hidden_size %d", cfg->tied ? "true" : "false",
             cfg->vocab_size, cfg->d_model);
    ck_want(&w, cfg->tied ? CK_NONE : CK_NEED, "", "lm_head.weight", tie, "only tie_word_embeddings false has", 2,
            cfg->vocab_size, D, 0, 0);
    for (int b = 0; b < 4; b++) {
        ck_want(&w, CK_MAY, blk[b], "mlp.gate_proj.weight", field, NULL, 2, F, D, 0, 0);
        ck_want(&w, CK_MAY, blk[b], "mlp.up_proj.weight", field, NULL, 2, F, D, 0, 0);
        ck_want(&w, CK_MAY, blk[b], "mlp.down_proj.weight", field, NULL, 2, D, F, 0, 0);
        for (int a = 0; a < 2; a++) {
            static const char *const pr[] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight"};
            char pre[64];
            snprintf(pre, sizeof pre, "%s%s", blk[b], att[a]);
            for (int j = 0; j < 4; j++)
                ck_want(&w, CK_MAY, pre, pr[j], heads, NULL, 2, j == 0 ? Q : j < 3 ? KV : D, j == 3 ? Q : D, 0, 0);
        }
    }
    for (int b = 0; b < 3; b++) { /* the mixers' stacks */
        ck_want(&w, CK_MAY, blk[b], "mixer.weight", mix, NULL, 4, hm, cfg->mixer_kernel, T, T);
        ck_want(&w, CK_MAY, blk[b], "mixer.bias", mix, NULL, 1, hm * T, 0, 0, 0);
    }
    if (mixer_kind_uses_mixer(cfg->kind)) { /* block 0 of the decoder (and encoder) is a mixer block */
        snprintf(proj, sizeof proj, "ft_mixer_heads %d, hidden_size %d", cfg->mixer_heads, cfg->d_model);
        const char *dec = mixer_kind_is_autoencoder(cfg->kind) ? blk[1] : blk[0];
        for (int e = 0; e < 1 + mixer_kind_has_encoder(cfg->kind); e++) {
            ck_want(&w, hm > 1 ? CK_NEED : CK_NONE, e ? blk[2] : dec, "mixer.in_proj.weight", proj,
                    "only ft_mixer_heads > 1 has", 2, D, D, 0, 0);
            ck_want(&w, hm > 1 ? CK_NEED : CK_NONE, e ? blk[2] : dec, "mixer.out_proj.weight", proj,
                    "only ft_mixer_heads > 1 has", 2, D, D, 0, 0);
        }
    }
    if (cfg->kind == MODEL_FREE) {
        const long long H = cfg->latent_bits;
        snprintf(bits, sizeof bits, "ft_latent_bits %d, hidden_size %d", cfg->latent_bits, cfg->d_model);
        ck_want(&w, CK_NEED, "free.", "readout.weight", bits, NULL, 2, H, D, 0, 0);
        ck_want(&w, CK_NEED, "free.", "post_sampler.weight", bits, NULL, 2, D, 1LL << H, 0, 0);
    }
    if (mixer_kind_has_encoder(cfg->kind)) {
        const long long de = mixer_embed_dim(cfg);
        const int ae = mixer_kind_is_autoencoder(cfg->kind), less = de < D;
        snprintf(emb, sizeof emb, "ft_embed_dim %lld, hidden_size %d", de, cfg->d_model);
        ck_want(&w, less ? CK_NEED : CK_NONE, "encoder.", "down.weight", emb, "only ft_embed_dim < hidden_size has", 2, de, D, 0, 0);
        if (ae) {
            ck_want(&w, less ? CK_NEED : CK_NONE, "decoder.", "up.weight", emb, "only ft_embed_dim < hidden_size has", 2, D, de, 0, 0);
            snprintf(unroll, sizeof unroll, "ft_unroll %s, hidden_size %d", cfg->unroll ? "true" : "false", cfg->d_model);
            ck_want(&w, cfg->unroll ? CK_NEED : CK_NONE, "decoder.", "unroll.weight", unroll, "only ft_unroll true has", 2, D,
                    D / 2, 0, 0);
        } else {
            ck_want(&w, CK_NEED, "memory.", "proj.weight", emb, NULL, 2, D, de, 0, 0);
            snprintf(start, sizeof start, "ft_memory_start %s, hidden_size %d", cfg->memory_start ? "true" : "false", cfg->d_model);
            ck_want(&w, cfg->memory_start ? CK_NEED : CK_NONE, "memory.", "start", start, "only ft_memory_start true has", 1, D,
                    0, 0, 0);
        }
    }
    for (int i = 0; i < w.n; i++) {
        const ck_want_t *t = &w.t[i];
        json_t *sh = json_object_get(json_object_get(h, t->name), "shape");
        char gs[128], ws[128];
        ck_shape_str(ws, sizeof ws, NULL, t->want, t->nd);
        if (!json_is_array(sh)) {
            if (t->rule != CK_NEED) continue;
            return err_fail(err, errlen, CKPT_EMISMATCH, "%s/config.json: %s but model.safetensors holds no %s %s", dir, t->field,
                            t->name, ws);
        }
        ck_shape_str(gs, sizeof gs, sh, NULL, 0);
        if (t->rule == CK_NONE)
            return err_fail(err, errlen, CKPT_EMISMATCH, "%s/config.json: %s but model.safetensors holds %s %s, which %s", dir,
                            t->field, t->name, gs, t->none);
        int bad = (int)json_array_size(sh) != t->nd;
        for (int d = 0; d < t->nd && !bad; d++) bad = json_integer_value(json_array_get(sh, (size_t)d)) != t->want[d];
        if (bad)
            return err_fail(err, errlen, CKPT_EMISMATCH, "%s/config.json: %s but model.safetensors' %s is %s, not %s", dir,
                            t->field, t->name, gs, ws);
    }
    return 0;
}

/* The decoder's blocks are "model.layers.<l>." (or "decoder.layers.<l>." in an autoencoder) for
 * l = 0 .. num_hidden_layers - 1 in every model kind, counted as distinct indices with the first
 * missing one named (the highest index once stood for the count: one name
 * "model.layers.16777215.*" passed for 2^24 blocks), and the token embedding is (vocab_size,
 * hidden_size) (docs/FORMATS.md §3). Both checked from the safetensors
 * header alone, before any program allocates the model, and then the sizes block 0's tensors
 * show (ck_check_sizes): a config.json whose layer count the
 * tensors do not have (edited under a recomputed MANIFEST) is then refused as damage in
 * microseconds, instead of after allocating num_hidden_layers blocks (gigabytes, or out of
 * memory) only to find the tensors missing. A header that cannot be read is left to
 * ckpt_load_params, whose message says what is wrong with it. */
static int ck_check_layers(const char *dir, const model_config_t *cfg, char *err, size_t errlen) {
    char p[CKPT_PATH_MAX];
    ck_join(p, sizeof p, dir, "model.safetensors");
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    struct stat sb;
    uint8_t b8[8];
    uint64_t hlen = 0;
    json_t *h = NULL;
    if (fstat(fd, &sb) == 0 && pread(fd, b8, 8, 0) == 8) {
        for (int i = 0; i < 8; i++) hlen |= (uint64_t)b8[i] << (8 * i);
        char *buf = hlen >= 2 && hlen <= ST_HEADER_MAX && hlen <= (uint64_t)sb.st_size - 8 ? malloc(hlen) : NULL;
        if (buf && pread(fd, buf, hlen, 8) == (ssize_t)hlen) h = json_loadb(buf, hlen, 0, NULL);
        free(buf);
    }
    close(fd);
    if (!json_is_object(h)) { json_decref(h); return 0; }
    /* the decoder's stack: an autoencoder's "decoder.layers.", every other kind's "model.layers." */
    const char *dec = mixer_kind_is_autoencoder(cfg->kind) ? "decoder.layers." : "model.layers.";
    long long miss = 0, nb = ck_count_blocks(h, dec, "", &miss);
    if (nb < 0) {
        json_decref(h);
        return err_fail(err, errlen, CKPT_ENOMEM, "%s/model.safetensors: out of memory", dir);
    }
    /* the token embedding, (vocab_size, hidden_size) in every kind, under one of two names */
    json_t *e = json_object_get(h, "model.embed_tokens.weight");
    if (!e) e = json_object_get(h, "encoder.embed_tokens.weight");
    json_t *sh = json_object_get(e, "shape");
    long long ev = json_integer_value(json_array_get(sh, 0)), ed = json_integer_value(json_array_get(sh, 1));
    int bad_emb = json_array_size(sh) == 2 && (ev != cfg->vocab_size || ed != cfg->d_model);
    int rc = 0;
    if (nb != cfg->n_layers || miss != nb) {
        char gap[80] = "";
        if (miss != nb) snprintf(gap, sizeof gap, " (%s%lld. missing)", dec, miss);
        rc = err_fail(err, errlen, CKPT_EMISMATCH, "%s/config.json: num_hidden_layers is %d but model.safetensors holds "
                      "%lld decoder block(s)%s", dir, cfg->n_layers, nb, gap);
    } else if (bad_emb)
        rc = err_fail(err, errlen, CKPT_EMISMATCH, "%s/config.json: vocab_size %d, hidden_size %d but model.safetensors' "
                      "token embedding is [%lld,%lld]", dir, cfg->vocab_size, cfg->d_model, ev, ed);
    else if (!(rc = ck_check_blocks(h, dir, cfg, err, errlen)))
        rc = ck_check_sizes(h, dir, cfg, err, errlen);
    json_decref(h);
    return rc;
}

int ckpt_load_config(const char *dir, model_config_t *cfg, char *err, size_t errlen) {
    if (!dir || !cfg || strlen(dir) > CKPT_DIR_MAX) return err_fail(err, errlen, CKPT_EARG, "ckpt_load_config: bad arguments");
    char p[CKPT_PATH_MAX], why[400];
    ck_join(p, sizeof p, dir, "config.json");
    json_error_t je;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        if (access(p, F_OK) != 0) return err_fail(err, errlen, CKPT_EIO, "%s: cannot open: %s", p, strerror(errno));
        return err_fail(err, errlen, CKPT_EFORMAT, "%s: line %d: %s", p, je.line, je.text);
    }
    int rc = ckpt_config_from_json(j, cfg, why, sizeof why);
    json_decref(j);
    return rc ? err_fail(err, errlen, rc, "%s: %s", p, why) : ck_check_layers(dir, cfg, err, errlen);
}

/* Every tensor of f is <pre[k]><name of a view> for some k: a tensor the model does not have
 * (another family's stack, encoder.* in a baseline, a name nobody writes) is refused by name,
 * since loading around it would evaluate, sample or resume another network than the one
 * trained. CKPT_EMISMATCH. (Tensors are found in file order; the views are looked at from where
 * the last match was, so a file written from these views costs one comparison a tensor.) */
static int ck_no_strays(const st_file_t *f, const char *const *pre, int npre, const tensor_view_t *v, int n,
                        char *err, size_t errlen) {
    int at = 0;
    for (int i = 0; i < st_count(f); i++) {
        const char *name = st_name(f, i);
        int found = 0;
        for (int k = 0; k < npre && !found; k++) {
            const size_t lp = strlen(pre[k]);
            if (strncmp(name, pre[k], lp)) continue;
            for (int j = 0; j < n && !found; j++)
                if (!strcmp(name + lp, v[(at + j) % n].name)) found = 1, at = (at + j + 1) % n;
        }
        if (!found)
            return err_fail(err, errlen, CKPT_EMISMATCH, "%s: tensor %s is not one of the %d of this model (config.json "
                            "has no such tensor: another model's or a stack this one does not have; refused, not ignored)",
                            st_path(f), name, n);
    }
    return 0;
}

/* all: every tensor of the file must be a view's (ckpt_load_params), else the views' only. */
static int ck_load_params(const char *dir, const tensor_view_t *views, int n, int all, char *err, size_t errlen) {
    if (!dir || strlen(dir) > CKPT_DIR_MAX || ck_check_views("params", views, n, err, errlen)) return err_fail(err, errlen, CKPT_EARG, "ckpt_load_params: bad arguments");
    char p[CKPT_PATH_MAX];
    ck_join(p, sizeof p, dir, "model.safetensors");
    st_file_t *f = NULL;
    int rc = st_open(&f, p, err, errlen);
    if (rc) return ck_st_code(rc);
    /* a tensor missing or misshapen is said first (the commoner damage), then a stray one */
    static const char *const none[] = {""};
    rc = st_read_into(f, views, n, 1, err, errlen);
    rc = rc < 0 ? ck_st_code(rc) : all ? ck_no_strays(f, none, 1, views, n, err, errlen) : 0;
    st_close(&f);
    return rc;
}

int ckpt_load_params(const char *dir, const tensor_view_t *views, int n, char *err, size_t errlen) {
    return ck_load_params(dir, views, n, 1, err, errlen);
}

int ckpt_load_params_some(const char *dir, const tensor_view_t *views, int n, char *err, size_t errlen) {
    return ck_load_params(dir, views, n, 0, err, errlen);
}

int ckpt_load_optimizer(const char *dir, const tensor_view_t *m, const tensor_view_t *v, int n,
                        char *err, size_t errlen) {
    if (!dir || strlen(dir) > CKPT_DIR_MAX || ck_check_views("exp_avg", m, n, err, errlen) || ck_check_views("exp_avg_sq", v, n, err, errlen))
        return err_fail(err, errlen, CKPT_EARG, "ckpt_load_optimizer: bad arguments");
    char p[CKPT_PATH_MAX];
    ck_join(p, sizeof p, dir, "optimizer.safetensors");
    if (access(p, F_OK) != 0)
        return err_fail(err, errlen, CKPT_EIO, "%s: no optimizer state in this checkpoint", p);
    st_file_t *f = NULL;
    int rc = st_open(&f, p, err, errlen);
    if (rc) return ck_st_code(rc);
    /* the moments of a tensor the model does not have are as stray as the tensor (the two
     * groups carry the parameters' names) */
    static const char *const pre[] = {"exp_avg.", "exp_avg_sq."};
    rc = st_read_into_prefixed(f, "exp_avg.", m, n, 1, err, errlen);
    if (rc >= 0) rc = st_read_into_prefixed(f, "exp_avg_sq.", v, n, 1, err, errlen);
    rc = rc < 0 ? ck_st_code(rc) : ck_no_strays(f, pre, 2, m, n, err, errlen);
    st_close(&f);
    return rc;
}

int ckpt_load_state(const char *dir, json_t **state, char *err, size_t errlen) {
    if (!dir || !state || strlen(dir) > CKPT_DIR_MAX) return err_fail(err, errlen, CKPT_EARG, "ckpt_load_state: bad arguments");
    *state = NULL;
    char p[CKPT_PATH_MAX];
    ck_join(p, sizeof p, dir, "state.json");
    json_error_t je;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        if (access(p, F_OK) != 0) return err_fail(err, errlen, CKPT_EIO, "%s: cannot open: %s", p, strerror(errno));
        return err_fail(err, errlen, CKPT_EFORMAT, "%s: line %d: %s", p, je.line, je.text);
    }
    if (!json_is_object(j)) {
        json_decref(j);
        return err_fail(err, errlen, CKPT_EFORMAT, "%s: not a JSON object", p);
    }
    *state = j;
    return 0;
}
