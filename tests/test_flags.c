/* tests/test_flags.c: common/flags.c, the parser every program's flags go through (and the
 * --help text it prints from the same table). Each bad input must give one line naming the
 * flag and the value, and leave nothing half-set that a caller could mistake for a value. */
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "tests/check.h"

typedef struct {
    int n, on;
    long long big;
    unsigned long long seed;
    float lr;
    double beta;
    const char *name;
    flag_t f[7];
} opts_t;

static void opts_init(opts_t *o) {
    memset(o, 0, sizeof *o);
    o->n = 4, o->big = -1, o->seed = 7, o->lr = 0.5f, o->beta = 0.9, o->name = "run";
    flag_t f[7] = {
        {"n", FLAG_INT, &o->n, "count", 1, 100, 0},
        {"big", FLAG_I64, &o->big, "a big count (not given: all)", 0, 1e12, 0},
        {"seed", FLAG_U64, &o->seed, "seed", 0, 0, 0},
        {"lr", FLAG_FLOAT, &o->lr, "learning rate", 0, 10, 0},
        {"beta", FLAG_DOUBLE, &o->beta, "beta", 0, 0, 0},
        {"name", FLAG_STR, &o->name, "name", 0, 0, 0},
        {"on", FLAG_BOOL, &o->on, "switch", 0, 0, 0},
    };
    memcpy(o->f, f, sizeof f);
}

/* parses the words of line (space-separated) after a program name */
static int parse(opts_t *o, const char *line, const char **pos, int *npos, int cap, char *err, size_t errlen) {
    static char buf[512];
    char *argv[32];
    int argc = 0;
    argv[argc++] = "prog";
    snprintf(buf, sizeof buf, "%s", line);
    for (char *sv = NULL, *t = strtok_r(buf, " ", &sv); t && argc < 32; t = strtok_r(NULL, " ", &sv)) argv[argc++] = t;
    err[0] = 0;
    return flags_parse(argc, argv, 1, o->f, 7, pos, npos, cap, err, errlen);
}

static void test_values(void) {
    opts_t o;
    char err[256];
    opts_init(&o);
    CHECK(parse(&o, "--n 12 --big=1000000000000 --seed 18446744073709551615 --lr 1e-3 --beta=-2.5 --name x --on",
                NULL, NULL, 0, err, sizeof err) == 0, "%s", err);
    CHECK(o.n == 12 && o.big == 1000000000000LL && o.seed == 18446744073709551615ULL, "n %d big %lld seed %llu", o.n, o.big,
          o.seed);
    CHECK(o.lr == 1e-3f && o.beta == -2.5 && !strcmp(o.name, "x") && o.on == 1);
    CHECK(flags_find(o.f, 7, "n")->seen && flags_find(o.f, 7, "on")->seen && !flags_find(o.f, 7, "nope"));
    opts_init(&o);
    CHECK(parse(&o, "", NULL, NULL, 0, err, sizeof err) == 0 && o.n == 4 && !o.f[0].seen, "defaults stay, nothing seen");
    CHECK(parse(&o, "--name=", NULL, NULL, 0, err, sizeof err) == 0 && !strcmp(o.name, ""), "--name= is the empty string");
    CHECK(parse(&o, "-h", NULL, NULL, 0, err, sizeof err) == 1 && parse(&o, "--n 3 --help", NULL, NULL, 0, err, sizeof err) == 1);
}

/* one bad input: status -1 and a line that names what was wrong (and no newline: one line) */
static void bad(const char *line, const char *want) {
    opts_t o;
    char err[256];
    opts_init(&o);
    int rc = parse(&o, line, NULL, NULL, 0, err, sizeof err);
    CHECK(rc == -1 && strstr(err, want) && !strchr(err, '\n'), "'%s': rc %d, err '%s', want '%s'", line, rc, err, want);
}

static void test_refusals(void) {
    bad("--nope 1", "unknown flag --nope");
    bad("--n", "--n needs a value");
    bad("--n abc", "--n: 'abc' is not an integer");
    bad("--n 12x", "--n: '12x' is not an integer");
    bad("--n 2147483648", "--n: 2147483648 is outside [1, 100]");
    bad("--big 99999999999999999999", "--big: 99999999999999999999 is outside [0, 1000000000000]");
    bad("--n 0", "--n: 0 is outside [1, 100]");
    bad("--n 101", "--n: 101 is outside [1, 100]");
    /* integer bounds print as integers (they printed as 1e+12 before) */
    bad("--big 1000000000001", "--big: 1000000000001 is outside [0, 1000000000000]");
    bad("--seed -1", "--seed: '-1' is not an integer in [0, 2^64-1]");
    bad("--seed +1", "is not an integer in [0, 2^64-1]");
    bad("--seed 18446744073709551616", "--seed: '18446744073709551616' is not an integer");
    bad("--lr nan", "--lr: 'nan' is not a finite number");
    bad("--lr inf", "--lr: 'inf' is not a finite number");
    bad("--lr 11", "--lr: 11 is outside [0, 10]");
    bad("--beta 1e999", "--beta: '1e999' is not a finite number");
    bad("--on=1", "--on takes no value");
    bad("stray", "unexpected argument 'stray'");
}

static void test_positionals(void) {
    opts_t o;
    char err[256];
    const char *pos[2];
    int npos = -1;
    opts_init(&o);
    CHECK(parse(&o, "a --n 5 - b", pos, &npos, 2, err, sizeof err) == -1 && strstr(err, "unexpected argument 'b'"),
          "a third positional over a cap of 2: %s", err);
    opts_init(&o);
    CHECK(parse(&o, "a --n 5 -", pos, &npos, 2, err, sizeof err) == 0 && npos == 2 && !strcmp(pos[0], "a") &&
              !strcmp(pos[1], "-") && o.n == 5,
          "'-' (stdin) is a positional: npos %d", npos);
}

/* --help's lines come from the same table: a default where there is one, none where the
 * value is outside the flag's range ("not given"), the help text always */
static void test_usage(void) {
    opts_t o;
    opts_init(&o);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    flags_usage(f, o.f, 7);
    fclose(f);
    CHECK(strstr(text, "--n V") && strstr(text, "count (default: 4)"), "%s", text);
    CHECK(strstr(text, "a big count (not given: all)\n"), "-1 is outside [0, 1e12]: no default printed\n%s", text);
    CHECK(strstr(text, "seed (default: 7)") && strstr(text, "name (default: run)"), "%s", text);
    CHECK(strstr(text, "--on ") && !strstr(text, "--on V"), "a switch takes no value\n%s", text);
    CHECK(flags_count(o.f, 7) == 7);
    flag_t spare[4] = {{"a", FLAG_BOOL, &o.on, "a", 0, 0, 0}, {"b", FLAG_BOOL, &o.on, "b", 0, 0, 0}};
    CHECK(flags_count(spare, 4) == 2, "a table with room to spare counts its named entries");
    free(text);
}

int main(void) {
    test_values();
    test_refusals();
    test_positionals();
    test_usage();
    return check_summary();
}
