/* evaluator/sandbox.h: running untrusted programs (generated code) so that none of them can
 * stall, crash or change the machine that runs them.
 *
 * Every program runs in its own process, from a fresh empty working directory, under limits
 * on wall-clock time, CPU time, address space, file size, processes and open files
 * (setrlimit), with its stdout and stderr captured up to a bound. Up to `jobs` programs run at
 * once. How each one ended is a sandbox_end: a program that loops, forks without end, fills
 * memory or disk, floods its output or tries the network is one failed sample, never a
 * stalled or crashed caller. docs/evaluator.md ("The sandbox") says what each limit protects
 * against.
 *
 * Isolation (SANDBOX_ISOLATE_NS, the default): each program is the first process of new PID,
 * mount, network, IPC and UTS namespaces, created by clone(2), where a small init (PID 1) runs
 * the program as PID 2 and reaps what it orphans:
 *   - network: a new network namespace holds only a loopback interface that is down, so every
 *     connect() fails (ENETUNREACH), to the internet and to this machine's own services alike;
 *   - filesystem: every mount is made read-only and nosuid (mount_setattr, Linux >= 5.12), and
 *     a fresh tmpfs of disk_bytes (and 1024 inodes) is mounted on /tmp, the working directory:
 *     nothing the program writes reaches a disk, and it vanishes with the namespace;
 *   - processes: the program runs as a user id of its own (one per job slot, owning no file and
 *     no other process), so RLIMIT_NPROC counts its processes alone and it can signal no
 *     process outside; it cannot see them either (its own PID namespace, a fresh /proc). When
 *     the program ends, or is killed at a limit, its namespace's init exits and the kernel
 *     kills every process left in the namespace: nothing it forked survives it.
 * Root makes these directly. Another caller (or root in a user namespace that cannot take the
 * per-slot ids, e.g. a rootless container) gets a user namespace too: the program is uid 1000
 * inside it (mapped to the caller's uid), without capabilities after its execve, so it cannot
 * undo the read-only mounts; RLIMIT_NPROC counts that namespace's processes alone.
 * SANDBOX_ISOLATE_NONE (asked for explicitly, where no namespace can be made): the same
 * rlimits, a fresh working directory under the system's temporary directory (removed after),
 * the program in a process group of its own that is killed at the limits; but no network or
 * filesystem isolation, RLIMIT_NPROC counts every process of the calling user, and a program
 * that leaves its process group (setsid) can outlive the limit. For trusted code only.
 *
 * Library calls return 0 or a negative SANDBOX_E* code with one line in err; they never exit.
 * Not thread-safe: one sandbox_t per thread. */
#ifndef EVALUATOR_SANDBOX_H
#define EVALUATOR_SANDBOX_H
#include <stddef.h>

enum {
    SANDBOX_EARG = -1,       /* bad configuration */
    SANDBOX_ESYS = -2,       /* a system call the sandbox itself needs failed */
    SANDBOX_ENOMEM = -3,
    SANDBOX_EINTR = -4,      /* stopped by the caller's flag */
    SANDBOX_EISOLATION = -5, /* no namespace can be created here (no root, no user namespaces) */
    SANDBOX_EINTERP = -6,    /* the interpreter does not run an empty program */
};

/* How a program ended. The first three and OUTPUT are known exactly; CPU, DISK and SIGNAL
 * from the signal that ended it; MEMORY, DISK, PROCS and FILES from a non-zero exit whose
 * last exception line in stderr's tail (a line starting "...Error" or "...Exception"; else the
 * last line) names the error (Python's MemoryError, errno EFBIG/ENOSPC, EAGAIN on
 * fork or "can't start new thread", EMFILE): another interpreter's such failures count as
 * FAILED. */
typedef enum {
    SANDBOX_PASSED = 0, /* exit status 0 */
    SANDBOX_FAILED,     /* non-zero exit, no limit recognised: a failed assert, an exception */
    SANDBOX_WALL,       /* still running at the wall-clock limit: killed */
    SANDBOX_CPU,        /* CPU-time limit */
    SANDBOX_MEMORY,     /* address-space limit */
    SANDBOX_DISK,       /* file-size limit, or the working directory full */
    SANDBOX_PROCS,      /* process-count limit */
    SANDBOX_FILES,      /* open-file limit */
    SANDBOX_OUTPUT,     /* wrote more than out_bytes to stdout or stderr: killed */
    SANDBOX_SIGNAL,     /* killed by another signal (a crash) */
    SANDBOX_ERROR,      /* could not be started (the sandbox's own setup failed) */
    SANDBOX_NEND
} sandbox_end;

/* "passed", "failed", "wall", "cpu", "memory", "disk", "procs", "files", "output", "signal",
 * "error". */
const char *sandbox_end_name(sandbox_end e);

typedef enum { SANDBOX_ISOLATE_NS = 0, SANDBOX_ISOLATE_NONE = 1 } sandbox_isolation;

#define SANDBOX_DEFAULT_INTERPRETER "/usr/bin/python3"

typedef struct {
    const char *interpreter; /* command, split at spaces; the program's file name is appended.
                                A first word without '/' is looked up in PATH once, at open.
                                NULL: SANDBOX_DEFAULT_INTERPRETER */
    double wall_s;           /* wall-clock limit (0: 10 s) */
    double cpu_s;            /* CPU-time limit of each process (0: 5 s) */
    size_t mem_bytes;        /* address space of each process, RLIMIT_AS (0: 1 GiB) */
    size_t disk_bytes;       /* largest file (RLIMIT_FSIZE) and the working directory's size (0: 16 MiB) */
    int nproc;               /* processes and threads of the program, RLIMIT_NPROC (0: 16) */
    int nofile;              /* open files of each process, RLIMIT_NOFILE (0: 64) */
    size_t out_bytes;        /* bytes of stdout and of stderr kept; beyond: killed (0: 64 KiB) */
    int jobs;                /* programs at once, 1..256 (0: 1) */
    sandbox_isolation isolation;
} sandbox_cfg_t;

typedef struct sandbox sandbox_t;

/* Checks the configuration, resolves the interpreter and runs an empty program through it
 * (SANDBOX_EISOLATION when the namespaces cannot be made, SANDBOX_EINTERP when it does not
 * exit 0, naming the command and its stderr). */
int sandbox_open(sandbox_t **sb, const sandbox_cfg_t *cfg, char *err, size_t errlen);
void sandbox_close(sandbox_t **sb);
/* The configuration in effect (defaults filled in). */
const sandbox_cfg_t *sandbox_config(const sandbox_t *sb);
/* One line describing the isolation in effect, for logs. */
const char *sandbox_describe(const sandbox_t *sb);

typedef struct {
    sandbox_end end;
    int code;              /* exit status (PASSED, FAILED, ...) or the signal number (SIGNAL, CPU) */
    double wall_s, cpu_s;  /* wall time from start to end; CPU time (user + system) of the
                              program and the processes it waited for */
    char *out, *err;       /* what it wrote (NUL-terminated, at most out_bytes each; for
                              ERROR, err says what failed); malloc'd, sandbox_result_free */
    size_t out_len, err_len;
} sandbox_result_t;

/* Progress callback: called after each program ends (done of n). */
typedef void (*sandbox_progress_fn)(void *ctx, int done, int n);

/* Runs the n programs (source texts, each written to the working directory as main.py and
 * run by the interpreter), up to jobs at once, filling res[0..n). stop (may be NULL) is polled
 * every few milliseconds: when it becomes non-zero every running program is killed and the
 * call returns SANDBOX_EINTR. A program that cannot be started is res[i].end = SANDBOX_ERROR,
 * not a failure of the call. */
int sandbox_run(sandbox_t *sb, const char *const *programs, int n, sandbox_result_t *res,
                volatile int *stop, sandbox_progress_fn progress, void *ctx, char *err,
                size_t errlen);
void sandbox_result_free(sandbox_result_t *r);
#endif
