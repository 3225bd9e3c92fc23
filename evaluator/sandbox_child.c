/* evaluator/sandbox_child.c: the sandboxed process between clone(2) and execve(2) (see
 * sandbox_impl.h for the rules this code keeps: system calls only). */
#include "evaluator/sandbox_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* struct mount_attr of linux/mount.h, which not every libc's headers declare */
struct sb_mount_attr {
    unsigned long long attr_set, attr_clr, propagation, userns_fd;
};

/* "E<step>: errno <n>" to the parent, then exit 127 (the parent prints strerror(n)). */
static void die(const sandbox_child_t *c, const char *step) __attribute__((noreturn));
static void die(const sandbox_child_t *c, const char *step) {
    int e = errno;
    char buf[160];
    size_t n = 0;
    buf[n++] = 'E';
    for (const char *p = step; *p && n < 100; p++) buf[n++] = *p;
    const char *mid = ": errno ";
    for (const char *p = mid; *p; p++) buf[n++] = *p;
    char dig[12];
    int k = 0;
    do dig[k++] = (char)('0' + e % 10); while ((e /= 10) && k < 11);
    while (k) buf[n++] = dig[--k];
    ssize_t w = write(c->info_fd, buf, n);
    (void)w;
    _exit(127);
}

static void limit(const sandbox_child_t *c, int res, rlim_t soft, rlim_t hard, const char *step) {
    struct rlimit rl = {soft, hard};
    if (setrlimit(res, &rl)) die(c, step);
}

/* NS: the filesystem seen by the program (sandbox.h: read-only everything, a tmpfs on /tmp, a
 * /proc of its own PID namespace). */
static void mounts(const sandbox_child_t *c) {
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) die(c, "making mounts private");
    struct sb_mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID};
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &a, sizeof a)) {
        if (errno != ENOSYS) die(c, "mount_setattr read-only");
        /* before Linux 5.12: the world-writable places get private tmpfs instead; the rest is
         * closed to the program's user id by ordinary permissions */
        static const char *const scratch[] = {"/var/tmp", "/dev/shm", "/run/lock"};
        for (size_t i = 0; i < sizeof scratch / sizeof *scratch; i++)
            if (mount("sandbox", scratch[i], "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,nr_inodes=16") && errno != ENOENT)
                die(c, "mounting a tmpfs over a shared scratch directory");
    }
    if (mount("sandbox", c->workdir, "tmpfs", MS_NOSUID | MS_NODEV, c->tmpfs_opts)) die(c, "mounting the working tmpfs");
    /* a user namespace may be refused a new /proc where the caller's own is partly masked (a
     * container): the old one then stays, read-only, showing the outer processes, whose private
     * files stay closed to a process of another user namespace */
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) && !(c->userns && errno == EPERM))
        die(c, "mounting /proc");
}

/* "S<status>" to the parent: the program's wait status, as the namespace's init saw it. */
static void report_status(int fd, int status) {
    char buf[16];
    size_t n = 0;
    buf[n++] = 'S';
    unsigned v = (unsigned)status;
    char dig[12];
    int k = 0;
    do dig[k++] = (char)('0' + v % 10); while ((v /= 10) && k < 11);
    while (k) buf[n++] = dig[--k];
    ssize_t w = write(fd, buf, n);
    (void)w;
}

/* The program's own process: limits, descriptors, identity, execve. */
static void exec_program(const sandbox_child_t *c) __attribute__((noreturn));
static void exec_program(const sandbox_child_t *c) {
    const sandbox_cfg_t *g = c->cfg;
    /* a CPU-bound process gets SIGXCPU at the soft limit, SIGKILL one second later */
    rlim_t cpu = (rlim_t)(g->cpu_s + 0.999);
    limit(c, RLIMIT_CPU, cpu, cpu + 1, "RLIMIT_CPU");
    limit(c, RLIMIT_AS, g->mem_bytes, g->mem_bytes, "RLIMIT_AS");
    limit(c, RLIMIT_FSIZE, g->disk_bytes, g->disk_bytes, "RLIMIT_FSIZE");
    limit(c, RLIMIT_NOFILE, (rlim_t)g->nofile, (rlim_t)g->nofile, "RLIMIT_NOFILE");
    limit(c, RLIMIT_CORE, 0, 0, "RLIMIT_CORE");
    limit(c, RLIMIT_NPROC, (rlim_t)g->nproc, (rlim_t)g->nproc, "RLIMIT_NPROC");
    /* descriptors: 0 /dev/null, 1 and 2 the pipes, 3 the failure channel, nothing else */
    int nul = open("/dev/null", O_RDONLY);
    if (nul < 0 || dup2(nul, 0) < 0 || dup2(c->out_fd, 1) < 0 || dup2(c->err_fd, 2) < 0) die(c, "dup2");
    sandbox_child_t cc = *c;
    if (c->info_fd != 3) {
        if (dup3(c->info_fd, 3, O_CLOEXEC) < 0) die(c, "dup3");
        cc.info_fd = 3;
    } else if (fcntl(3, F_SETFD, FD_CLOEXEC)) {
        die(c, "fcntl");
    }
    if (syscall(SYS_close_range, 4u, ~0u, 0u))
        for (int i = 4; i < 4096; i++) close(i);
    if (c->set_uid) {
        /* raw calls: glibc's wrappers would synchronise with threads this copy does not have */
        if (syscall(SYS_setgroups, 0, NULL)) die(&cc, "setgroups");
        if (syscall(SYS_setresgid, c->uid, c->uid, c->uid)) die(&cc, "setresgid");
        if (syscall(SYS_setresuid, c->uid, c->uid, c->uid)) die(&cc, "setresuid");
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) die(&cc, "prctl NO_NEW_PRIVS");
    execve(c->argv[0], c->argv, c->envp);
    die(&cc, "execve of the interpreter");
}

void sandbox_child(const sandbox_child_t *c) {
    /* the parent's signal dispositions and mask must not reach the program */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++) sigaction(s, &dfl, NULL); /* SIGKILL/SIGSTOP refuse: fine */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL)) die(c, "prctl PDEATHSIG"); /* the caller dies: so do we */
    if (c->sync_fd >= 0) { /* a user namespace: nothing works before its id maps exist */
        char b;
        ssize_t r;
        while ((r = read(c->sync_fd, &b, 1)) < 0 && errno == EINTR) {}
        if (r != 1) die(c, "waiting for the user namespace's id maps");
        close(c->sync_fd);
    }
    /* a session of its own: the terminal's signals and kill(0, ...) stay out of the caller's group */
    if (setsid() < 0) die(c, "setsid");
    if (c->isolation == SANDBOX_ISOLATE_NS) mounts(c);
    if (chdir(c->workdir)) die(c, "chdir to the working directory");
    int fd = open("main.py", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (fd < 0) die(c, "creating main.py");
    for (size_t off = 0; off < c->program_len;) {
        ssize_t w = write(fd, c->program + off, c->program_len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die(c, "writing main.py");
        off += (size_t)w;
    }
    close(fd);
    if (c->isolation != SANDBOX_ISOLATE_NS) exec_program(c);
    /* NS: this process is PID 1 of the namespace, a tiny init: the program runs as PID 2, an
     * ordinary process (signals, SIGXCPU behave as outside), and init reaps whatever is
     * orphaned until the program ends, reports its status, and exits; the kernel then kills
     * every process left in the namespace */
    pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) exec_program(c);
    if (pid < 0) die(c, "clone of the program");
    close(c->out_fd);
    close(c->err_fd);
    for (;;) {
        int st;
        pid_t w = wait4(-1, &st, 0, NULL);
        if (w == pid) {
            report_status(c->info_fd, st);
            _exit(0);
        }
        if (w < 0 && errno != EINTR) _exit(126);
    }
}
