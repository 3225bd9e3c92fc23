/* evaluator/sandbox_impl.h: what sandbox.c hands the new process (sandbox_child.c). Not for
 * other files. */
#ifndef EVALUATOR_SANDBOX_IMPL_H
#define EVALUATOR_SANDBOX_IMPL_H
#include <stddef.h>
#include <sys/types.h>

#include "evaluator/sandbox.h"

/* Everything the child needs, prepared by the parent: the child runs between clone(2) and
 * execve(2) in a copy of a possibly multi-threaded process, so it calls nothing that takes a
 * lock or allocates (no stdio, no malloc) and makes the identity changes with raw system
 * calls (glibc's setuid would wait for threads that do not exist in the copy). */
typedef struct {
    sandbox_isolation isolation;
    const char *workdir;        /* NS: "/tmp" (the fresh tmpfs); NONE: a fresh directory */
    const char *tmpfs_opts;     /* NS: "size=...,nr_inodes=...,mode=0700,uid=U,gid=U" */
    uid_t uid;                  /* the program's user and group id ... */
    int set_uid;                /* ... taken when 1 (NS run by root, or NONE run by root) */
    int userns;                 /* NS run by another user: a user namespace too (sandbox.h) */
    int sync_fd;                /* userns: read end the parent writes one byte to once it has
                                   written the id maps (-1: none) */
    const char *program;        /* source text, written to workdir/main.py */
    size_t program_len;
    int out_fd, err_fd, info_fd;/* write ends: stdout, stderr, and the setup-failure channel
                                   (close-on-exec: it reads EOF once execve succeeded) */
    const sandbox_cfg_t *cfg;   /* the limits */
    char *const *argv;          /* interpreter argv with "main.py" last, NULL-terminated */
    char *const *envp;
} sandbox_child_t;

/* The child's side: namespaces' mounts, rlimits, identity, then execve. Never returns: on a
 * setup failure it writes "<step>: <errno text>" to info_fd and exits 127. */
void sandbox_child(const sandbox_child_t *c) __attribute__((noreturn));
#endif
