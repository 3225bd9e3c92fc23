/* tokenizer/pretok_fast.c: see pretok_fast.h. The alternatives are tried in the pattern's
 * order, each commented with the part of the pattern it stands for. */
#include "tokenizer/pretok_fast.h"

enum { C_L = 1, C_N = 2, C_S = 4, C_RN = 8 }; /* letter, digit, \s, \r or \n; none: "other" */

/* Classes of ASCII under PCRE2 UCP: \p{L} = A-Z a-z, \p{N} = 0-9, \s = \t \n \v \f \r space. */
static const uint8_t CLS[128] = {
    ['\t'] = C_S, ['\n'] = C_S | C_RN, ['\v'] = C_S, ['\f'] = C_S, ['\r'] = C_S | C_RN, [' '] = C_S,
    ['0'] = C_N, ['1'] = C_N, ['2'] = C_N, ['3'] = C_N, ['4'] = C_N,
    ['5'] = C_N, ['6'] = C_N, ['7'] = C_N, ['8'] = C_N, ['9'] = C_N,
    ['A'] = C_L, ['B'] = C_L, ['C'] = C_L, ['D'] = C_L, ['E'] = C_L, ['F'] = C_L, ['G'] = C_L,
    ['H'] = C_L, ['I'] = C_L, ['J'] = C_L, ['K'] = C_L, ['L'] = C_L, ['M'] = C_L, ['N'] = C_L,
    ['O'] = C_L, ['P'] = C_L, ['Q'] = C_L, ['R'] = C_L, ['S'] = C_L, ['T'] = C_L, ['U'] = C_L,
    ['V'] = C_L, ['W'] = C_L, ['X'] = C_L, ['Y'] = C_L, ['Z'] = C_L,
    ['a'] = C_L, ['b'] = C_L, ['c'] = C_L, ['d'] = C_L, ['e'] = C_L, ['f'] = C_L, ['g'] = C_L,
    ['h'] = C_L, ['i'] = C_L, ['j'] = C_L, ['k'] = C_L, ['l'] = C_L, ['m'] = C_L, ['n'] = C_L,
    ['o'] = C_L, ['p'] = C_L, ['q'] = C_L, ['r'] = C_L, ['s'] = C_L, ['t'] = C_L, ['u'] = C_L,
    ['v'] = C_L, ['w'] = C_L, ['x'] = C_L, ['y'] = C_L, ['z'] = C_L,
};

#define UNKNOWN ((size_t)-1) /* a non-ASCII byte decides: ask PCRE2 */

/* Class of t[i]: 0xff past the end... callers check i < len first. */
static inline int is_ascii(uint8_t c) { return c < 0x80; }
static inline int is_other(uint8_t c) { return CLS[c] == 0; } /* [^\s\p{L}\p{N}] */

/* End of the run of characters of class `cls` (a C_* bit, or 0 for "other") from i;
 * UNKNOWN when the run stops at a non-ASCII byte, which might continue it. */
static inline size_t run_end(const uint8_t *t, size_t len, size_t i, int cls) {
    while (i < len && is_ascii(t[i]) && (cls ? (CLS[t[i]] & cls) != 0 : is_other(t[i]))) i++;
    if (i < len && !is_ascii(t[i])) return UNKNOWN;
    return i;
}

static inline uint8_t lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? (uint8_t)(c + 32) : c; }

/* 's|'t|'re|'ve|'m|'ll|'d at pos (t[pos] == '\''): end, 0 when none, UNKNOWN when a
 * non-ASCII byte is in a position that case-insensitive matching would have to judge
 * (U+017F LATIN SMALL LETTER LONG S folds to 's'). */
static size_t contraction(const uint8_t *t, size_t len, size_t pos, int nocase) {
    if (pos + 1 >= len) return 0;
    uint8_t a = t[pos + 1];
    if (nocase && !is_ascii(a)) return UNKNOWN;
    if (nocase) a = lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
    if (a != 'r' && a != 'v' && a != 'l') return 0;
    if (pos + 2 >= len) return 0;
    uint8_t b = t[pos + 2];
    if (nocase && !is_ascii(b)) return UNKNOWN;
    if (nocase) b = lower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
    return 0;
}

/* The whitespace run starting at pos, for \s+(?!\S)|\s+ (k = end of the run). */
static inline size_t space_tail(size_t pos, size_t k, size_t len) {
    if (k == len) return k;        /* \s+(?!\S): nothing follows */
    if (k - pos >= 2) return k - 1; /* \s+(?!\S): give back one space */
    return k;                      /* \s+ */
}

size_t pretok_fast_gpt2(const uint8_t *t, size_t len, size_t pos) {
    uint8_t c = t[pos];
    if (!is_ascii(c)) return 0;
    size_t e;
    if (c == '\'' && (e = contraction(t, len, pos, 0)) != 0) return e == UNKNOWN ? 0 : e;
    /*  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ */
    size_t j = c == ' ' ? pos + 1 : pos;
    if (j < len) {
        uint8_t d = t[j];
        if (!is_ascii(d)) return 0;
        int cls = CLS[d] & (C_L | C_N | C_S);
        if (cls == C_L || cls == C_N || cls == 0) {
            e = run_end(t, len, j + 1, cls);
            return e == UNKNOWN ? 0 : e;
        }
    }
    /* \s+(?!\S) | \s+ : here t[pos] is white space */
    size_t k = run_end(t, len, pos, C_S);
    return k == UNKNOWN ? 0 : space_tail(pos, k, len);
}

size_t pretok_fast_cl100k(const uint8_t *t, size_t len, size_t pos) {
    uint8_t c = t[pos];
    if (!is_ascii(c)) return 0;
    size_t e;
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c == '\'' && (e = contraction(t, len, pos, 1)) != 0) return e == UNKNOWN ? 0 : e;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ : first with the optional character, then without */
    if (CLS[c] & C_L) {
        e = run_end(t, len, pos + 1, C_L);
        return e == UNKNOWN ? 0 : e;
    }
    if (!(CLS[c] & (C_RN | C_N)) && pos + 1 < len) {
        uint8_t d = t[pos + 1];
        if (!is_ascii(d)) return 0;
        if (CLS[d] & C_L) {
            e = run_end(t, len, pos + 2, C_L);
            return e == UNKNOWN ? 0 : e;
        }
    }
    /* \p{N}{1,3} */
    if (CLS[c] & C_N) {
        size_t k = pos + 1;
        while (k < pos + 3 && k < len && is_ascii(t[k]) && (CLS[t[k]] & C_N)) k++;
        if (k < pos + 3 && k < len && !is_ascii(t[k])) return 0; /* maybe a non-ASCII digit */
        return k;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = c == ' ' ? pos + 1 : pos;
    if (j < len) {
        uint8_t d = t[j];
        if (!is_ascii(d)) return 0;
        if (is_other(d)) {
            e = run_end(t, len, j + 1, 0);
            if (e == UNKNOWN) return 0;
            while (e < len && (t[e] == '\r' || t[e] == '\n')) e++;
            return e;
        }
    }
    /* here t[pos] is white space; k ends its run */
    size_t k = run_end(t, len, pos, C_S);
    if (k == UNKNOWN) return 0;
    /* \s*[\r\n]+ : \s* gives back until [\r\n]+ can match: ends after the run's last \r or \n */
    for (size_t m = k; m > pos; m--)
        if (CLS[t[m - 1]] & C_RN) return m;
    /* \s+(?!\S) | \s+ */
    return space_tail(pos, k, len);
}
