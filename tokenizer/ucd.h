/* tokenizer/ucd.h: the Unicode classes that tiktoken's pre-tokenizer patterns test, for every
 * code point, from tables generated out of the Unicode Character Database
 * (tokenizer/ucd_tables.c, written by tokenizer/js/gen_ucd_tables.mjs: `make unicode-tables`).
 *
 * Which Unicode: the one tiktoken's regex engine carries. The npm tiktoken (1.0.22) matches its
 * patterns with Rust's fancy-regex over regex-syntax 0.8.5, whose tables are Unicode 16.0.0.
 * Owning the tables makes the ids independent of any library on the machine (PCRE2 10.42 had
 * Unicode 14 and counted U+180E as \s; tiktoken does not).
 *
 * Classes are bits, at most one per code point (the general categories are disjoint, and
 * every White_Space character is a separator or a control); 0 is "none of these". */
#ifndef TOKENIZER_UCD_H
#define TOKENIZER_UCD_H
#include <stddef.h>
#include <stdint.h>

enum {
    UCD_WS = 1,   /* White_Space (PropList.txt): Rust regex's \s */
    UCD_LU = 2,   /* general categories: Lu */
    UCD_LL = 4,   /* Ll */
    UCD_LT = 8,   /* Lt */
    UCD_LM = 16,  /* Lm */
    UCD_LO = 32,  /* Lo */
    UCD_M = 64,   /* Mn, Mc, Me: \p{M} */
    UCD_N = 128,  /* Nd, Nl, No: \p{N} */
};
#define UCD_L (UCD_LU | UCD_LL | UCD_LT | UCD_LM | UCD_LO) /* \p{L} */

#define UCD_BLOCK_SHIFT 7
#define UCD_N_FOLD_ASCII 2

extern const char ucd_version[]; /* "16.0.0" */
extern const uint8_t ucd_ascii[128]; /* the classes of U+0000..U+007F, for the hot path */
extern const uint16_t ucd_block_index[0x110000 >> UCD_BLOCK_SHIFT];
extern const uint8_t ucd_blocks[];
extern const uint32_t ucd_fold_ascii_from[UCD_N_FOLD_ASCII];
extern const char ucd_fold_ascii_to[UCD_N_FOLD_ASCII];

/* Class bits of code point cp (0 beyond U+10FFFF). */
static inline unsigned ucd_class(uint32_t cp) {
    if (cp >= 0x110000) return 0;
    size_t block = ucd_block_index[cp >> UCD_BLOCK_SHIFT];
    return ucd_blocks[(block << UCD_BLOCK_SHIFT) | (cp & ((1u << UCD_BLOCK_SHIFT) - 1))];
}

/* The lower-case ASCII letter that cp equals under simple case folding, or 0: what a
 * case-insensitive ASCII literal matches ('S' and U+017F LONG S match 's'). */
static inline int ucd_fold_ascii(uint32_t cp) {
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z' ? (int)(cp | 0x20) : 0;
    for (int i = 0; i < UCD_N_FOLD_ASCII; i++)
        if (ucd_fold_ascii_from[i] == cp) return ucd_fold_ascii_to[i];
    return 0;
}
#endif
