/* evaluator/sandbox.c: the caller's side of the sandbox (see sandbox.h): starting programs in
 * job slots, capturing their output, enforcing the wall-clock and output limits, reaping,
 * and saying how each ended. The new process's own setup is sandbox_child.c. */
#include "evaluator/sandbox_impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SANDBOX_MAX_JOBS 256
/* NS: user ids of the programs, one per job slot of each evaluator process: far above any
 * account's (they own no file and no process), distinct between processes by the pid */
#define SANDBOX_UID_BASE 0x40000000u
/* NS run by another user: the program's id inside its user namespace (mapped to the caller's);
 * not 0, so the program's execve leaves it without capabilities there */
#define SANDBOX_USERNS_ID 1000u

static const char *const end_names[SANDBOX_NEND] = {"passed", "failed", "wall", "cpu", "memory", "disk",
                                                    "procs", "files", "output", "signal", "error"};

const char *sandbox_end_name(sandbox_end e) { return e >= 0 && e < SANDBOX_NEND ? end_names[e] : "?"; }

struct sandbox {
    sandbox_cfg_t cfg;
    char *interp_buf;      /* the interpreter command's words, NUL-separated */
    char **argv;           /* words + "main.py" + NULL */
    char *envp[8];
    char env_buf[4][600];
    char tmpdir[512];      /* NONE: parent directory of the working directories */
    char describe[600];
    int userns;            /* NS without root: user namespaces too */
};

typedef struct {
    char *v;
    size_t n, cap;
} buf_t;

typedef struct {
    int used, idx;
    pid_t pid;
    int out_fd, err_fd, info_fd;
    double t0;
    sandbox_end killed;    /* WALL or OUTPUT when we killed it, else PASSED (none) */
    int reaped, wstatus;
    struct rusage ru;
    buf_t out, err, info;
    char workdir[600];     /* NONE: its directory, removed after */
    char tmpfs_opts[160];
} slot_t;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Resolves a command word without '/' in PATH, as execvp would; 0 or -1. */
static int resolve_path(const char *word, char *out, size_t cap) {
    if (strchr(word, '/')) {
        if (strlen(word) >= cap) return -1;
        memcpy(out, word, strlen(word) + 1);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    while (*path) {
        const char *e = strchr(path, ':');
        size_t n = e ? (size_t)(e - path) : strlen(path);
        struct stat st;
        int w = n ? snprintf(out, cap, "%.*s/%s", (int)n, path, word) : snprintf(out, cap, "./%s", word);
        if (w > 0 && (size_t)w < cap && !stat(out, &st) && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return 0;
        path += n + (e != NULL);
    }
    return -1;
}

static int set_defaults(sandbox_cfg_t *c, char *err, size_t errlen) {
    if (!c->interpreter || !*c->interpreter) c->interpreter = SANDBOX_DEFAULT_INTERPRETER;
    if (c->wall_s == 0) c->wall_s = 10;
    if (c->cpu_s == 0) c->cpu_s = 5;
    if (!c->mem_bytes) c->mem_bytes = (size_t)1 << 30;
    if (!c->disk_bytes) c->disk_bytes = (size_t)16 << 20;
    if (!c->nproc) c->nproc = 16;
    if (!c->nofile) c->nofile = 64;
    if (!c->out_bytes) c->out_bytes = (size_t)64 << 10;
    if (!c->jobs) c->jobs = 1;
    if (!(c->wall_s > 0 && c->wall_s <= 86400) || !(c->cpu_s > 0 && c->cpu_s <= 86400))
        return snprintf(err, errlen, "time limits must be in (0, 86400] seconds"), SANDBOX_EARG;
    if (c->mem_bytes < ((size_t)16 << 20) || c->disk_bytes < 4096 || c->nproc < 1 || c->nofile < 8 || c->out_bytes < 64)
        return snprintf(err, errlen, "limits too small: memory >= 16 MiB, disk >= 4 KiB, processes >= 1, "
                        "open files >= 8, output >= 64 bytes"), SANDBOX_EARG;
    if (c->jobs < 1 || c->jobs > SANDBOX_MAX_JOBS)
        return snprintf(err, errlen, "jobs %d outside 1..%d", c->jobs, SANDBOX_MAX_JOBS), SANDBOX_EARG;
    if (c->isolation != SANDBOX_ISOLATE_NS && c->isolation != SANDBOX_ISOLATE_NONE)
        return snprintf(err, errlen, "unknown isolation %d", (int)c->isolation), SANDBOX_EARG;
    return 0;
}

/* argv: the command's words (the first resolved in PATH) + "main.py"; envp: a fixed minimal
 * environment (nothing of the caller's leaks in: PYTHONPATH, credentials in variables...). */
static int build_command(sandbox_t *sb, char *err, size_t errlen) {
    const char *cmd = sb->cfg.interpreter;
    size_t len = strlen(cmd);
    int words = 0;
    for (size_t i = 0; i < len; i++)
        if (cmd[i] != ' ' && (i == 0 || cmd[i - 1] == ' ')) words++;
    if (!words) return snprintf(err, errlen, "the interpreter command is empty"), SANDBOX_EARG;
    sb->interp_buf = malloc(len + 4096 + 1);
    sb->argv = calloc((size_t)words + 2, sizeof *sb->argv);
    if (!sb->interp_buf || !sb->argv) return snprintf(err, errlen, "out of memory"), SANDBOX_ENOMEM;
    char *p = sb->interp_buf;
    int w = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && cmd[i] == ' ') i++;
        if (i == len) break;
        size_t j = i;
        while (j < len && cmd[j] != ' ') j++;
        char word[4096];
        if (j - i >= sizeof word) return snprintf(err, errlen, "interpreter command word too long"), SANDBOX_EARG;
        snprintf(word, sizeof word, "%.*s", (int)(j - i), cmd + i);
        if (w == 0) {
            char full[4000];
            if (resolve_path(word, full, sizeof full))
                return snprintf(err, errlen, "interpreter '%s' not found or not executable%s", word,
                                strchr(word, '/') ? "" : " in PATH"), SANDBOX_EINTERP;
            snprintf(word, sizeof word, "%s", full);
        }
        sb->argv[w++] = p;
        p += sprintf(p, "%s", word) + 1;
        i = j;
    }
    sb->argv[w] = "main.py";
    const char *home = sb->cfg.isolation == SANDBOX_ISOLATE_NS ? "/tmp" : "."; /* NONE: set per run below */
    snprintf(sb->env_buf[0], sizeof sb->env_buf[0], "PATH=/usr/local/bin:/usr/bin:/bin");
    snprintf(sb->env_buf[1], sizeof sb->env_buf[1], "HOME=%s", home);
    snprintf(sb->env_buf[2], sizeof sb->env_buf[2], "TMPDIR=%s", home);
    snprintf(sb->env_buf[3], sizeof sb->env_buf[3], "LANG=C.UTF-8");
    for (int i = 0; i < 4; i++) sb->envp[i] = sb->env_buf[i];
    sb->envp[4] = "PYTHONDONTWRITEBYTECODE=1";
    sb->envp[5] = NULL;
    return 0;
}

static void buf_free(buf_t *b) {
    free(b->v);
    memset(b, 0, sizeof *b);
}

/* Appends what fd holds now (non-blocking) to b, keeping at most cap bytes; 1 at EOF (or a
 * read error), 2 when more than cap bytes came, 0 otherwise. */
static int drain(int fd, buf_t *b, size_t cap) {
    char tmp[16384];
    for (;;) {
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno == EAGAIN ? 0 : 1;
        if (r == 0) return 1;
        size_t keep = b->n < cap ? cap - b->n : 0;
        if (keep > (size_t)r) keep = (size_t)r;
        if (keep) {
            if (b->n + keep + 1 > b->cap) {
                size_t nc = b->cap ? b->cap * 2 : 4096;
                while (nc < b->n + keep + 1) nc *= 2;
                char *q = realloc(b->v, nc);
                if (!q) return 1;
                b->v = q;
                b->cap = nc;
            }
            memcpy(b->v + b->n, tmp, keep);
            b->n += keep;
            b->v[b->n] = 0;
        }
        if ((size_t)r > keep) return 2;
    }
}

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static int unlock_one(const char *p, const struct stat *st, int type, struct FTW *f) {
    if (type == FTW_D || type == FTW_DNR) chmod(p, 0700);
    return 0;
}
static int remove_one(const char *p, const struct stat *st, int type, struct FTW *f) {
    remove(p);
    return 0;
}

/* rm -rf of a NONE working directory: the program's files (it may have made them read-only
 * or nested them); symbolic links are removed, never followed. */
static void remove_tree(const char *path) {
    nftw(path, unlock_one, 16, FTW_PHYS);
    nftw(path, remove_one, 16, FTW_PHYS | FTW_DEPTH);
}

/* Writes text to /proc/<pid>/<file>; 0 or -1 (errno set). */
static int write_proc(pid_t pid, const char *file, const char *text) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* Starts program idx in slot s (slot number k); 0, or -1 when it could not be started (the
 * slot then holds a finished SANDBOX_ERROR with the reason in info). */
static int start(sandbox_t *sb, slot_t *s, int k, const char *program, int idx) {
    memset(s, 0, sizeof *s);
    s->used = 1;
    s->idx = idx;
    s->out_fd = s->err_fd = s->info_fd = -1;
    s->t0 = now_s();
    int po[2] = {-1, -1}, pe[2] = {-1, -1}, pi[2] = {-1, -1}, ps[2] = {-1, -1};
    const int ns = sb->cfg.isolation == SANDBOX_ISOLATE_NS, userns = ns && sb->userns;
    const uid_t uid = userns ? SANDBOX_USERNS_ID : SANDBOX_UID_BASE + (((uid_t)getpid() & 0x3fffffu) << 8) + (uid_t)k;
    char why[300] = "";
    if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || pipe2(pi, O_CLOEXEC) || (userns && pipe2(ps, O_CLOEXEC))) {
        snprintf(why, sizeof why, "pipe: %s", strerror(errno));
        goto fail;
    }
    if (ns) {
        snprintf(s->workdir, sizeof s->workdir, "/tmp");
        snprintf(s->tmpfs_opts, sizeof s->tmpfs_opts, "size=%zu,nr_inodes=1024,mode=0700,uid=%u,gid=%u",
                 sb->cfg.disk_bytes, (unsigned)uid, (unsigned)uid);
    } else {
        snprintf(s->workdir, sizeof s->workdir, "%s/run.XXXXXX", sb->tmpdir);
        if (!mkdtemp(s->workdir)) {
            snprintf(why, sizeof why, "mkdtemp %s: %s", s->workdir, strerror(errno));
            s->workdir[0] = 0;
            goto fail;
        }
        if (geteuid() == 0 && chown(s->workdir, uid, uid)) {
            snprintf(why, sizeof why, "chown %s: %s", s->workdir, strerror(errno));
            goto fail;
        }
    }
    sandbox_child_t c = {
        .isolation = sb->cfg.isolation, .workdir = s->workdir, .tmpfs_opts = s->tmpfs_opts, .uid = uid,
        .set_uid = ns ? !userns : geteuid() == 0, .userns = userns, .sync_fd = ps[0],
        .program = program, .program_len = strlen(program), .out_fd = po[1], .err_fd = pe[1],
        .info_fd = pi[1], .cfg = &sb->cfg, .argv = sb->argv, .envp = sb->envp,
    };
    /* a raw clone, like fork without the atfork handlers (OpenBLAS's would stop its threads
     * on every program); NS: the child is the first process of its own namespaces */
    const long flags = SIGCHLD | (ns ? CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS : 0) |
                       (userns ? CLONE_NEWUSER : 0);
    pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, NULL);
    if (pid == 0) sandbox_child(&c);
    if (pid < 0) {
        snprintf(why, sizeof why, "clone%s: %s", ns ? userns ? " with new user and other namespaces" : " with new namespaces" : "",
                 strerror(errno));
        goto fail;
    }
    s->pid = pid;
    if (userns) {
        /* the program's id inside is SANDBOX_USERNS_ID, the caller's outside; no groups */
        char map[64];
        const char *step = "setgroups";
        int bad = write_proc(pid, "setgroups", "deny");
        snprintf(map, sizeof map, "%u %u 1\n", SANDBOX_USERNS_ID, (unsigned)geteuid());
        if (!bad && (step = "uid_map", bad = write_proc(pid, "uid_map", map)) == 0) {
            snprintf(map, sizeof map, "%u %u 1\n", SANDBOX_USERNS_ID, (unsigned)getegid());
            step = "gid_map";
            bad = write_proc(pid, "gid_map", map);
        }
        if (bad || write(ps[1], "x", 1) != 1) {
            snprintf(why, sizeof why, "writing the user namespace's %s: %s", step, strerror(errno));
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            goto fail;
        }
        close(ps[0]);
        close(ps[1]);
        ps[0] = ps[1] = -1;
    }
    close(po[1]);
    close(pe[1]);
    close(pi[1]);
    s->out_fd = po[0];
    s->err_fd = pe[0];
    s->info_fd = pi[0];
    fcntl(s->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(s->err_fd, F_SETFL, O_NONBLOCK);
    fcntl(s->info_fd, F_SETFL, O_NONBLOCK);
    return 0;
fail:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0) close(po[i]);
        if (pe[i] >= 0) close(pe[i]);
        if (pi[i] >= 0) close(pi[i]);
        if (ps[i] >= 0) close(ps[i]);
    }
    s->reaped = 1;
    s->pid = -1;
    char line[320];
    snprintf(line, sizeof line, "E%s", why);
    s->info.v = strdup(line);
    s->info.n = s->info.v ? strlen(line) : 0;
    return -1;
}

/* The last non-empty line of s (in place: a pointer into s, its end at *len). */
static const char *last_line(const char *s, size_t n, size_t *len) {
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) n--;
    size_t b = n;
    while (b && s[b - 1] != '\n') b--;
    *len = n - b;
    return s + b;
}

static int has(const char *line, size_t n, const char *what) {
    size_t w = strlen(what);
    for (size_t i = 0; i + w <= n; i++)
        if (!memcmp(line + i, what, w)) return 1;
    return 0;
}

/* The line that names the program's last exception: the last line of the stderr's tail (its
 * last 4 KiB) that starts with a name ending in "Error" or "Exception" (Python's "OSError:
 * [Errno 28] ...", "MemoryError"); else its last non-empty line. Not the last line alone: the
 * children of a fork bomb write their tracebacks into one pipe, and what the slot captured
 * when the program ended may stop in the middle of one ("  File ..., line 4"), after the
 * "BlockingIOError: [Errno 11]" lines that say why it failed. */
static const char *exception_line(const char *s, size_t n, size_t *len) {
    const size_t lo = n > 4096 ? n - 4096 : 0;
    for (size_t end = n;;) {
        size_t b = end, w = 0;
        while (b > lo && s[b - 1] != '\n') b--;
        while (b + w < end && (isalnum((unsigned char)s[b + w]) || s[b + w] == '_' || s[b + w] == '.')) w++;
        if ((w >= 5 && !memcmp(s + b + w - 5, "Error", 5)) || (w >= 9 && !memcmp(s + b + w - 9, "Exception", 9))) {
            *len = end - b;
            return s + b;
        }
        if (b <= lo) break;
        end = b - 1; /* the line before, its '\n' left out */
    }
    return last_line(s, n, len);
}

/* How a reaped slot ended (sandbox.h's rules); st is the program's wait status. */
static sandbox_end classify(const sandbox_t *sb, const slot_t *s, int st, double cpu) {
    if (s->killed != SANDBOX_PASSED) return s->killed;
    if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        if (sig == SIGXCPU || (sig == SIGKILL && cpu >= sb->cfg.cpu_s)) return SANDBOX_CPU;
        if (sig == SIGXFSZ) return SANDBOX_DISK;
        return SANDBOX_SIGNAL;
    }
    if (WEXITSTATUS(st) == 0) return SANDBOX_PASSED;
    size_t n;
    const char *l = exception_line(s->err.v ? s->err.v : "", s->err.n, &n);
    if (has(l, n, "MemoryError") || has(l, n, "[Errno 12]")) return SANDBOX_MEMORY;
    if (has(l, n, "[Errno 27]") || has(l, n, "[Errno 28]")) return SANDBOX_DISK;
    if (has(l, n, "[Errno 11]") || has(l, n, "can't start new thread")) return SANDBOX_PROCS;
    if (has(l, n, "[Errno 24]")) return SANDBOX_FILES;
    return SANDBOX_FAILED;
}

/* Fills res from a finished slot and frees the slot. */
static void finish(sandbox_t *sb, slot_t *s, sandbox_result_t *res) {
    if (s->out_fd >= 0) drain(s->out_fd, &s->out, sb->cfg.out_bytes);
    if (s->err_fd >= 0) drain(s->err_fd, &s->err, sb->cfg.out_bytes);
    if (s->info_fd >= 0) drain(s->info_fd, &s->info, 200);
    close_fd(&s->out_fd);
    close_fd(&s->err_fd);
    close_fd(&s->info_fd);
    memset(res, 0, sizeof *res);
    double cpu = s->ru.ru_utime.tv_sec + s->ru.ru_utime.tv_usec * 1e-6 + s->ru.ru_stime.tv_sec + s->ru.ru_stime.tv_usec * 1e-6;
    /* the channel holds "E<step>: errno N" (setup failed) or, NS, "S<status>" from the init */
    const char *info = s->info.v ? s->info.v : "";
    int st = s->wstatus;
    char why[400] = "";
    if (info[0] == 'E' || s->pid < 0) {
        const char *e = strstr(info, ": errno ");
        if (e) snprintf(why, sizeof why, "sandbox setup: %.*s: %s", (int)(e - info - 1), info + 1, strerror(atoi(e + 8)));
        else snprintf(why, sizeof why, "sandbox setup: %s", info[0] == 'E' ? info + 1 : info);
    } else if (sb->cfg.isolation == SANDBOX_ISOLATE_NS && info[0] == 'S') {
        st = atoi(info + 1);
    } else if (sb->cfg.isolation == SANDBOX_ISOLATE_NS && s->killed == SANDBOX_PASSED) {
        snprintf(why, sizeof why, "sandbox setup: the namespace's init ended without the program's status (wait status %d)", s->wstatus);
    }
    res->end = why[0] ? SANDBOX_ERROR : classify(sb, s, st, cpu);
    res->code = WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st);
    res->wall_s = now_s() - s->t0;
    res->cpu_s = cpu;
    if (why[0]) {
        buf_free(&s->err);
        s->err.v = strdup(why);
        s->err.n = s->err.v ? strlen(why) : 0;
    }
    res->out = s->out.v ? s->out.v : strdup("");
    res->out_len = s->out.n;
    res->err = s->err.v ? s->err.v : strdup("");
    res->err_len = s->err.n;
    s->out.v = s->err.v = NULL;
    buf_free(&s->info);
    if (sb->cfg.isolation == SANDBOX_ISOLATE_NONE && s->workdir[0]) remove_tree(s->workdir);
    s->used = 0;
}

/* Kills a running slot's program: NS, its namespace's first process (the kernel then kills
 * every other); NONE, its process group. */
static void kill_slot(const sandbox_t *sb, slot_t *s, sandbox_end why) {
    if (s->reaped || s->pid <= 0) return;
    if (sb->cfg.isolation == SANDBOX_ISOLATE_NONE) kill(-s->pid, SIGKILL);
    kill(s->pid, SIGKILL);
    if (s->killed == SANDBOX_PASSED) s->killed = why;
}

int sandbox_run(sandbox_t *sb, const char *const *programs, int n, sandbox_result_t *res,
                volatile int *stop, sandbox_progress_fn progress, void *ctx, char *err,
                size_t errlen) {
    if (!sb || n < 0 || (n && (!programs || !res))) return snprintf(err, errlen, "sandbox_run: bad argument"), SANDBOX_EARG;
    for (int i = 0; i < n; i++)
        if (!programs[i]) return snprintf(err, errlen, "sandbox_run: program %d is NULL", i), SANDBOX_EARG;
    const int J = sb->cfg.jobs;
    slot_t *slots = calloc((size_t)J, sizeof *slots);
    struct pollfd *pf = calloc((size_t)J * 3, sizeof *pf);
    int *pslot = calloc((size_t)J * 3, sizeof *pslot);
    if (!slots || !pf || !pslot) {
        free(slots);
        free(pf);
        free(pslot);
        return snprintf(err, errlen, "out of memory"), SANDBOX_ENOMEM;
    }
    int next = 0, done = 0, rc = 0;
    while (done < n) {
        if (stop && *stop) {
            rc = (snprintf(err, errlen, "interrupted"), SANDBOX_EINTR);
            break;
        }
        for (int k = 0; k < J && next < n; k++)
            if (!slots[k].used) {
                start(sb, &slots[k], k, programs[next], next);
                next++;
            }
        /* wait for output, or until the nearest deadline (at most 20 ms: reaping is polled) */
        int np = 0;
        for (int k = 0; k < J; k++) {
            slot_t *s = &slots[k];
            if (!s->used) continue;
            int fds[3] = {s->out_fd, s->err_fd, s->info_fd};
            for (int j = 0; j < 3; j++)
                if (fds[j] >= 0) {
                    pf[np] = (struct pollfd){.fd = fds[j], .events = POLLIN};
                    pslot[np++] = k * 3 + j;
                }
        }
        if (np) poll(pf, (nfds_t)np, 20);
        else {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        for (int i = 0; i < np; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            slot_t *s = &slots[pslot[i] / 3];
            const int j = pslot[i] % 3;
            int *fd = j == 0 ? &s->out_fd : j == 1 ? &s->err_fd : &s->info_fd;
            buf_t *b = j == 0 ? &s->out : j == 1 ? &s->err : &s->info;
            int r = drain(*fd, b, j == 2 ? 200 : sb->cfg.out_bytes);
            if (r == 2 && j < 2) kill_slot(sb, s, SANDBOX_OUTPUT);
            if (r) close_fd(fd);
        }
        const double t = now_s();
        for (int k = 0; k < J; k++) {
            slot_t *s = &slots[k];
            if (!s->used) continue;
            if (!s->reaped) {
                pid_t w = wait4(s->pid, &s->wstatus, WNOHANG, &s->ru);
                if (w == s->pid) s->reaped = 1;
                else if (w < 0 && errno != EINTR) { /* someone else reaped it: nothing to learn */
                    s->reaped = 1;
                    s->wstatus = 0;
                    if (s->killed == SANDBOX_PASSED) s->killed = SANDBOX_SIGNAL;
                }
            }
            if (!s->reaped && t - s->t0 > sb->cfg.wall_s) kill_slot(sb, s, SANDBOX_WALL);
            if (s->reaped) {
                finish(sb, s, &res[s->idx]);
                done++;
                if (progress) progress(ctx, done, n);
            }
        }
    }
    for (int k = 0; k < J; k++) /* interrupted: nothing left running */
        if (slots[k].used) {
            slot_t *s = &slots[k];
            kill_slot(sb, s, SANDBOX_WALL);
            if (!s->reaped && s->pid > 0) wait4(s->pid, &s->wstatus, 0, &s->ru);
            s->reaped = 1;
            sandbox_result_t tmp;
            finish(sb, s, &tmp);
            sandbox_result_free(&tmp);
        }
    free(slots);
    free(pf);
    free(pslot);
    return rc;
}

void sandbox_result_free(sandbox_result_t *r) {
    if (!r) return;
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

const sandbox_cfg_t *sandbox_config(const sandbox_t *sb) { return &sb->cfg; }
const char *sandbox_describe(const sandbox_t *sb) { return sb->describe; }

void sandbox_close(sandbox_t **psb) {
    if (!psb || !*psb) return;
    sandbox_t *sb = *psb;
    if (sb->tmpdir[0]) rmdir(sb->tmpdir);
    free(sb->interp_buf);
    free(sb->argv);
    free(sb);
    *psb = NULL;
}

int sandbox_open(sandbox_t **psb, const sandbox_cfg_t *cfg, char *err, size_t errlen) {
    if (!psb || !cfg) return snprintf(err, errlen, "sandbox_open: bad argument"), SANDBOX_EARG;
    *psb = NULL;
    sandbox_t *sb = calloc(1, sizeof *sb);
    if (!sb) return snprintf(err, errlen, "out of memory"), SANDBOX_ENOMEM;
    sb->cfg = *cfg;
    int rc = set_defaults(&sb->cfg, err, errlen);
    if (!rc) rc = build_command(sb, err, errlen);
    if (!rc && sb->cfg.isolation == SANDBOX_ISOLATE_NONE) {
        const char *t = getenv("TMPDIR");
        snprintf(sb->tmpdir, sizeof sb->tmpdir, "%s/ft-sandbox.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(sb->tmpdir)) {
            rc = (snprintf(err, errlen, "mkdtemp %s: %s", sb->tmpdir, strerror(errno)), SANDBOX_ESYS);
            sb->tmpdir[0] = 0;
        } else {
            chmod(sb->tmpdir, 0711); /* the programs' own user ids pass through to their directories */
        }
    }
    if (rc) {
        sandbox_close(&sb);
        return rc;
    }
    const sandbox_cfg_t *c = &sb->cfg;
    sb->userns = c->isolation == SANDBOX_ISOLATE_NS && geteuid() != 0;
    /* the probe: an empty program must run and exit 0. Root inside a user namespace (a rootless
     * container) cannot take the per-slot user ids: then a user namespace of our own instead */
    const char *empty = "";
    sandbox_result_t r;
    for (;;) {
        rc = sandbox_run(sb, &empty, 1, &r, NULL, NULL, NULL, err, errlen);
        if (rc) {
            sandbox_close(&sb);
            return rc;
        }
        if (r.end != SANDBOX_ERROR || c->isolation != SANDBOX_ISOLATE_NS || sb->userns) break;
        sandbox_result_free(&r);
        sb->userns = 1;
    }
    snprintf(sb->describe, sizeof sb->describe,
             "%s; %s; wall %.3g s, cpu %.3g s, memory %zu MiB, disk %zu KiB, %d processes, %d files, output %zu KiB, %d job(s)",
             sb->argv[0],
             c->isolation == SANDBOX_ISOLATE_NS ? sb->userns ? "namespaces: user (uid 1000 inside, no capabilities), pid, mount (read-only, tmpfs /tmp), net (no interface up), ipc, uts"
                                                             : "namespaces: pid, mount (read-only, tmpfs /tmp), net (no interface up), ipc, uts; own uid"
                                                : geteuid() == 0 ? "NO isolation: rlimits, a process group, own uid"
                                                                 : "NO isolation: rlimits and a process group only",
             c->wall_s, c->cpu_s, c->mem_bytes >> 20, c->disk_bytes >> 10, c->nproc, c->nofile, c->out_bytes >> 10, c->jobs);
    if (r.end != SANDBOX_PASSED) {
        const int denied = r.end == SANDBOX_ERROR && (strstr(r.err, "Operation not permitted") || strstr(r.err, "namespace"));
        if (denied && c->isolation == SANDBOX_ISOLATE_NS)
            snprintf(err, errlen, "cannot isolate programs here (%s): the sandbox needs root, or unprivileged user namespaces "
                     "(kernel.unprivileged_userns_clone, user.max_user_namespaces), for its namespaces; --sandbox none runs them "
                     "with rlimits only (no network or filesystem isolation: trusted code only)", r.err);
        else
            snprintf(err, errlen, "interpreter '%s' does not run an empty program (%s, status %d): %.300s", c->interpreter,
                     sandbox_end_name(r.end), r.code, r.err);
        rc = denied ? SANDBOX_EISOLATION : SANDBOX_EINTERP;
        sandbox_result_free(&r);
        sandbox_close(&sb);
        return rc;
    }
    sandbox_result_free(&r);
    *psb = sb;
    return 0;
}
