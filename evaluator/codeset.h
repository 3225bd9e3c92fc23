/* evaluator/codeset.h: code-generation problems in their published formats, the programs that
 * test a completion, and completions given in a file (docs/evaluator.md, "code").
 *
 * One JSON object per line, the format recognised from the fields of each line (a file holds
 * one format):
 *   HumanEval, HumanEval+ (openai/human-eval, evalplus): task_id, prompt, entry_point, test,
 *     canonical_solution. The model continues `prompt`; the program is, as human-eval's
 *     execution.py builds it, prompt + completion + "\n" + test + "\n" + "check(<entry_point>)".
 *     A HumanEval+ line (evalplus: base_input and/or plus_input, atol) is tested as evalplus
 *     tests it, every input against the canonical solution's output (floats within atol).
 *     Stop sequences: Chen et al. (2021)'s "\nclass", "\ndef", "\n#", "\nif", "\nprint".
 *   MBPP (google-research mbpp, as on the Hugging Face hub): task_id, text, code, test_list
 *     [, test_setup_code]. The prompt is bigcode-evaluation-harness's (InCoder style): a
 *     docstring holding the description and the first test,
 *         '"""\n' + text + "\n" + test_list[0] + '\n"""\n'
 *     and the program prompt + completion + "\n" + test_setup_code (when not empty; bigcode
 *     leaves it out, it is empty in all but a few problems) + the tests, one per line.
 *     Stop sequences (bigcode's): "\nclass", "\nassert", '\n"""', "\nprint", "\nif", "\n<|/",
 *     "\n```".
 * task_id may be a string or an integer (MBPP's); it is kept as text. */
#ifndef EVALUATOR_CODESET_H
#define EVALUATOR_CODESET_H
#include <stddef.h>

typedef enum { CODE_HUMANEVAL = 0, CODE_MBPP = 1 } code_format;

typedef struct {
    char *task_id;
    char *prompt;      /* what the model continues */
    char *tests;       /* what follows prompt + completion in the program */
    char *canonical;   /* the reference solution as a completion (MBPP's code), may be NULL */
} code_problem_t;

#define CODE_MAX_STOP 16

typedef struct {
    code_format format;
    code_problem_t *p;
    int n, cap;
    char *stop[CODE_MAX_STOP]; /* the format's stop sequences (or the caller's) */
    int nstop;
} code_set_t;

/* Reads path (limit > 0: its first `limit` problems). A line of neither format, of the other
 * format than the first, or a task_id seen before: EVAL_EFORMAT with "<path>:<line>: why". */
int code_set_read(code_set_t *s, const char *path, int limit, char *err, size_t errlen);
void code_set_free(code_set_t *s);
const char *code_format_name(code_format f); /* "humaneval", "mbpp" */
/* Replaces the stop sequences with those of a JSON array of strings, e.g. ["\nclass", "\ndef"]
 * ("[]": none). EVAL_EARG with a line when it is not one. */
int code_set_stops(code_set_t *s, const char *json, char *err, size_t errlen);
/* Index of task_id, or -1. */
int code_set_find(const code_set_t *s, const char *task_id);

/* The program testing a completion of p (malloc'd; NULL on out-of-memory). A "solution" (a
 * whole program replacing prompt + completion, evalplus's samples field) when is_solution. */
char *code_program(const code_problem_t *p, const char *completion, int is_solution);
/* Length of text before the first of the stop sequences (strlen when none occurs). */
size_t code_stop_cut(const char *text, char *const *stop, int nstop);

/* Completions given in a file: lines {"task_id", "completion"} (human-eval's samples.jsonl) or
 * {"task_id", "solution"}; the lines of one problem are its samples, in file order. */
typedef struct {
    char **text;       /* (problems * per) row-major; a problem's j-th sample */
    int *is_solution;
    int per;           /* samples per problem: every problem must have the same number */
    int problems;
} code_given_t;

/* Reads path for the problems of s: every problem needs the same number of samples (pass@k
 * averages over problems with one n), a task_id not in s is an error. */
int code_given_read(code_given_t *g, const code_set_t *s, const char *path, char *err, size_t errlen);
void code_given_free(code_given_t *g);
#endif
