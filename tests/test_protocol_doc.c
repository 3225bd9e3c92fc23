/* tests/test_protocol_doc.c: docs/PROTOCOL.md and the code say the same thing. Reads the
 * document's tables and checks them against what the code uses:
 *   - every message table (a "**`name`**" line, then | key | type | meaning |) against the
 *     field tables of bus/wire_schema.c: the same keys, each of the documented type, optional
 *     exactly when the schema says so, and a table for every message type;
 *   - every code table (| code | name | ...) against the C constants, and every constant of
 *     the wire, the loader, the sampler service and the socket helpers documented;
 *   - the size-limit table of §1.4 against bus_net_max_bytes (defaults, environment variables,
 *     flag names) and the security flag table against bus_net_flags.
 * Run from the repository root (tests/run.sh does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/bus.h"
#include "bus/net.h"
#include "bus/wire.h"
#include "bus/wire_schema.h"
#include "loader/batch.h"
#include "sampler/serve.h"
#include "tests/check.h"

#define MAX_CELLS 8
#define MAX_KEYS 16

static char *doc;

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static void trim(char *s) {
    size_t n = strlen(s), a = strspn(s, " \t");
    while (n > a && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    memmove(s, s + a, n - a);
    s[n - a] = 0;
}

/* Splits a table row "| a | b | c |" into trimmed cells; returns how many. */
static int cells(const char *line, char out[][512]) {
    int n = 0;
    const char *p = strchr(line, '|');
    while (p && n < MAX_CELLS) {
        const char *q = strchr(p + 1, '|');
        if (!q) break;
        size_t len = (size_t)(q - p - 1) < 511 ? (size_t)(q - p - 1) : 511;
        memcpy(out[n], p + 1, len);
        out[n][len] = 0;
        trim(out[n]);
        n++;
        p = q;
    }
    return n;
}

/* The `backticked` words of s, in order; returns how many. */
static int ticks(const char *s, char out[][64], int cap) {
    int n = 0;
    for (const char *p = strchr(s, '`'); p && n < cap; p = strchr(p + 1, '`')) {
        const char *q = strchr(p + 1, '`');
        if (!q) break;
        size_t len = (size_t)(q - p - 1) < 63 ? (size_t)(q - p - 1) : 63;
        memcpy(out[n], p + 1, len);
        out[n++][len] = 0;
        p = q;
    }
    return n;
}

/* "-3" or "−3" (U+2212) or "1" */
static long code_of(const char *s) {
    if (!strncmp(s, "\xe2\x88\x92", 3)) return -strtol(s + 3, NULL, 10);
    return strtol(s, NULL, 10);
}

typedef struct {
    const char *name;
    long value;
    int seen;
} constant_t;

static constant_t CONSTS[] = {
#define C(x) {#x, x, 0}
    C(WIRE_OK), C(WIRE_ERR_MALFORMED), C(WIRE_ERR_VERSION), C(WIRE_ERR_TYPE), C(WIRE_ERR_MISSING),
    C(WIRE_ERR_MISTYPED), C(WIRE_ERR_TRAILING), C(WIRE_ERR_OVERSIZE), C(WIRE_ERR_NOMEM), C(WIRE_ERR_ARG),
    C(LOADER_EMALFORMED), C(LOADER_ETYPE), C(LOADER_EPARAM), C(LOADER_ERANGE), C(LOADER_EEMPTY),
    C(LOADER_EDATA), C(LOADER_ENOMEM), C(LOADER_EIO),
    C(SERVE_EMALFORMED), C(SERVE_ETYPE), C(SERVE_EPARAM), C(SERVE_ELIMIT), C(SERVE_EMODEL),
    C(SERVE_EBUSY), C(SERVE_EDEADLINE), C(SERVE_ECANCELLED), C(SERVE_ESTOPPED),
    C(BUS_TIMEOUT), C(BUS_ERR_INTR), C(BUS_ERR_ZMQ), C(BUS_ERR_ARG), C(BUS_ERR_REFUSED),
#undef C
};
#define NCONSTS ((int)(sizeof CONSTS / sizeof CONSTS[0]))

/* A documented type cell for one key: the schema kind, or -1 when unknown. `as` is the
 * message a row "as in `x`" refers to. */
static int kind_of(const char *type, const char *key, const char *as_msg) {
    static const struct {
        const char *doc;
        int kind;
    } map[] = {{"u64", WF_U64},       {"u32", WF_U32},     {"i32", WF_I32},
               {"f64", WF_F64},       {"name", WF_NAME},   {"str", WF_STR},
               {"layout", WF_LAYOUT}, {"split", WF_SPLIT}, {"bin", WF_TOKENS},
               {"bin or nil", WF_MASK}, {"map name \xe2\x86\x92 f64", WF_VALUES},
               {"array of maps", WF_ITEMS}, {"bool", WF_BOOL}};
    if (as_msg) {
        const wire_schema_t *s = wire_schema_get(wire_type_from_name(as_msg));
        for (int i = 0; s && i < s->n_fields; i++)
            if (!strcmp(s->fields[i].name, key)) return s->fields[i].kind;
        return -1;
    }
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(type, map[i].doc)) return map[i].kind;
    return -1;
}

typedef struct {
    char key[64];
    int kind, optional;
} doc_field_t;

/* Checks one message's documented rows against its schema. */
static void check_message(const char *msg, const doc_field_t *d, int n) {
    const wire_schema_t *s = wire_schema_get(wire_type_from_name(msg));
    CHECK(s != NULL, "PROTOCOL.md documents a message \"%s\" the code does not have", msg);
    if (!s) return;
    for (int i = 0; i < n; i++) {
        const wire_field_t *f = NULL;
        for (int j = 0; j < s->n_fields; j++)
            if (!strcmp(s->fields[j].name, d[i].key)) f = &s->fields[j];
        CHECK(f != NULL, "%s: documented key \"%s\" is not a field", msg, d[i].key);
        if (!f) continue;
        CHECK(f->kind == d[i].kind, "%s.%s: documented kind %d, schema kind %d", msg, d[i].key, d[i].kind, f->kind);
        CHECK(f->required == !d[i].optional, "%s.%s: documented %s, schema says %s", msg, d[i].key,
              d[i].optional ? "optional" : "required", f->required ? "required" : "optional");
    }
    for (int j = 0; j < s->n_fields; j++) {
        int found = 0;
        for (int i = 0; i < n; i++) found |= !strcmp(s->fields[j].name, d[i].key);
        CHECK(found, "%s: field \"%s\" is not in PROTOCOL.md's table", msg, s->fields[j].name);
    }
}

/* Walks the document: message tables, code tables. */
static void test_tables(void) {
    int documented[MSG_TYPE_COUNT] = {0};
    char msg[64] = "", c[MAX_CELLS][512];
    doc_field_t rows[32];
    int nrows = 0, in_msg_table = 0, in_code_table = 0, code_tables = 0;
    char *save = NULL, *copy = strdup(doc);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int is_row = line[0] == '|';
        if (!is_row) {
            if (in_msg_table) {
                check_message(msg, rows, nrows);
                msg_type t = wire_type_from_name(msg);
                if (t != MSG_NONE) documented[t] = 1;
            }
            in_msg_table = in_code_table = 0;
            if (!strncmp(line, "**`", 3)) {
                char t[4][64];
                if (ticks(line, t, 1) == 1) snprintf(msg, sizeof msg, "%s", t[0]);
            }
            continue;
        }
        int n = cells(line, c);
        if (n < 2 || !strncmp(c[0], "---", 3) || !strncmp(c[0], "-----", 5)) continue;
        if (!strcmp(c[0], "key") && !strcmp(c[1], "type")) {
            in_msg_table = msg[0] != 0;
            nrows = 0;
            continue;
        }
        if (!strcmp(c[0], "code") && !strcmp(c[1], "name")) {
            in_code_table = 1;
            code_tables++;
            continue;
        }
        if (in_code_table) {
            char name[1][64];
            CHECK(ticks(c[1], name, 1) == 1, "code row without a `NAME`: %s", line);
            long v = code_of(c[0]);
            int known = 0;
            for (int i = 0; i < NCONSTS; i++)
                if (!strcmp(CONSTS[i].name, name[0])) {
                    known = 1;
                    CONSTS[i].seen = 1;
                    CHECK(CONSTS[i].value == v, "%s is %ld in the code, %ld in PROTOCOL.md", name[0], CONSTS[i].value, v);
                }
            CHECK(known, "PROTOCOL.md documents a code %s the code does not have", name[0]);
            continue;
        }
        if (!in_msg_table || n < 3) continue;
        char keys[MAX_KEYS][64], as[1][64], type[512], split[512];
        int nk = ticks(c[0], keys, MAX_KEYS);
        int optional = strstr(line, "*optional*") != NULL;
        snprintf(type, sizeof type, "%s", c[1]);
        char *cut = strstr(type, ", *optional*");
        if (cut) *cut = 0;
        const char *as_msg = !strncmp(type, "as in ", 6) && ticks(type, as, 1) == 1 ? as[0] : NULL;
        /* "layout, split" for two keys: one type each; otherwise one type for every key */
        char types[MAX_KEYS][64];
        int nt = 0;
        snprintf(split, sizeof split, "%s", type);
        for (char *sv = NULL, *tk = strtok_r(split, ",", &sv); tk && nt < MAX_KEYS; tk = strtok_r(NULL, ",", &sv)) {
            snprintf(types[nt], sizeof types[nt], "%s", tk);
            trim(types[nt++]);
        }
        for (int k = 0; k < nk && nrows < 32; k++) {
            const char *t = nt == nk ? types[k] : type;
            rows[nrows] = (doc_field_t){.kind = kind_of(t, keys[k], as_msg), .optional = optional};
            snprintf(rows[nrows].key, sizeof rows[nrows].key, "%s", keys[k]);
            CHECK(rows[nrows].kind >= 0, "%s.%s: type \"%s\" is not one of §2.1's", msg, keys[k], c[1]);
            nrows++;
        }
    }
    free(copy);
    for (int t = MSG_NONE + 1; t < MSG_TYPE_COUNT; t++)
        CHECK(documented[t], "message %s has no table in PROTOCOL.md", wire_type_name((msg_type)t));
    CHECK(code_tables >= 4, "code tables found: %d (wire, loader, sampler, socket helpers)", code_tables);
    for (int i = 0; i < NCONSTS; i++) CHECK(CONSTS[i].seen, "%s is in no code table of PROTOCOL.md", CONSTS[i].name);
    /* and no constant beyond those listed above exists */
    CHECK(!strcmp(wire_strerror(WIRE_ERR_ARG - 1), "unknown wire status"), "a wire status after WIRE_ERR_ARG");
    CHECK(!strcmp(loader_strerror(LOADER_EIO - 1), "unknown loader status"), "a loader status after LOADER_EIO");
}

/* §1.4: the size limits and the security flags. */
static void test_net_tables(void) {
    static const char *kinds[BUS_PEER_KINDS] = {"events", "sub", "requests", "replies"};
    int seen[BUS_PEER_KINDS] = {0}, flags_seen = 0;
    char c[MAX_CELLS][512], *save = NULL, *copy = strdup(doc), err[256];
    int limits = 0, sec = 0;
    flag_t fl[BUS_NET_NFLAGS];
    bus_net_opts_t o = {0};
    int nfl = bus_net_flags(fl, &o, BUS_PEER_REQUESTS);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] != '|') {
            limits = sec = 0;
            continue;
        }
        int n = cells(line, c);
        if (n < 2 || !strncmp(c[0], "---", 3)) continue;
        if (!strcmp(c[0], "peers of")) { limits = 1; continue; }
        if (!strcmp(c[0], "flag") && !strcmp(c[1], "environment")) { sec = 1; continue; }
        if (limits && n >= 5) {
            int k = -1;
            for (int i = 0; i < BUS_PEER_KINDS; i++)
                if (!strcmp(c[0], kinds[i])) k = i;
            CHECK(k >= 0, "limit row for unknown peers \"%s\"", c[0]);
            if (k < 0) continue;
            seen[k] = 1;
            char env[1][64], flag[2][64];
            CHECK(ticks(c[4], env, 1) == 1, "%s: no environment variable", c[0]);
            unsetenv(env[0]);
            CHECK(bus_net_setup(NULL, err, sizeof err) == 0, "%s", err);
            CHECK(bus_net_max_bytes(k) == atoll(c[2]), "%s: default %lld, documented %s", c[0], bus_net_max_bytes(k), c[2]);
            setenv(env[0], "4096", 1);
            CHECK(bus_net_setup(NULL, err, sizeof err) == 0 && bus_net_max_bytes(k) == 4096,
                  "%s: $%s does not set the limit", c[0], env[0]);
            unsetenv(env[0]);
            if (ticks(c[3], flag, 2) >= 1) {
                flag_t kf[BUS_NET_NFLAGS];
                bus_net_opts_t ko = {0};
                int nk = bus_net_flags(kf, &ko, k);
                CHECK(strstr(flag[0], kf[nk - 1].name) != NULL, "%s: documented flag %s, code --%s", c[0], flag[0],
                      kf[nk - 1].name);
            }
        }
        if (sec) {
            char f[1][64];
            if (ticks(c[0], f, 1) != 1) continue;
            int found = 0;
            for (int i = 0; i < nfl; i++) {
                char want[80];
                snprintf(want, sizeof want, "--%s", fl[i].name);
                if (!strncmp(f[0], want, strlen(want)) && (f[0][strlen(want)] == 0 || f[0][strlen(want)] == ' ')) {
                    found = 1;
                    flags_seen |= 1 << i;
                }
            }
            CHECK(found, "documented flag %s is not a security flag of the code", f[0]);
        }
    }
    free(copy);
    bus_net_reset();
    for (int k = 0; k < BUS_PEER_KINDS; k++) CHECK(seen[k], "no limit row for %s", kinds[k]);
    /* every flag of bus_net_flags but the size one is in the security table */
    CHECK(flags_seen == (1 << (nfl - 1)) - 1, "security flags documented: mask %x of %d", flags_seen, nfl - 1);
}

int main(void) {
    doc = read_all("docs/PROTOCOL.md");
    if (!doc) {
        CHECK(0, "cannot read docs/PROTOCOL.md (run from the repository root)");
        return check_summary();
    }
    static const char *envs[] = {"FT_MAX_EVENT_BYTES", "FT_MAX_SUB_BYTES", "FT_MAX_REQUEST_BYTES",
                                 "FT_MAX_REPLY_BYTES", "FT_KEY", "FT_TRUST", "FT_AUTHORIZED"};
    for (size_t i = 0; i < sizeof envs / sizeof *envs; i++) unsetenv(envs[i]);
    RUN(test_tables);
    RUN(test_net_tables);
    free(doc);
    return check_summary();
}
