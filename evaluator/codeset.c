/* evaluator/codeset.c: code problems, programs and given completions (see codeset.h). */
#include "evaluator/codeset.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evaluator/lm.h"
#include "evaluator/textdata.h"

/* Chen et al. (2021), section 2.3 (human-eval's harness leaves them to the caller) */
static const char *const stops_humaneval[] = {"\nclass", "\ndef", "\n#", "\nif", "\nprint"};
/* bigcode-evaluation-harness, tasks/mbpp.py */
static const char *const stops_mbpp[] = {"\nclass", "\nassert", "\n\"\"\"", "\nprint", "\nif", "\n<|/", "\n```"};

const char *code_format_name(code_format f) { return f == CODE_MBPP ? "mbpp" : "humaneval"; }

/* malloc'd concatenation of the NULL-terminated strings. */
static char *cat(const char *first, ...) {
    size_t n = 0;
    va_list ap;
    va_start(ap, first);
    for (const char *s = first; s; s = va_arg(ap, const char *)) n += strlen(s);
    va_end(ap);
    char *out = malloc(n + 1), *p = out;
    if (!out) return NULL;
    va_start(ap, first);
    for (const char *s = first; s; s = va_arg(ap, const char *)) {
        size_t k = strlen(s);
        memcpy(p, s, k);
        p += k;
    }
    va_end(ap);
    *p = 0;
    return out;
}

/* task_id as text: a string, or an integer's decimal form; NULL when neither. */
static char *task_id_text(json_t *id) {
    char buf[32];
    if (json_is_string(id)) return strdup(json_string_value(id));
    if (json_is_integer(id)) {
        snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(id));
        return strdup(buf);
    }
    return NULL;
}

static const char *str_field(json_t *o, const char *name) {
    json_t *x = json_object_get(o, name);
    return json_is_string(x) ? json_string_value(x) : NULL;
}

static void set_stops(code_set_t *s, const char *const *v, int n) {
    for (int i = 0; i < s->nstop; i++) free(s->stop[i]);
    s->nstop = 0;
    for (int i = 0; i < n && i < CODE_MAX_STOP; i++)
        if ((s->stop[s->nstop] = strdup(v[i]))) s->nstop++;
}

/* A JSON value as a Python literal (a JSON string's escapes are a subset of Python's: \" \\ \/
 * \n \t \r \b \f \uXXXX; the text is kept as UTF-8), malloc'd; NULL on out-of-memory. */
static char *py_str(const char *text) {
    json_t *j = json_string(text);
    char *out = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    return out;
}

/* HumanEval+ as evalplus distributes it (base_input, plus_input, atol beside the HumanEval
 * fields): the tests are evalplus's differential ones, every input of base_input + plus_input
 * given to the candidate and to the canonical solution (its own namespace), the outputs equal,
 * or for floats (a float, or a non-empty list of floats) within atol (1e-6 when atol is 0) +
 * 1e-7 |expected|, of the same type and length. malloc'd text of the program's tail; NULL on
 * out-of-memory. */
static char *plus_tests(const char *prompt, const char *canon, const char *entry, json_t *base, json_t *plus, double atol) {
    json_t *all = json_array();
    if (!all) return NULL;
    if (json_is_array(base)) json_array_extend(all, base);
    if (json_is_array(plus)) json_array_extend(all, plus);
    char *inputs = json_dumps(all, JSON_COMPACT | JSON_ENCODE_ANY), *ref = cat(prompt, canon, NULL);
    json_decref(all);
    char *inputs_py = inputs ? py_str(inputs) : NULL, *ref_py = ref ? py_str(ref) : NULL, *entry_py = py_str(entry);
    char tol[64];
    snprintf(tol, sizeof tol, "%.17g", atol);
    char *out = NULL;
    if (inputs_py && ref_py && entry_py)
        out = cat("\n\ndef _ft_floats(x):\n"
                  "    return isinstance(x, float) or (isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(i, float) for i in x))\n"
                  "\ndef _ft_close(o, e, tol):\n"
                  "    if type(o) != type(e):\n        return False\n"
                  "    if isinstance(e, (list, tuple)):\n"
                  "        return len(o) == len(e) and all(_ft_close(a, b, tol) for a, b in zip(o, e))\n"
                  "    return abs(o - e) <= tol + 1e-7 * abs(e)\n"
                  "\ndef _ft_plus():\n"
                  "    import copy, json\n"
                  "    ns = {}\n"
                  "    exec(", ref_py, ", ns)\n"
                  "    ref, cand = ns[", entry_py, "], globals()[", entry_py, "]\n"
                  "    for args in json.loads(", inputs_py, "):\n"
                  "        exp = ref(*copy.deepcopy(args))\n"
                  "        out = cand(*copy.deepcopy(args))\n"
                  "        if out == exp:\n            continue\n"
                  "        tol = ", tol, " or (1e-6 if _ft_floats(exp) else 0)\n"
                  "        assert tol and _ft_close(out, exp, tol), 'input %r: %r, expected %r' % (args, out, exp)\n"
                  "\n_ft_plus()\n", NULL);
    free(inputs);
    free(ref);
    free(inputs_py);
    free(ref_py);
    free(entry_py);
    return out;
}

static int problem_line(json_t *o, int line, void *ctx, char *why, size_t whylen) {
    code_set_t *s = ctx;
    (void)line;
    const int he = json_object_get(o, "entry_point") != NULL, mb = json_object_get(o, "test_list") != NULL;
    if (he == mb)
        return snprintf(why, whylen, "neither a HumanEval line (task_id, prompt, entry_point, test) nor an MBPP line "
                        "(task_id, text, code, test_list)"), -1;
    const code_format f = he ? CODE_HUMANEVAL : CODE_MBPP;
    if (s->n == 0) {
        s->format = f;
        if (f == CODE_HUMANEVAL) set_stops(s, stops_humaneval, sizeof stops_humaneval / sizeof *stops_humaneval);
        else set_stops(s, stops_mbpp, sizeof stops_mbpp / sizeof *stops_mbpp);
    } else if (f != s->format) {
        return snprintf(why, whylen, "a %s line in a %s file", code_format_name(f), code_format_name(s->format)), -1;
    }
    char *id = task_id_text(json_object_get(o, "task_id"));
    if (!id) return snprintf(why, whylen, "\"task_id\" missing or neither a string nor an integer"), -1;
    if (code_set_find(s, id) >= 0) {
        snprintf(why, whylen, "task_id %.100s seen before", id);
        free(id);
        return -1;
    }
    if (eval_grow(&s->p, &s->cap, s->n, sizeof *s->p)) return free(id), snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    code_problem_t *p = &s->p[s->n];
    memset(p, 0, sizeof *p);
    s->n++; /* counted now: code_set_free frees a half-filled problem */
    p->task_id = id;
    if (f == CODE_HUMANEVAL) {
        const char *prompt = str_field(o, "prompt"), *test = str_field(o, "test"), *entry = str_field(o, "entry_point");
        const char *canon = str_field(o, "canonical_solution");
        json_t *base = json_object_get(o, "base_input"), *plus = json_object_get(o, "plus_input"), *atol = json_object_get(o, "atol");
        const int is_plus = json_is_array(base) || json_is_array(plus); /* then "test" is not run */
        if (!prompt || (!test && !is_plus) || !entry)
            return snprintf(why, whylen, "\"prompt\", \"test\" and \"entry_point\" must be strings"), -1;
        if (is_plus && !canon) return snprintf(why, whylen, "HumanEval+ inputs (base_input, plus_input) need a \"canonical_solution\""), -1;
        if (atol && !json_is_number(atol)) return snprintf(why, whylen, "\"atol\" must be a number"), -1;
        p->prompt = strdup(prompt);
        p->tests = is_plus ? plus_tests(prompt, canon, entry, base, plus, atol ? json_number_value(atol) : 0)
                           : cat("\n", test, "\n", "check(", entry, ")\n", NULL);
        p->canonical = canon ? strdup(canon) : NULL;
        if (!p->prompt || !p->tests || (canon && !p->canonical)) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
        return 0;
    }
    const char *text = str_field(o, "text"), *code = str_field(o, "code"), *setup = str_field(o, "test_setup_code");
    json_t *tl = json_object_get(o, "test_list");
    if (!text) return snprintf(why, whylen, "\"text\" must be a string"), -1;
    if (!json_is_array(tl) || json_array_size(tl) == 0) return snprintf(why, whylen, "\"test_list\" must be a non-empty array of strings"), -1;
    size_t total = 2;
    for (size_t i = 0; i < json_array_size(tl); i++) {
        if (!json_is_string(json_array_get(tl, i))) return snprintf(why, whylen, "test_list[%zu] is not a string", i), -1;
        total += strlen(json_string_value(json_array_get(tl, i))) + 1;
    }
    char *tests = malloc(total + (setup ? strlen(setup) + 1 : 0) + 1), *q = tests;
    if (!tests) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    *q++ = '\n';
    if (setup && *setup) q += sprintf(q, "%s\n", setup);
    for (size_t i = 0; i < json_array_size(tl); i++) q += sprintf(q, "%s\n", json_string_value(json_array_get(tl, i)));
    p->tests = tests;
    p->prompt = cat("\"\"\"\n", text, "\n", json_string_value(json_array_get(tl, 0)), "\n\"\"\"\n", NULL);
    p->canonical = code ? strdup(code) : NULL;
    if (!p->prompt || (code && !p->canonical)) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    return 0;
}

int code_set_read(code_set_t *s, const char *path, int limit, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    int rc = eval_jsonl_read(path, limit, problem_line, s, err, errlen);
    if (!rc && s->n == 0) rc = (snprintf(err, errlen, "%s: no problems", path), EVAL_EFORMAT);
    if (rc) code_set_free(s);
    return rc;
}

void code_set_free(code_set_t *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        free(s->p[i].task_id);
        free(s->p[i].prompt);
        free(s->p[i].tests);
        free(s->p[i].canonical);
    }
    free(s->p);
    for (int i = 0; i < s->nstop; i++) free(s->stop[i]);
    memset(s, 0, sizeof *s);
}

int code_set_stops(code_set_t *s, const char *json, char *err, size_t errlen) {
    json_error_t je;
    json_t *a = json_loads(json, 0, &je);
    int rc = 0;
    if (!json_is_array(a) || json_array_size(a) > CODE_MAX_STOP) {
        rc = (snprintf(err, errlen, "--stop-words must be a JSON array of at most %d strings, e.g. '[\"\\nclass\", \"\\ndef\"]'",
                       CODE_MAX_STOP), EVAL_EARG);
    } else {
        const char *v[CODE_MAX_STOP];
        for (size_t i = 0; i < json_array_size(a) && !rc; i++) {
            v[i] = json_string_value(json_array_get(a, i));
            if (!v[i] || !*v[i]) rc = (snprintf(err, errlen, "--stop-words: entry %zu is not a non-empty string", i), EVAL_EARG);
        }
        if (!rc) set_stops(s, v, (int)json_array_size(a));
    }
    json_decref(a);
    return rc;
}

int code_set_find(const code_set_t *s, const char *task_id) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->p[i].task_id, task_id)) return i;
    return -1;
}

char *code_program(const code_problem_t *p, const char *completion, int is_solution) {
    return is_solution ? cat(completion, p->tests, NULL) : cat(p->prompt, completion, p->tests, NULL);
}

size_t code_stop_cut(const char *text, char *const *stop, int nstop) {
    size_t cut = strlen(text);
    for (int i = 0; i < nstop; i++) {
        const char *f = strstr(text, stop[i]);
        if (f && (size_t)(f - text) < cut) cut = (size_t)(f - text);
    }
    return cut;
}

/* ---- given completions ---------------------------------------------------------------- */

typedef struct {
    const code_set_t *s;
    int *count;        /* samples read per problem */
    char ***text;      /* per problem, its samples (grown) */
    int **sol;
    int *cap;
} given_ctx_t;

static int given_line(json_t *o, int line, void *ctx, char *why, size_t whylen) {
    given_ctx_t *g = ctx;
    (void)line;
    char *id = task_id_text(json_object_get(o, "task_id"));
    if (!id) return snprintf(why, whylen, "\"task_id\" missing or neither a string nor an integer"), -1;
    int i = code_set_find(g->s, id);
    if (i < 0) {
        snprintf(why, whylen, "task_id %.100s is not a problem of the problem file", id);
        free(id);
        return -1;
    }
    free(id);
    const char *c = str_field(o, "completion"), *sol = str_field(o, "solution");
    if (!c && !sol) return snprintf(why, whylen, "needs a \"completion\" (or \"solution\") string"), -1;
    if (g->count[i] == g->cap[i]) {
        int nc = g->cap[i] ? 2 * g->cap[i] : 4;
        char **t = realloc(g->text[i], sizeof *t * nc);
        if (t) g->text[i] = t;
        int *s = realloc(g->sol[i], sizeof *s * nc);
        if (s) g->sol[i] = s;
        if (!t || !s) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
        g->cap[i] = nc;
    }
    if (!(g->text[i][g->count[i]] = strdup(c ? c : sol))) return snprintf(why, whylen, "out of memory"), EVAL_ENOMEM;
    g->sol[i][g->count[i]++] = c == NULL;
    return 0;
}

int code_given_read(code_given_t *out, const code_set_t *s, const char *path, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    given_ctx_t g = {s, calloc(s->n, sizeof(int)), calloc(s->n, sizeof(char **)), calloc(s->n, sizeof(int *)),
                     calloc(s->n, sizeof(int))};
    int rc = 0;
    if (!g.count || !g.text || !g.sol || !g.cap) rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
    if (!rc) rc = eval_jsonl_read(path, 0, given_line, &g, err, errlen);
    for (int i = 0; i < s->n && !rc; i++)
        if (g.count[i] == 0 || g.count[i] != g.count[0])
            rc = (snprintf(err, errlen, "%s: problem %s has %d completion(s), problem %s %d: every problem needs the same "
                           "number (at least 1)", path, s->p[i].task_id, g.count[i], s->p[0].task_id, g.count[0]), EVAL_EFORMAT);
    if (!rc) {
        out->per = g.count[0];
        out->problems = s->n;
        out->text = malloc(sizeof(char *) * (size_t)s->n * out->per);
        out->is_solution = malloc(sizeof(int) * (size_t)s->n * out->per);
        if (!out->text || !out->is_solution) rc = (snprintf(err, errlen, "out of memory"), EVAL_ENOMEM);
    }
    for (int i = 0; i < s->n && g.text; i++) {
        for (int j = 0; g.text[i] && j < g.count[i]; j++) {
            if (!rc) {
                out->text[(size_t)i * out->per + j] = g.text[i][j];
                out->is_solution[(size_t)i * out->per + j] = g.sol[i][j];
            } else {
                free(g.text[i][j]);
            }
        }
        free(g.text[i]);
        if (g.sol) free(g.sol[i]);
    }
    free(g.count);
    free(g.text);
    free(g.sol);
    free(g.cap);
    if (rc) {
        free(out->text);
        free(out->is_solution);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

void code_given_free(code_given_t *g) {
    if (!g) return;
    for (int i = 0; g->text && i < g->problems * g->per; i++) free(g->text[i]);
    free(g->text);
    free(g->is_solution);
    memset(g, 0, sizeof *g);
}
