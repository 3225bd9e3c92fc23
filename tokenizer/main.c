/* bin/tokenizer: byte-level BPE tokenizer: train, encode into a dataset, decode, inspect.
 * Parses flags and calls the library (bpe*.h, encode_files.h, dataset.h); every failure is
 * one line "tokenizer: ..." on stderr and a non-zero exit (2 for usage errors). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/flags.h"
#include "common/progress.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_io.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/dataset.h"
#include "tokenizer/docread.h"
#include "tokenizer/encode_files.h"
#include "tokenizer/pyfuncs.h"
#include "tokenizer/synth.h"

#define NFLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define VOCAB_NAMES "gpt2, r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base"
#define VOCAB_HELP "bytes, a vocabulary file, or " VOCAB_NAMES
enum { MAX_INPUTS = 1024 };

static void usage_main(FILE *f) {
    fprintf(f,
            "usage: tokenizer COMMAND [flags] ...\n"
            "  train   --vocab-size N --out FILE [--pattern gpt2|cl100k|o200k|none] [--format text|jsonl]\n"
            "          INPUT...\n"
            "  encode  --vocab V --out DATASET_DIR [--format text|jsonl] [--append-eot] [--allow-special]\n"
            "          [--overwrite] INPUT...|-\n"
            "  decode  --vocab V [--dataset DIR --doc N]   (ids on stdin otherwise)\n"
            "  ids     --vocab V [--repeat R] [--docs text|jsonl] [--out FILE] [--allow-special] INPUT\n"
            "          (text -> ids, timed)\n"
            "  synth   --n N --seed S [--start I]\n"
            "  pyfuncs --n N --seed S [--split train|test] [--format text|humaneval] [--start I]\n"
            "  judge   < lines 'L>' + 64 characters: the Figure-4 validity rule, as JSON lines\n"
            "  info    DATASET_DIR\n"
            "V is bytes, a vocabulary file, or one of tiktoken's encodings, which give exactly\n"
            "tiktoken's ids: " VOCAB_NAMES ". Those are read from\n"
            "$FT_TIKTOKEN_DIR, PREFIX/share/freetf/tiktoken next to an installed program, or\n"
            "data/tiktoken/encoders of the checkout (`make data`).\n"
            "Text inputs hold a document per line; empty lines are skipped and not numbered, so\n"
            "document k is line k+1 only in a file without them (encode reports how many).\n"
            "`tokenizer COMMAND --help` describes each command.\n");
}

/* Parses flags for a subcommand; returns -1 to continue, else the exit code. */
static int parse(const char *cmd, const char *synopsis, int argc, char **argv, flag_t *fl, int nfl,
                 const char **pos, int *npos, int pos_cap) {
    char err[256];
    int rc = flags_parse(argc, argv, 2, fl, nfl, pos, npos, pos_cap, err, sizeof err);
    if (rc == 1) {
        printf("usage: tokenizer %s %s\n", cmd, synopsis);
        flags_usage(stdout, fl, nfl);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "tokenizer %s: %s\n", cmd, err);
        return 2;
    }
    return -1;
}

static int cmd_train(int argc, char **argv) {
    int vocab_size = 0, jsonl = 0;
    const char *out = NULL, *pattern = "gpt2", *format = "text";
    flag_t fl[] = {
        {"vocab-size", FLAG_INT, &vocab_size, "tokens in the vocabulary, <|endoftext|> included", 257, 1 << 24, 0},
        {"out", FLAG_STR, &out, "vocabulary file to write (atomically)", 0, 0, 0},
        {"pattern", FLAG_STR, &pattern, "pre-tokenizer: tiktoken's gpt2, cl100k or o200k pattern, or none", 0, 0, 0},
        {"format", FLAG_STR, &format, "input format: text (a document per line, empty lines skipped) or jsonl", 0, 0, 0},
    };
    const char *pos[MAX_INPUTS];
    int npos = 0;
    int rc = parse("train", "--vocab-size N --out FILE [flags] INPUT...", argc, argv, fl, NFLAGS(fl), pos, &npos, MAX_INPUTS);
    if (rc >= 0) return rc;
    if (!fl[0].seen || !out || npos == 0) {
        fprintf(stderr, "tokenizer train: needs --vocab-size, --out and at least one INPUT (see --help)\n");
        return 2;
    }
    if ((jsonl = docread_format_parse(format)) < 0) {
        fprintf(stderr, "tokenizer train: --format: '%s' is not text or jsonl\n", format);
        return 2;
    }
    char err[512];
    bpe_trainer_t *t = NULL;
    bpe_vocab_t *v = NULL;
    docread_t *r = NULL;
    if (bpe_trainer_new(&t, pattern, err, sizeof err) < 0) goto fail;
    double t0 = progress_now();
    uint64_t total = 0, done = 0;
    for (int i = 0; i < npos; i++) { /* sizes for the progress line; also fails early on a bad path */
        if (docread_open(&r, pos[i], (docread_format_t)jsonl, err, sizeof err) < 0) goto fail;
        total += docread_size(r);
        docread_close(&r);
    }
    progress_t pr;
    progress_init(&pr, "count", "B", total);
    for (int i = 0; i < npos; i++) {
        if (docread_open(&r, pos[i], (docread_format_t)jsonl, err, sizeof err) < 0) goto fail;
        const char *text;
        size_t len;
        while ((rc = docread_next(r, &text, &len, err, sizeof err)) > 0) {
            if (bpe_trainer_add(t, (const uint8_t *)text, len, err, sizeof err) < 0) goto fail;
            progress_update(&pr, done + docread_offset(r));
        }
        if (rc < 0) goto fail;
        done += docread_offset(r);
        docread_close(&r);
    }
    progress_finish(&pr, done);
    double t1 = progress_now();
    if (bpe_trainer_run(t, (uint32_t)vocab_size, 1, &v, err, sizeof err) < 0) goto fail;
    if (bpe_vocab_save_file(v, out, err, sizeof err) < 0) goto fail;
    fprintf(stderr, "tokenizer train: %llu distinct pieces (%.1fs), %u tokens (%.1fs) -> %s\n",
            (unsigned long long)bpe_trainer_n_pieces(t), t1 - t0, bpe_vocab_size(v), progress_now() - t1, out);
    bpe_vocab_free(&v);
    bpe_trainer_free(&t);
    return 0;
fail:
    fprintf(stderr, "tokenizer train: %s\n", err);
    docread_close(&r);
    bpe_vocab_free(&v);
    bpe_trainer_free(&t);
    return 1;
}

/* One stderr line when blank lines were skipped: document numbers are then not line numbers. */
static void report_blank(uint64_t n) {
    if (n)
        fprintf(stderr, "tokenizer: skipped %llu blank line%s (not documents: document numbers skip them)\n",
                (unsigned long long)n, n == 1 ? "" : "s");
}

static int cmd_encode(int argc, char **argv) {
    const char *vocab = NULL, *out = NULL, *format = "text";
    int append_eot = 0, allow_special = 0, overwrite = 0;
    flag_t fl[] = {
        {"vocab", FLAG_STR, &vocab, VOCAB_HELP, 0, 0, 0},
        {"out", FLAG_STR, &out, "dataset directory to create", 0, 0, 0},
        {"format", FLAG_STR, &format,
         "text (a document per line; empty lines are skipped, not numbered, and counted on stderr) or jsonl "
         "(\"text\" field; blank lines likewise)", 0, 0, 0},
        {"append-eot", FLAG_BOOL, &append_eot, "end each document with <|endoftext|>", 0, 0, 0},
        {"allow-special", FLAG_BOOL, &allow_special, "special-token text in documents becomes the special token", 0, 0, 0},
        {"overwrite", FLAG_BOOL, &overwrite, "replace an existing dataset", 0, 0, 0},
    };
    const char *pos[MAX_INPUTS];
    int npos = 0;
    int rc = parse("encode", "--vocab V --out DIR [flags] INPUT...|-", argc, argv, fl, NFLAGS(fl), pos, &npos, MAX_INPUTS);
    if (rc >= 0) return rc;
    if (!vocab || !out || npos == 0) {
        fprintf(stderr, "tokenizer encode: needs --vocab, --out and at least one INPUT (see --help)\n");
        return 2;
    }
    int fmt = docread_format_parse(format);
    if (fmt < 0) {
        fprintf(stderr, "tokenizer encode: --format: '%s' is not text or jsonl\n", format);
        return 2;
    }
    encode_files_opts_t o = {vocab, (docread_format_t)fmt, append_eot, allow_special, overwrite, 1};
    encode_files_stats_t st;
    char err[512];
    if (encode_files(out, pos, npos, &o, &st, err, sizeof err) < 0) {
        fprintf(stderr, "tokenizer: %s\n", err);
        return 1;
    }
    fprintf(stderr, "tokenizer encode: %llu docs, %llu tokens, %llu bytes (%.2f bytes/token) in %.1fs -> %s\n",
            (unsigned long long)st.n_docs, (unsigned long long)st.n_tokens, (unsigned long long)st.n_bytes,
            st.n_tokens ? (double)st.n_bytes / st.n_tokens : 0.0, st.seconds, out);
    report_blank(st.n_blank);
    return 0;
}

/* Reads whitespace-separated decimal ids from f: digits only (fscanf's %llu would take "-1" for
 * 2^64 - 1 and report that number). */
static int read_ids(FILE *f, bpe_ids_t *ids, char *err, size_t errlen) {
    char word[32];
    int r;
    while ((r = fscanf(f, "%31s", word)) == 1) {
        size_t digits = strspn(word, "0123456789");
        errno = 0;
        unsigned long long x = digits && !word[digits] ? strtoull(word, NULL, 10) : 0;
        if (!digits || word[digits] || errno || x >= BPE_NO_RANK) {
            snprintf(err, errlen, "stdin: '%s' after %zu ids is not a token id (a decimal number)", word, ids->n);
            return -1;
        }
        if (bpe_ids_push(ids, (uint32_t)x) < 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    if (r != EOF || ferror(f)) {
        snprintf(err, errlen, "stdin: expected decimal token ids after %zu ids", ids->n);
        return -1;
    }
    return 0;
}

static int cmd_decode(int argc, char **argv) {
    const char *vocab = NULL, *dataset = NULL;
    long long doc = -1;
    flag_t fl[] = {
        {"vocab", FLAG_STR, &vocab, VOCAB_HELP, 0, 0, 0},
        {"dataset", FLAG_STR, &dataset, "read the ids of --doc from this dataset (else stdin)", 0, 0, 0},
        {"doc", FLAG_I64, &doc, "document index in --dataset", 0, 1e18, 0},
    };
    int rc = parse("decode", "--vocab V [--dataset DIR --doc N]", argc, argv, fl, NFLAGS(fl), NULL, NULL, 0);
    if (rc >= 0) return rc;
    if (!vocab || (!dataset) != (doc < 0)) {
        fprintf(stderr, "tokenizer decode: needs --vocab, and --dataset with --doc or neither (see --help)\n");
        return 2;
    }
    char err[512] = "";
    bpe_vocab_t *v = NULL;
    dataset_t *ds = NULL;
    bpe_ids_t ids = {0};
    bpe_bytes_t out = {0};
    rc = 1;
    if (bpe_vocab_open(&v, vocab, err, sizeof err) < 0) goto done;
    if (dataset) {
        if (dataset_open(&ds, dataset, err, sizeof err) < 0) goto done;
        uint32_t len;
        int s = dataset_doc_len(ds, (uint64_t)doc, &len);
        if (s < 0) {
            snprintf(err, sizeof err, "%s: document %lld: %s", dataset, doc, dataset_doc_error(ds, s));
            goto done;
        }
        ids.v = malloc((len + 1) * sizeof *ids.v);
        ids.cap = len + 1;
        if (!ids.v || dataset_doc_read(ds, (uint64_t)doc, ids.v, len, &len) < 0) {
            snprintf(err, sizeof err, "%s: document %lld: read failed", dataset, doc);
            goto done;
        }
        ids.n = len;
        char h[33];
        bpe_vocab_hash(v, h);
        if (strcmp(h, dataset_meta(ds)->tokenizer_hash) != 0) {
            snprintf(err, sizeof err, "%s: encoded with %s (hash %s), not with %s", dataset,
                     dataset_meta(ds)->tokenizer, dataset_meta(ds)->tokenizer_hash, vocab);
            goto done;
        }
    } else if (read_ids(stdin, &ids, err, sizeof err) < 0) {
        goto done;
    }
    size_t bad = 0;
    if (bpe_decode(v, ids.v, ids.n, &out, &bad) < 0) {
        snprintf(err, sizeof err, "id %u (position %zu) is not in vocabulary %s", ids.v[bad], bad, vocab);
        goto done;
    }
    if (fwrite(out.v, 1, out.n, stdout) != out.n || fflush(stdout) != 0) {
        snprintf(err, sizeof err, "stdout: %s", strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "tokenizer decode: %s\n", err);
    bpe_bytes_free(&out);
    bpe_ids_free(&ids);
    dataset_close(&ds);
    bpe_vocab_free(&v);
    return rc;
}

/* Reads a whole file (the ids command times encoding alone, so the text sits in memory). */
static int slurp(const char *path, bpe_bytes_t *buf, char *err, size_t errlen) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (bpe_bytes_append(buf, chunk, n) < 0) {
            snprintf(err, errlen, "out of memory");
            break;
        }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) snprintf(err, errlen, "%s: read error", path);
    return bad ? -1 : 0;
}

/* Writes ids space-separated and a newline; 0, or -1 on a write error. */
static int write_ids(FILE *f, const bpe_ids_t *ids) {
    for (size_t i = 0; i < ids->n; i++) fprintf(f, i ? " %u" : "%u", ids->v[i]);
    return fputc('\n', f) == EOF || ferror(f) ? -1 : 0;
}

/* ids --docs: each document of INPUT encoded on its own, one line of ids per document. */
static int ids_per_doc(bpe_t *b, const char *path, docread_format_t fmt, int flags, FILE *f, char *err,
                       size_t errlen) {
    docread_t *r = NULL;
    bpe_ids_t ids = {0};
    const char *text;
    size_t len, n_docs = 0;
    int rc = docread_open(&r, path, fmt, err, errlen);
    while (rc == 0 && (rc = docread_next(r, &text, &len, err, errlen)) > 0) {
        ids.n = 0;
        int s = bpe_encode(b, (const uint8_t *)text, len, flags, &ids);
        if (s < 0) {
            rc = s;
            snprintf(err, errlen, "%s: document %zu: encoding failed: %s", path, n_docs, bpe_strerror(s));
        } else if (f && write_ids(f, &ids) < 0) {
            rc = BPE_EIO;
            snprintf(err, errlen, "writing the ids of document %zu failed: %s", n_docs, strerror(errno));
        } else {
            rc = 0;
        }
        n_docs++;
    }
    if (r) report_blank(docread_skipped(r));
    docread_close(&r);
    bpe_ids_free(&ids);
    return rc;
}

static int cmd_ids(int argc, char **argv) {
    const char *vocab = NULL, *out = NULL, *docs = NULL;
    int repeat = 1, allow_special = 0;
    flag_t fl[] = {
        {"vocab", FLAG_STR, &vocab, VOCAB_HELP, 0, 0, 0},
        {"repeat", FLAG_INT, &repeat, "encode this many times; the median time is reported", 1, 100, 0},
        {"out", FLAG_STR, &out, "write the ids here, space-separated (default: stdout; '' for none)", 0, 0, 0},
        {"allow-special", FLAG_BOOL, &allow_special, "special-token text becomes the special token", 0, 0, 0},
        {"docs", FLAG_STR, &docs,
         "text or jsonl: read INPUT as documents (as encode does) and write one line of ids per document", 0, 0, 0},
    };
    const char *pos[1];
    int npos = 0;
    int rc = parse("ids", "--vocab V [flags] INPUT|-", argc, argv, fl, NFLAGS(fl), pos, &npos, 1);
    if (rc >= 0) return rc;
    if (!vocab || npos != 1) {
        fprintf(stderr, "tokenizer ids: needs --vocab and one INPUT (see --help)\n");
        return 2;
    }
    int fmt = docs ? docread_format_parse(docs) : 0;
    if (fmt < 0 || (docs && repeat != 1)) {
        fprintf(stderr, "tokenizer ids: --docs takes text or jsonl, and no --repeat\n");
        return 2;
    }
    int flags = allow_special ? BPE_ALLOW_SPECIAL : 0;
    char err[512] = "";
    bpe_vocab_t *v = NULL;
    bpe_t *b = NULL;
    bpe_bytes_t text = {0};
    bpe_ids_t ids = {0};
    double times[100];
    FILE *f = NULL;
    rc = 1;
    if (bpe_vocab_open(&v, vocab, err, sizeof err) < 0 || bpe_new(&b, v, err, sizeof err) < 0) goto done;
    f = out ? (*out ? fopen(out, "w") : NULL) : stdout;
    if (out && *out && !f) {
        snprintf(err, sizeof err, "%s: %s", out, strerror(errno));
        goto done;
    }
    if (docs) {
        if (ids_per_doc(b, pos[0], (docread_format_t)fmt, flags, f, err, sizeof err) < 0) goto done;
    } else {
        if (slurp(pos[0], &text, err, sizeof err) < 0) goto done;
        for (int r = 0; r < repeat; r++) {
            /* a fresh encoder each time, so the piece cache starts cold as in a single run */
            bpe_free(&b);
            if (bpe_new(&b, v, err, sizeof err) < 0) goto done;
            ids.n = 0;
            double t0 = progress_now();
            int s = bpe_encode(b, text.v, text.n, flags, &ids);
            times[r] = progress_now() - t0;
            if (s < 0) {
                snprintf(err, sizeof err, "%s: encoding failed: %s", pos[0], bpe_strerror(s));
                goto done;
            }
        }
        for (int i = 1; i < repeat; i++) /* insertion sort for the median */
            for (int j = i; j > 0 && times[j] < times[j - 1]; j--) {
                double x = times[j];
                times[j] = times[j - 1];
                times[j - 1] = x;
            }
        double med = times[repeat / 2];
        fprintf(stderr, "tokenizer ids: %zu bytes -> %zu tokens, median %.4fs of %d, %.2f MB/s\n", text.n, ids.n, med,
                repeat, med > 0 ? text.n / med / 1e6 : 0.0);
        if (f && write_ids(f, &ids) < 0) {
            snprintf(err, sizeof err, "%s: write failed", out ? out : "stdout");
            goto done;
        }
    }
    if (f && fflush(f) != 0) {
        snprintf(err, sizeof err, "%s: write failed", out ? out : "stdout");
        goto done;
    }
    rc = 0;
done:
    if (f && f != stdout && fclose(f) != 0 && rc == 0) {
        snprintf(err, sizeof err, "%s: write failed", out);
        rc = 1;
    }
    if (rc) fprintf(stderr, "tokenizer ids: %s\n", err);
    bpe_ids_free(&ids);
    bpe_bytes_free(&text);
    bpe_free(&b);
    bpe_vocab_free(&v);
    return rc;
}

static int cmd_synth(int argc, char **argv) {
    long long n = -1, seed = -1, start = 0;
    flag_t fl[] = {
        {"n", FLAG_I64, &n, "number of lines", 0, 1e15, 0},
        {"seed", FLAG_I64, &seed, "seed", 0, 9.2e18, 0},
        {"start", FLAG_I64, &start, "index of the first line", 0, 9.2e18, 0},
    };
    int rc = parse("synth", "--n N --seed S [--start I]", argc, argv, fl, NFLAGS(fl), NULL, NULL, 0);
    if (rc >= 0) return rc;
    if (!fl[0].seen || !fl[1].seen) {
        fprintf(stderr, "tokenizer synth: needs --n and --seed (see --help)\n");
        return 2;
    }
    char line[SYNTH_LINE_LEN + 1];
    for (long long i = 0; i < n; i++) {
        synth_sequence((uint64_t)seed, (uint64_t)(start + i), line, NULL);
        if (puts(line) < 0) {
            fprintf(stderr, "tokenizer synth: stdout: %s\n", strerror(errno));
            return 1;
        }
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

/* The toy language of small Python functions (tokenizer/pyfuncs.h): training documents as
 * JSONL {"text"} (for `encode --format jsonl`: a document spans several lines), or problems
 * in HumanEval's format for `evaluator --task code`. */
static int cmd_pyfuncs(int argc, char **argv) {
    long long n = -1, seed = -1, start = 0;
    const char *split = "train", *format = "text";
    flag_t fl[] = {
        {"n", FLAG_I64, &n, "number of documents or problems", 0, 1e15, 0},
        {"seed", FLAG_I64, &seed, "seed", 0, 9.2e18, 0},
        {"split", FLAG_STR, &split, "train or test: combinations of the other split never appear", 0, 0, 0},
        {"format", FLAG_STR, &format, "text (JSONL {\"text\": prompt + solution}) or humaneval (problems)", 0, 0, 0},
        {"start", FLAG_I64, &start, "index of the first one", 0, 9.2e18, 0},
    };
    int rc = parse("pyfuncs", "--n N --seed S [--split train|test] [--format text|humaneval] [--start I]", argc, argv, fl,
                   NFLAGS(fl), NULL, NULL, 0);
    if (rc >= 0) return rc;
    if (!fl[0].seen || !fl[1].seen) {
        fprintf(stderr, "tokenizer pyfuncs: needs --n and --seed (see --help)\n");
        return 2;
    }
    const int sp = !strcmp(split, "test") ? PYFUNCS_TEST : !strcmp(split, "train") ? PYFUNCS_TRAIN : -1;
    const int he = !strcmp(format, "humaneval");
    if (sp < 0 || (!he && strcmp(format, "text"))) {
        fprintf(stderr, "tokenizer pyfuncs: --split is train or test, --format text or humaneval\n");
        return 2;
    }
    for (long long i = 0; i < n; i++) {
        pyfunc_t p;
        pyfuncs_problem((uint64_t)seed, (uint64_t)(start + i), sp, &p);
        char doc[sizeof p.prompt + sizeof p.solution];
        snprintf(doc, sizeof doc, "%s%s", p.prompt, p.solution);
        json_t *o = he ? json_pack("{s:s, s:s, s:s, s:s, s:s}", "task_id", p.task_id, "prompt", p.prompt, "entry_point",
                                   p.entry, "canonical_solution", p.solution, "test", p.test)
                       : json_pack("{s:s}", "text", doc);
        char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        int bad = !line || puts(line) < 0;
        free(line);
        if (bad) {
            fprintf(stderr, "tokenizer pyfuncs: stdout: %s\n", strerror(errno));
            return 1;
        }
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

/* Judges lines "L>" + 64 generated characters by the Figure-4 rule (synth_judge): one JSON
 * line out per line in, {"letter","valid","start"} (start is null when invalid). A line whose
 * body is not exactly 64 characters, or whose prompt is not a capital and '>', is invalid. */
static int cmd_judge(int argc, char **argv) {
    flag_t fl[] = {{"help-only", FLAG_BOOL, NULL, "(no flags: lines on stdin)", 0, 0, 0}};
    int rc = parse("judge", "< lines of 'L>' + 64 generated characters", argc, argv, fl, 0, NULL, NULL, 0);
    if (rc >= 0) return rc;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        char letter = n >= SYNTH_PROMPT_LEN ? line[0] : '?';
        int start = -1, valid = n == SYNTH_LINE_LEN && letter >= 'A' && letter <= 'Z' && line[1] == '>' &&
                                synth_judge(letter, line + SYNTH_PROMPT_LEN, SYNTH_BODY_LEN, &start);
        if (valid) printf("{\"letter\":\"%c\",\"valid\":true,\"start\":%d}\n", letter, start);
        else if (letter >= 'A' && letter <= 'Z') printf("{\"letter\":\"%c\",\"valid\":false,\"start\":null}\n", letter);
        else printf("{\"letter\":null,\"valid\":false,\"start\":null}\n");
    }
    free(line);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int cmd_info(int argc, char **argv) {
    flag_t fl[] = {{"help-only", FLAG_BOOL, NULL, "(no flags)", 0, 0, 0}};
    const char *pos[1];
    int npos = 0;
    int rc = parse("info", "DATASET_DIR", argc, argv, fl, 0, pos, &npos, 1);
    if (rc >= 0) return rc;
    if (npos != 1) {
        fprintf(stderr, "tokenizer info: needs one DATASET_DIR\n");
        return 2;
    }
    char err[512];
    dataset_t *ds = NULL;
    if (dataset_open(&ds, pos[0], err, sizeof err) < 0) {
        fprintf(stderr, "tokenizer info: %s\n", err);
        return 1;
    }
    const dataset_meta_t *m = dataset_meta(ds);
    json_t *j = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:s}", "version", (json_int_t)m->version,
                          "vocab_size", (json_int_t)m->vocab_size, "eot_id", (json_int_t)m->eot_id, "token_bytes",
                          (json_int_t)m->token_bytes, "n_docs", (json_int_t)m->n_docs, "n_tokens",
                          (json_int_t)m->n_tokens, "n_bytes", (json_int_t)m->n_bytes, "tokenizer", m->tokenizer,
                          "tokenizer_hash", m->tokenizer_hash, "source", m->source);
    char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    if (s) puts(s);
    free(s);
    json_decref(j);
    dataset_close(&ds);
    return s ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage_main(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *c = argv[1];
    if (!strcmp(c, "train")) return cmd_train(argc, argv);
    if (!strcmp(c, "encode")) return cmd_encode(argc, argv);
    if (!strcmp(c, "decode")) return cmd_decode(argc, argv);
    if (!strcmp(c, "ids")) return cmd_ids(argc, argv);
    if (!strcmp(c, "synth")) return cmd_synth(argc, argv);
    if (!strcmp(c, "pyfuncs")) return cmd_pyfuncs(argc, argv);
    if (!strcmp(c, "info")) return cmd_info(argc, argv);
    if (!strcmp(c, "judge")) return cmd_judge(argc, argv);
    fprintf(stderr, "tokenizer: unknown command '%s' (see tokenizer --help)\n", c);
    return 2;
}
