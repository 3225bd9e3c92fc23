/* common/flags.h: a table-driven command-line parser for the programs.
 *
 * A program lists its flags once (name, kind, where the value goes, help text); the same table
 * prints --help and parses strictly: an unknown flag, a missing value, a number that does not
 * parse or is out of range gives one line naming the flag and the value, and a non-zero
 * status (the program then exits 2). "--name value" and "--name=value" are both accepted. */
#ifndef COMMON_FLAGS_H
#define COMMON_FLAGS_H
#include <stddef.h>
#include <stdio.h>

/* FLAG_U64: unsigned long long, every value 0..2^64-1 (a u64 of the wire); no sign accepted */
typedef enum { FLAG_INT, FLAG_I64, FLAG_FLOAT, FLAG_DOUBLE, FLAG_STR, FLAG_BOOL, FLAG_U64 } flag_kind;

typedef struct {
    const char *name;   /* without the leading "--" */
    flag_kind kind;
    void *dst;          /* int*, long long*, float*, double*, const char**, int* (bool: set to 1),
                           unsigned long long* */
    const char *help;
    double min, max;    /* accepted range for numbers; min == max means unchecked */
    int seen;           /* set by flags_parse when the flag was given */
} flag_t;

/* Parses argv[first..argc). Positional arguments (not starting with "--") are collected in
 * pos[0..*npos) up to pos_cap (more is an error). "--help" or "-h" returns 1 (caller prints usage).
 * Returns 0 on success, 1 for --help, -1 on error with the reason in err. */
int flags_parse(int argc, char **argv, int first, flag_t *flags, int n, const char **pos, int *npos,
                int pos_cap, char *err, size_t errlen);
/* Prints "  --name VALUE  help (default: ...)" lines; defaults are read from dst. A number
 * outside the flag's own range (a -1 or 0 that means "not given") prints no default: the
 * program needs the flag, or says in the help what it does without it. */
void flags_usage(FILE *f, const flag_t *flags, int n);
/* The flag named `name` (NULL if none): e.g. to ask whether the user gave it. */
const flag_t *flags_find(const flag_t *flags, int n, const char *name);
/* Entries of a table before the first with a NULL name (a table declared with room to spare,
 * so a program need not count its own flags by hand). */
int flags_count(const flag_t *flags, int cap);
#endif
