/* bus/wire_schema.h: the field tables behind wire.h (internal to bus/).
 *
 * Every message type is described once, as a list of (wire name, kind, required, offset):
 * the encoder, the decoder, wire_msg_free, wire_msg_equal, the JSON writer and `bus send`
 * all walk the same table, so a field added here is handled everywhere at once. Offsets are
 * from the start of the union member (e.g. offsetof(msg_batch_t, B)). */
#ifndef BUS_WIRE_SCHEMA_H
#define BUS_WIRE_SCHEMA_H
#include <stddef.h>
#include <stdint.h>
#include "bus/wire.h"

typedef enum {
    WF_U64,    /* uint64_t: msgpack positive int */
    WF_U32,    /* uint32_t: msgpack positive int <= UINT32_MAX */
    WF_I32,    /* int32_t: msgpack int in range */
    WF_F64,    /* double: msgpack float32/float64 or int */
    WF_LAYOUT, /* uint8_t: str "pack" | "pad" */
    WF_SPLIT,  /* uint8_t: str "train" | "val" */
    WF_STR,    /* char *: str (<= WIRE_MAX_STR bytes, no NUL) or nil for NULL */
    WF_NAME,   /* char[WIRE_NAME_LEN]: str of <= WIRE_NAME_LEN-1 bytes, no NUL */
    WF_TOKENS, /* uint32_t *: bin of B*(T+1)*4 bytes, little-endian (msg_batch_t only) */
    WF_MASK,   /* uint8_t *: bin of B*T bytes, optional (msg_batch_t only) */
    WF_VALUES, /* wire_kv_t[WIRE_MAX_KV] + uint32_t count at off_n: map str -> float */
    WF_ITEMS,  /* msg_ckpt_t * + uint32_t count at off_n: array of ckpt maps */
    WF_BOOL,   /* uint8_t 0/1: msgpack true/false */
} wire_field_kind;

typedef struct {
    const char *name;
    uint8_t kind;
    uint8_t required;
    uint16_t off;   /* of the value */
    uint16_t off_n; /* of the count, for WF_VALUES / WF_ITEMS */
} wire_field_t;

typedef struct {
    const char *name; /* the "type" string */
    const wire_field_t *fields;
    int n_fields;
} wire_schema_t;

#define WIRE_SCHEMA_MAX_FIELDS 16 /* the decoder's per-map bookkeeping; checked statically */

/* NULL for MSG_NONE or out-of-range values. */
const wire_schema_t *wire_schema_get(msg_type t);
/* Whether a field of the struct at base is written at all (encoder and JSON): an absent mask,
 * and an optional name left empty (the metrics' precision of a `bin/bus send` that gave none:
 * '' is none of the values the protocol allows, absent is what it says), are left out. */
int wire_field_present(const wire_field_t *f, const char *base);
/* Frees the heap fields of one struct described by s (not the struct itself). */
void wire_schema_free_fields(const wire_schema_t *s, void *base);
#endif
