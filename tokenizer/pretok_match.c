/* tokenizer/pretok_match.c: one hand-written matcher per tiktoken pattern (see pretok.h).
 *
 * Each returns the end of the match that a backtracking regex engine finds at pos: the
 * alternatives are tried in the pattern's order, an optional or repeated item first tries to
 * take as much as it can and gives back one character at a time, and the first way that
 * succeeds is the match. Each block below is commented with the part of the pattern it
 * decides, and with how the backtracking resolves. Classes: pretok_class.h. */
#include "tokenizer/pretok.h"
#include "tokenizer/pretok_class.h"

/* A valid character that is not white space, a letter or a number: [^\s\p{L}\p{N}] */
static inline int is_other(unsigned c) { return !(c & PT_NOT_OTHER); }
static inline int is_rn(uint8_t b) { return b == '\r' || b == '\n'; }
/* [^\r\n\p{L}\p{N}] at t[i], of class c: a valid character, neither a letter, a number, \r nor \n */
static inline int is_prefix(unsigned c, uint8_t b) { return !(c & (UCD_L | UCD_N | PT_END)) && !is_rn(b); }

/* 's|'t|'re|'ve|'m|'ll|'d at pos, where t[pos] is the apostrophe: the end, or 0 when none
 * matches. nocase: (?i:...), which compares simple case foldings (U+017F LONG S is 's'). */
static size_t contraction(const uint8_t *t, size_t len, size_t pos, int nocase) {
    size_t i = pos + 1, n = 0;
    int a = 0, b = 0;
    uint32_t cp;
    if (i < len && (n = pt_utf8_decode(t + i, len - i, &cp)) != 0) {
        a = nocase ? ucd_fold_ascii(cp) : (int)cp;
        i += n;
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i;
    if (a != 'r' && a != 'v' && a != 'l') return 0;
    if (i < len && (n = pt_utf8_decode(t + i, len - i, &cp)) != 0) b = nocase ? ucd_fold_ascii(cp) : (int)cp;
    if (b == (a == 'l' ? 'l' : 'e')) return i + n;
    return 0;
}

/* The white-space alternatives every pattern ends with, at pos (a white-space character):
 *   with_newline: \s*[\r\n]+   \s* takes the whole run, then gives back until [\r\n]+ can
 *                              start: the match ends after the run's last \r or \n.
 *   \s+(?!\S)   the whole run when nothing follows it; otherwise the run less its last
 *               character, which must then be white space (so the run needs two or more).
 *   \s+         the one character left: the whole run. */
static size_t white_space(const uint8_t *t, size_t len, size_t pos, int with_newline) {
    size_t i = pos, n, last = pos, after_rn = 0, nchars = 0;
    unsigned c;
    while ((c = pt_class_at(t, len, i, &n)) & UCD_WS) {
        if (is_rn(t[i])) after_rn = n;
        last = i;
        nchars++;
        i = n;
    }
    if (with_newline && after_rn) return after_rn;
    if (pt_class_at(t, len, i, &n) == PT_END) return i;
    return nchars >= 2 ? last : i;
}

/* For " ?X": the class of the character that X must match and the position after it. The
 * optional space is tried first; when t[pos] is a space, X without it would have to match
 * that space, which no caller's X does, so only the character after the space counts. */
static inline unsigned after_space(const uint8_t *t, size_t len, size_t pos, unsigned c, size_t q, size_t *r) {
    if (t[pos] != ' ') {
        *r = q;
        return c;
    }
    return pt_class_at(t, len, q, r);
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
size_t pretok_match_gpt2(const uint8_t *t, size_t len, size_t pos) {
    size_t q = pos, r = pos, e;
    unsigned c = pt_class_at(t, len, pos, &q);
    if (t[pos] == '\'' && (e = contraction(t, len, pos, 0)) != 0) return e;
    unsigned d = after_space(t, len, pos, c, q, &r);
    if (d & UCD_L) return pt_run_in(t, len, r, UCD_L);
    if (d & UCD_N) return pt_run_in(t, len, r, UCD_N);
    if (is_other(d)) return pt_run_out(t, len, r, PT_NOT_OTHER);
    return white_space(t, len, pos, 0); /* t[pos] is white space */
}

/* " ?[^\s\p{L}\p{N}]+" followed by a run of characters from `tail` ("\r\n" or "\r\n/"), or 0
 * when t[pos] cannot start it. */
static size_t other_run(const uint8_t *t, size_t len, size_t pos, unsigned c, size_t q, int slash) {
    size_t r;
    if (!is_other(after_space(t, len, pos, c, q, &r))) return 0;
    size_t e = pt_run_out(t, len, r, PT_NOT_OTHER);
    while (e < len && (is_rn(t[e]) || (slash && t[e] == '/'))) e++;
    return e;
}

/* \p{N}{1,3} at pos (a number) */
static size_t digits3(const uint8_t *t, size_t len, size_t q) {
    size_t n;
    for (int k = 1; k < 3 && (pt_class_at(t, len, q, &n) & UCD_N); k++) q = n;
    return q;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
size_t pretok_match_cl100k(const uint8_t *t, size_t len, size_t pos) {
    size_t q = pos, r = pos, e;
    /* the commonest piece in prose, " word", decided before anything else (see below) */
    if (t[pos] == ' ' && pos + 1 < len && t[pos + 1] < 0x80 && (ucd_ascii[t[pos + 1]] & UCD_L))
        return pt_run_in(t, len, pos + 2, UCD_L);
    unsigned c = pt_class_at(t, len, pos, &q);
    if (t[pos] == '\'' && (e = contraction(t, len, pos, 1)) != 0) return e;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ : with the prefix character first, then without (a letter) */
    if (is_prefix(c, t[pos]) && (pt_class_at(t, len, q, &r) & UCD_L)) return pt_run_in(t, len, r, UCD_L);
    if (c & UCD_L) return pt_run_in(t, len, q, UCD_L);
    if (c & UCD_N) return digits3(t, len, q);
    if ((e = other_run(t, len, pos, c, q, 0)) != 0) return e;
    return white_space(t, len, pos, 1);
}

/* o200k's letter classes: U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
#define O200K_U (UCD_LU | UCD_LT | UCD_LM | UCD_LO | UCD_M)
#define O200K_W (UCD_LL | UCD_LM | UCD_LO | UCD_M)

/* U*W+ from s, or 0. U* first takes the whole U run; W+ then needs a W right after it (an
 * Ll, the only W that is not U) and takes the W run from there. Otherwise U* gives back one
 * character at a time until W+ can start on the last one given back, which must be in both
 * classes (Lm, Lo, M); W+ then takes just that one, since what follows it is not W. */
static size_t upper_lower(const uint8_t *t, size_t len, size_t s) {
    size_t i = s, n, last_w_end = 0;
    unsigned c;
    while ((c = pt_class_at(t, len, i, &n)) & O200K_U) {
        if (c & O200K_W) last_w_end = n;
        i = n;
    }
    if (c & O200K_W) return pt_run_in(t, len, i, O200K_W);
    return last_w_end;
}

/* U+W* from s, or 0 (W* never fails, so U+ never gives back). */
static size_t upper_then_lower(const uint8_t *t, size_t len, size_t s) {
    size_t n;
    if (!(pt_class_at(t, len, s, &n) & O200K_U)) return 0;
    return pt_run_in(t, len, pt_run_in(t, len, n, O200K_U), O200K_W);
}

/* [^\r\n\p{L}\p{N}]?U*W+(?i:'s|...|'d)?|[^\r\n\p{L}\p{N}]?U+W*(?i:'s|...|'d)?|\p{N}{1,3}|
 * ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Marks are prefix characters (not \p{L}) and U and W characters at once: a mark is first
 * tried as the prefix, then as the start of the letters. */
size_t pretok_match_o200k(const uint8_t *t, size_t len, size_t pos) {
    size_t q = pos, e = 0;
    unsigned c = pt_class_at(t, len, pos, &q);
    int prefix = is_prefix(c, t[pos]);
    if ((prefix && (e = upper_lower(t, len, q)) != 0) || (e = upper_lower(t, len, pos)) != 0 ||
        (prefix && (e = upper_then_lower(t, len, q)) != 0) || (e = upper_then_lower(t, len, pos)) != 0) {
        size_t k;
        if (e < len && t[e] == '\'' && (k = contraction(t, len, e, 1)) != 0) e = k; /* the optional suffix */
        return e;
    }
    if (c & UCD_N) return digits3(t, len, q);
    if ((e = other_run(t, len, pos, c, q, 1)) != 0) return e;
    return white_space(t, len, pos, 1);
}
