/* bus/wire.c: MessagePack encoding and strict decoding of wire.h messages.
 *
 * Both directions walk the field tables of wire_schema.c. Decoding goes: size limit, a
 * structural pre-scan (see wire_prescan), msgpack_unpack_next into a zone, then one pass
 * over the root map's keys (find "v"/"type", reject duplicates) and one pass over the
 * schema in table order converting each field with range checks. */
#include "common/errmsg.h"
#include "bus/wire.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/utf8.h"
#include "bus/wire_schema.h"

/* ---- encoding ------------------------------------------------------------------------- */

static int pack_cstr(msgpack_packer *pk, const char *s, size_t n) {
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

static int pack_key(msgpack_packer *pk, const char *k) { return pack_cstr(pk, k, strlen(k)); }

static int name_len(const char *name, size_t *n) {
    *n = strnlen(name, WIRE_NAME_LEN);
    if (*n == WIRE_NAME_LEN) return WIRE_ERR_ARG; /* not NUL-terminated in its array */
    return wire_utf8_valid(name, *n) ? 0 : WIRE_ERR_ARG;
}

/* Bytes of the token array and the mask for B rows of T+1 / T entries; OVERSIZE when the
 * product does not fit the frame limit (this also rules out size_t overflow). */
static int batch_sizes(uint32_t B, uint32_t T, size_t *tok_bytes, size_t *mask_bytes) {
    uint64_t cells = (uint64_t)B * ((uint64_t)T + 1); /* < 2^64: both factors < 2^32+1 */
    if (cells > WIRE_MAX_FRAME / 4) return WIRE_ERR_OVERSIZE;
    *tok_bytes = (size_t)cells * 4;
    *mask_bytes = (size_t)B * T;
    return 0;
}

/* msgpack-c's packers fail only when the sbuffer cannot grow; our own checks return
 * wire_status values, so the two never mix. */
#define PK(x)                                    \
    do {                                         \
        if ((x) != 0) return WIRE_ERR_NOMEM;     \
    } while (0)

static int encode_fields(msgpack_packer *pk, const wire_schema_t *s, const char *base);

static int encode_tokens(msgpack_packer *pk, const msg_batch_t *b, int mask) {
    size_t tok_bytes, mask_bytes;
    int rc = batch_sizes(b->B, b->T, &tok_bytes, &mask_bytes);
    if (rc) return rc;
    if (mask) {
        if (mask_bytes && !b->mask) return WIRE_ERR_ARG;
        PK(msgpack_pack_bin(pk, mask_bytes));
        if (mask_bytes) PK(msgpack_pack_bin_body(pk, b->mask, mask_bytes));
        return 0;
    }
    if (tok_bytes && !b->tokens) return WIRE_ERR_ARG;
    PK(msgpack_pack_bin(pk, tok_bytes));
    /* little-endian on the wire whatever the host; chunks keep the stack small */
    uint8_t chunk[4096];
    size_t cells = tok_bytes / 4, done = 0;
    while (done < cells) {
        size_t k = cells - done < sizeof chunk / 4 ? cells - done : sizeof chunk / 4;
        for (size_t i = 0; i < k; i++) {
            uint32_t v = b->tokens[done + i];
            chunk[4 * i] = (uint8_t)v;
            chunk[4 * i + 1] = (uint8_t)(v >> 8);
            chunk[4 * i + 2] = (uint8_t)(v >> 16);
            chunk[4 * i + 3] = (uint8_t)(v >> 24);
        }
        PK(msgpack_pack_bin_body(pk, chunk, 4 * k));
        done += k;
    }
    return 0;
}

static int encode_field(msgpack_packer *pk, const wire_field_t *f, const char *base) {
    const char *p = base + f->off;
    size_t n;
    int rc;
    switch (f->kind) {
    case WF_U64: PK(msgpack_pack_uint64(pk, *(const uint64_t *)p)); return 0;
    case WF_U32: PK(msgpack_pack_uint32(pk, *(const uint32_t *)p)); return 0;
    case WF_I32: PK(msgpack_pack_int32(pk, *(const int32_t *)p)); return 0;
    case WF_F64: PK(msgpack_pack_double(pk, *(const double *)p)); return 0;
    case WF_LAYOUT:
        if (*(const uint8_t *)p > WIRE_PAD) return WIRE_ERR_ARG;
        PK(pack_key(pk, *(const uint8_t *)p == WIRE_PACK ? "pack" : "pad"));
        return 0;
    case WF_SPLIT:
        if (*(const uint8_t *)p > WIRE_VAL) return WIRE_ERR_ARG;
        PK(pack_key(pk, *(const uint8_t *)p == WIRE_TRAIN ? "train" : "val"));
        return 0;
    case WF_BOOL:
        if (*(const uint8_t *)p > 1) return WIRE_ERR_ARG;
        PK(*(const uint8_t *)p ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
        return 0;
    case WF_STR: {
        const char *str = *(char *const *)p;
        if (!str) {
            PK(msgpack_pack_nil(pk));
            return 0;
        }
        n = strlen(str);
        if (n > WIRE_MAX_STR) return WIRE_ERR_OVERSIZE;
        if (!wire_utf8_valid(str, n)) return WIRE_ERR_ARG; /* a str is UTF-8 (§2.1) */
        PK(pack_cstr(pk, str, n));
        return 0;
    }
    case WF_NAME:
        if (name_len(p, &n)) return WIRE_ERR_ARG;
        PK(pack_cstr(pk, p, n));
        return 0;
    case WF_TOKENS: case WF_MASK:
        return encode_tokens(pk, (const msg_batch_t *)base, f->kind == WF_MASK);
    case WF_VALUES: {
        uint32_t cnt = *(const uint32_t *)(base + f->off_n);
        const wire_kv_t *kv = (const wire_kv_t *)p;
        if (cnt > WIRE_MAX_KV) return WIRE_ERR_ARG;
        PK(msgpack_pack_map(pk, cnt));
        for (uint32_t i = 0; i < cnt; i++) {
            if (name_len(kv[i].name, &n)) return WIRE_ERR_ARG;
            PK(pack_cstr(pk, kv[i].name, n));
            PK(msgpack_pack_double(pk, kv[i].value));
        }
        return 0;
    }
    case WF_ITEMS: {
        uint32_t cnt = *(const uint32_t *)(base + f->off_n);
        const msg_ckpt_t *items = *(msg_ckpt_t *const *)p;
        if (cnt > WIRE_MAX_ITEMS) return WIRE_ERR_OVERSIZE;
        if (cnt && !items) return WIRE_ERR_ARG;
        PK(msgpack_pack_array(pk, cnt));
        for (uint32_t i = 0; i < cnt; i++)
            if ((rc = encode_fields(pk, wire_schema_get(MSG_CKPT), (const char *)&items[i])))
                return rc;
        return 0;
    }
    }
    return WIRE_ERR_ARG;
}

/* The fields of s as one map, preceded by "v" and "type" when type_name is not NULL. */
static int encode_map(msgpack_packer *pk, const wire_schema_t *s, const char *base,
                      const char *type_name) {
    int n = type_name ? 2 : 0, rc;
    for (int i = 0; i < s->n_fields; i++) n += wire_field_present(&s->fields[i], base);
    PK(msgpack_pack_map(pk, n));
    if (type_name) {
        PK(pack_key(pk, "v"));
        PK(msgpack_pack_uint32(pk, WIRE_VERSION));
        PK(pack_key(pk, "type"));
        PK(pack_key(pk, type_name));
    }
    for (int i = 0; i < s->n_fields; i++) {
        if (!wire_field_present(&s->fields[i], base)) continue;
        PK(pack_key(pk, s->fields[i].name));
        if ((rc = encode_field(pk, &s->fields[i], base))) return rc;
    }
    return 0;
}

static int encode_fields(msgpack_packer *pk, const wire_schema_t *s, const char *base) {
    return encode_map(pk, s, base, NULL);
}

/* Appends the encoding of m to sb (which the caller owns). */
static int encode_into(msgpack_sbuffer *sb, const wire_msg_t *m) {
    const wire_schema_t *s = wire_schema_get(m->type);
    if (!s) return WIRE_ERR_ARG;
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int rc = encode_map(&pk, s, (const char *)&m->u, s->name);
    if (rc) return rc;
    if (sb->size > WIRE_MAX_FRAME) return WIRE_ERR_OVERSIZE;
    return 0;
}

int wire_encode(const wire_msg_t *m, void **buf, size_t *len) {
    if (!m || !buf || !len) return WIRE_ERR_ARG;
    *buf = NULL;
    *len = 0;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    int rc = encode_into(&sb, m);
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return rc;
    }
    size_t size = sb.size; /* msgpack_sbuffer_release zeroes it */
    *buf = msgpack_sbuffer_release(&sb);
    *len = size;
    return WIRE_OK;
}

/* ---- decoding ------------------------------------------------------------------------- */

/* Containers nested at most this deep, the root map being level 1: our messages use 3
 * (ckpt_index: root, items, item); msgpack-c itself stops at 32. */
#define WIRE_MAX_DEPTH 16

static uint64_t be_read(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

/* Walks the MessagePack structure of one object at buf[0..len) without building anything,
 * checking that every header and payload lies inside the buffer, that no container claims
 * more elements than there are bytes left (each element takes at least one byte), and that
 * nesting stays under WIRE_MAX_DEPTH. msgpack-c allocates a container's element array as
 * soon as it reads the header, so without this a 6-byte frame claiming 2^32 elements would
 * ask for ~100 GB. On success *end is the offset just past the object. */
static int wire_prescan(const uint8_t *p, size_t len, size_t *end, char *err, size_t errlen) {
    uint64_t left[WIRE_MAX_DEPTH + 1];
    int d = 0;
    size_t pos = 0;
    left[0] = 1;
    for (;;) {
        while (d >= 0 && left[d] == 0) d--;
        if (d < 0) break;
        left[d]--;
        if (pos >= len) return err_fail(err, errlen, WIRE_ERR_MALFORMED, "truncated at byte %zu", pos);
        uint8_t c = p[pos++];
        uint64_t skip = 0, elems = 0; /* payload bytes; child objects */
        int lenbytes = 0;             /* big-endian length field size */
        int container = 0;            /* a map or an array, empty or not */
        if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
            /* fixint, nil, bool: header only */
        } else if (c <= 0x8f) {
            elems = 2 * (uint64_t)(c & 0x0f);
            container = 1;
        } else if (c <= 0x9f) {
            elems = c & 0x0f;
            container = 1;
        } else if (c <= 0xbf) {
            skip = c & 0x1f;
        } else {
            switch (c) {
            case 0xc4: case 0xd9: lenbytes = 1; break;         /* bin8, str8 */
            case 0xc5: case 0xda: lenbytes = 2; break;         /* bin16, str16 */
            case 0xc6: case 0xdb: lenbytes = 4; break;         /* bin32, str32 */
            case 0xc7: lenbytes = 1; skip = 1; break;          /* ext8: + type byte */
            case 0xc8: lenbytes = 2; skip = 1; break;
            case 0xc9: lenbytes = 4; skip = 1; break;
            case 0xca: skip = 4; break;                        /* float32 */
            case 0xcb: skip = 8; break;                        /* float64 */
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xd4: skip = 2; break;                        /* fixext 1..16: type + data */
            case 0xd5: skip = 3; break;
            case 0xd6: skip = 5; break;
            case 0xd7: skip = 9; break;
            case 0xd8: skip = 17; break;
            case 0xdc: case 0xdd: case 0xde: case 0xdf: {      /* array16/32, map16/32 */
                int nb = (c & 1) ? 4 : 2;
                if (len - pos < (size_t)nb)
                    return err_fail(err, errlen, WIRE_ERR_MALFORMED, "truncated at byte %zu", pos);
                elems = be_read(p + pos, nb);
                if (c >= 0xde) elems *= 2;
                pos += nb;
                container = 1;
                break;
            }
            default: /* 0xc1 is never used */
                return err_fail(err, errlen, WIRE_ERR_MALFORMED, "invalid byte 0x%02x at %zu", c,
                            pos - 1);
            }
        }
        if (lenbytes) {
            if (len - pos < (size_t)lenbytes)
                return err_fail(err, errlen, WIRE_ERR_MALFORMED, "truncated at byte %zu", pos);
            skip += be_read(p + pos, lenbytes);
            pos += lenbytes;
        }
        if (skip > len - pos)
            return err_fail(err, errlen, WIRE_ERR_MALFORMED, "truncated at byte %zu", pos);
        pos += skip;
        /* this container's level is d + 1 (the root map is level 1); an empty one counts
         * too, although it opens no level of its own below */
        if (container && d + 1 > WIRE_MAX_DEPTH)
            return err_fail(err, errlen, WIRE_ERR_MALFORMED,
                        "containers nested more than %d deep", WIRE_MAX_DEPTH);
        if (elems) {
            if (elems > len - pos)
                return err_fail(err, errlen, WIRE_ERR_MALFORMED,
                            "container at byte %zu claims more elements than bytes left", pos);
            left[++d] = elems;
        }
    }
    *end = pos;
    return 0;
}

static int key_is(const msgpack_object *k, const char *name) {
    size_t n = strlen(name);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, name, n) == 0;
}

/* Where a decode error happened: "batch" or "ckpt_index: items[3]". */
typedef struct {
    const char *ctx;
    char *err;
    size_t errlen;
    wire_diag_t *diag; /* the failing field and the req_id read so far; never NULL */
} dec_t;

#define BAD(status, ...) err_fail(dc->err, dc->errlen, status, __VA_ARGS__)

static int dec_double(const msgpack_object *o, double *out) {
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32: case MSGPACK_OBJECT_FLOAT64: *out = o->via.f64; return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)o->via.u64; return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)o->via.i64; return 0;
    default: return -1;
    }
}

/* A name: str of at most WIRE_NAME_LEN-1 bytes without NUL, into a zeroed char array. */
static int dec_name(dec_t *dc, const char *what, const msgpack_object *o, char *out) {
    if (o->type != MSGPACK_OBJECT_STR)
        return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be a string", dc->ctx, what);
    if (o->via.str.size > WIRE_NAME_LEN - 1)
        return BAD(WIRE_ERR_OVERSIZE, "%s: field \"%s\" longer than %d bytes", dc->ctx, what,
                   WIRE_NAME_LEN - 1);
    if (memchr(o->via.str.ptr, 0, o->via.str.size))
        return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" contains a NUL byte", dc->ctx, what);
    if (!wire_utf8_valid(o->via.str.ptr, o->via.str.size))
        return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" is not valid UTF-8", dc->ctx, what);
    memset(out, 0, WIRE_NAME_LEN);
    memcpy(out, o->via.str.ptr, o->via.str.size);
    return 0;
}

static int dec_enum(dec_t *dc, const wire_field_t *f, const msgpack_object *o, uint8_t *out) {
    const char *a = f->kind == WF_LAYOUT ? "pack" : "train";
    const char *b = f->kind == WF_LAYOUT ? "pad" : "val";
    if (key_is(o, a)) *out = 0;
    else if (key_is(o, b)) *out = 1;
    else return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be \"%s\" or \"%s\"", dc->ctx,
                    f->name, a, b);
    return 0;
}

static int decode_map(dec_t *dc, const msgpack_object *obj, const wire_schema_t *s, char *base,
                      int top);

static int dec_field(dec_t *dc, const wire_field_t *f, const msgpack_object *o, char *base) {
    char *p = base + f->off;
    const msgpack_object_type t = o->type;
    switch (f->kind) {
    case WF_U64: case WF_U32:
        if (t != MSGPACK_OBJECT_POSITIVE_INTEGER ||
            (f->kind == WF_U32 && o->via.u64 > UINT32_MAX))
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be an unsigned integer%s",
                       dc->ctx, f->name, f->kind == WF_U32 ? " < 2^32" : "");
        if (f->kind == WF_U64) *(uint64_t *)p = o->via.u64;
        else *(uint32_t *)p = (uint32_t)o->via.u64;
        return 0;
    case WF_I32:
        if (t == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT32_MAX) {
            *(int32_t *)p = (int32_t)o->via.u64;
            return 0;
        }
        if (t == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 >= INT32_MIN) {
            *(int32_t *)p = (int32_t)o->via.i64;
            return 0;
        }
        return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be a 32-bit integer", dc->ctx,
                   f->name);
    case WF_F64:
        if (dec_double(o, (double *)p))
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be a number", dc->ctx, f->name);
        return 0;
    case WF_LAYOUT: case WF_SPLIT:
        return dec_enum(dc, f, o, (uint8_t *)p);
    case WF_BOOL:
        if (t != MSGPACK_OBJECT_BOOLEAN)
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be true or false", dc->ctx, f->name);
        *(uint8_t *)p = o->via.boolean ? 1 : 0;
        return 0;
    case WF_NAME:
        return dec_name(dc, f->name, o, p);
    case WF_STR: {
        if (t == MSGPACK_OBJECT_NIL) return 0; /* NULL: unknown / not applicable */
        if (t != MSGPACK_OBJECT_STR)
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be a string or nil", dc->ctx,
                       f->name);
        if (o->via.str.size > WIRE_MAX_STR)
            return BAD(WIRE_ERR_OVERSIZE, "%s: field \"%s\" longer than %d bytes", dc->ctx,
                       f->name, WIRE_MAX_STR);
        if (memchr(o->via.str.ptr, 0, o->via.str.size))
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" contains a NUL byte", dc->ctx,
                       f->name);
        if (!wire_utf8_valid(o->via.str.ptr, o->via.str.size))
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" is not valid UTF-8", dc->ctx,
                       f->name);
        char *s = malloc(o->via.str.size + 1);
        if (!s) return BAD(WIRE_ERR_NOMEM, "%s: field \"%s\": out of memory", dc->ctx, f->name);
        memcpy(s, o->via.str.ptr, o->via.str.size);
        s[o->via.str.size] = 0;
        *(char **)p = s;
        return 0;
    }
    case WF_TOKENS: case WF_MASK: {
        msg_batch_t *b = (msg_batch_t *)base;
        if (f->kind == WF_MASK && t == MSGPACK_OBJECT_NIL) return 0;
        if (t != MSGPACK_OBJECT_BIN)
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be bin", dc->ctx, f->name);
        size_t tok_bytes, mask_bytes;
        size_t want = 0, have = o->via.bin.size;
        int big = batch_sizes(b->B, b->T, &tok_bytes, &mask_bytes) != 0;
        if (!big) want = f->kind == WF_TOKENS ? tok_bytes : mask_bytes;
        if (big || have != want)
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" has %zu bytes, B=%u T=%u need %s",
                       dc->ctx, f->name, have, b->B, b->T,
                       f->kind == WF_TOKENS ? "B*(T+1)*4" : "B*T");
        if (f->kind == WF_MASK) {
            /* malloc(0) may return NULL; keep "present but empty" distinct from absent */
            b->mask = malloc(want ? want : 1);
            if (!b->mask) return BAD(WIRE_ERR_NOMEM, "%s: mask: out of memory", dc->ctx);
            if (want) memcpy(b->mask, o->via.bin.ptr, want);
            return 0;
        }
        b->tokens = malloc(want ? want : 4);
        if (!b->tokens) return BAD(WIRE_ERR_NOMEM, "%s: tokens: out of memory", dc->ctx);
        const uint8_t *q = (const uint8_t *)o->via.bin.ptr;
        for (size_t i = 0; i < want / 4; i++)
            b->tokens[i] = (uint32_t)q[4 * i] | (uint32_t)q[4 * i + 1] << 8 |
                           (uint32_t)q[4 * i + 2] << 16 | (uint32_t)q[4 * i + 3] << 24;
        return 0;
    }
    case WF_VALUES: {
        uint32_t *n = (uint32_t *)(base + f->off_n);
        wire_kv_t *kv = (wire_kv_t *)p;
        if (t != MSGPACK_OBJECT_MAP)
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be a map", dc->ctx, f->name);
        if (o->via.map.size > WIRE_MAX_KV)
            return BAD(WIRE_ERR_OVERSIZE, "%s: field \"%s\" has more than %d entries", dc->ctx,
                       f->name, WIRE_MAX_KV);
        *n = 0;
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object_kv *e = &o->via.map.ptr[i];
            int rc = dec_name(dc, "values key", &e->key, kv[i].name);
            if (rc) return rc;
            if (dec_double(&e->val, &kv[i].value))
                return BAD(WIRE_ERR_MISTYPED, "%s: values[\"%s\"] must be a number", dc->ctx,
                           kv[i].name);
            *n = i + 1;
        }
        return 0;
    }
    case WF_ITEMS: {
        uint32_t *n = (uint32_t *)(base + f->off_n);
        msg_ckpt_t **items = (msg_ckpt_t **)p;
        if (t != MSGPACK_OBJECT_ARRAY)
            return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\" must be an array", dc->ctx, f->name);
        uint32_t cnt = o->via.array.size;
        if (cnt > WIRE_MAX_ITEMS)
            return BAD(WIRE_ERR_OVERSIZE, "%s: field \"%s\" has more than %d entries", dc->ctx,
                       f->name, WIRE_MAX_ITEMS);
        if (cnt) {
            *items = calloc(cnt, sizeof **items);
            if (!*items) return BAD(WIRE_ERR_NOMEM, "%s: items: out of memory", dc->ctx);
            *n = cnt; /* so wire_msg_free releases what is decoded if a later item fails */
        }
        for (uint32_t i = 0; i < cnt; i++) {
            char ctx[64];
            snprintf(ctx, sizeof ctx, "%s: items[%u]", dc->ctx, i);
            dec_t sub = {ctx, dc->err, dc->errlen, dc->diag};
            if (o->via.array.ptr[i].type != MSGPACK_OBJECT_MAP)
                return err_fail(dc->err, dc->errlen, WIRE_ERR_MISTYPED, "%s: must be a map", ctx);
            int rc = decode_map(&sub, &o->via.array.ptr[i], wire_schema_get(MSG_CKPT),
                                (char *)&(*items)[i], 0);
            if (rc) return rc;
        }
        return 0;
    }
    }
    return BAD(WIRE_ERR_MISTYPED, "%s: field \"%s\": unknown kind", dc->ctx, f->name);
}

/* Converts the fields of s found in map obj into base. At the top level "v" and "type" are
 * checked by the caller and skipped here. */
static int decode_map(dec_t *dc, const msgpack_object *obj, const wire_schema_t *s, char *base,
                      int top) {
    const msgpack_object *seen[WIRE_SCHEMA_MAX_FIELDS] = {0};
    const msgpack_object_map *mp = &obj->via.map;
    for (uint32_t i = 0; i < mp->size; i++) {
        const msgpack_object *k = &mp->ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR)
            return BAD(WIRE_ERR_MALFORMED, "%s: a map key is not a string", dc->ctx);
        if (top && (key_is(k, "v") || key_is(k, "type"))) continue;
        for (int j = 0; j < s->n_fields; j++) {
            if (!key_is(k, s->fields[j].name)) continue;
            if (seen[j])
                return BAD(WIRE_ERR_MALFORMED, "%s: field \"%s\" appears twice", dc->ctx,
                           s->fields[j].name);
            seen[j] = &mp->ptr[i].val;
            break;
        }
    }
    for (int j = 0; j < s->n_fields; j++) {
        const wire_field_t *f = &s->fields[j];
        dc->diag->field = f->name;
        if (!seen[j]) {
            if (f->required)
                return BAD(WIRE_ERR_MISSING, "%s: field \"%s\" missing", dc->ctx, f->name);
            continue;
        }
        int rc = dec_field(dc, f, seen[j], base);
        if (rc) return rc;
        /* req_id comes first in every request's table: an error reply can echo it */
        if (top && f->kind == WF_U64 && !strcmp(f->name, "req_id")) {
            dc->diag->req_id = *(const uint64_t *)(base + f->off);
            dc->diag->has_req_id = 1;
        }
    }
    dc->diag->field = NULL;
    return 0;
}

/* Checks "v" and "type" of the root map and returns the type through *t. */
static int decode_header(dec_t *dc, const msgpack_object *root, msg_type *t) {
    const msgpack_object *v = NULL, *ty = NULL;
    for (uint32_t i = 0; i < root->via.map.size; i++) {
        const msgpack_object *k = &root->via.map.ptr[i].key;
        if (k->type != MSGPACK_OBJECT_STR)
            return BAD(WIRE_ERR_MALFORMED, "message: a map key is not a string");
        const msgpack_object **slot = key_is(k, "v") ? &v : key_is(k, "type") ? &ty : NULL;
        if (!slot) continue;
        if (*slot)
            return BAD(WIRE_ERR_MALFORMED, "message: field \"%s\" appears twice",
                       slot == &v ? "v" : "type");
        *slot = &root->via.map.ptr[i].val;
    }
    if (!v) return BAD(WIRE_ERR_VERSION, "message: field \"v\" missing");
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 != WIRE_VERSION)
        return BAD(WIRE_ERR_VERSION, "message: \"v\" is not %d", WIRE_VERSION);
    if (!ty) return BAD(WIRE_ERR_TYPE, "message: field \"type\" missing");
    if (ty->type != MSGPACK_OBJECT_STR)
        return BAD(WIRE_ERR_TYPE, "message: field \"type\" must be a string");
    *t = MSG_NONE;
    for (int i = MSG_NONE + 1; i < MSG_TYPE_COUNT; i++)
        if (key_is(ty, wire_type_name((msg_type)i))) *t = (msg_type)i;
    if (*t == MSG_NONE) {
        char shown[3 * 32 + 1]; /* the sender's bytes, quoted as UTF-8 whatever they were */
        wire_utf8_clean(shown, sizeof shown, ty->via.str.ptr,
                        ty->via.str.size > 32 ? 32 : ty->via.str.size);
        return BAD(WIRE_ERR_TYPE, "message: unknown type \"%s\"", shown);
    }
    return 0;
}

int wire_decode(const void *buf, size_t len, wire_msg_t *m, char *err, size_t errlen) {
    return wire_decode_diag(buf, len, m, NULL, err, errlen);
}

int wire_decode_diag(const void *buf, size_t len, wire_msg_t *m, wire_diag_t *diag, char *err,
                     size_t errlen) {
    wire_diag_t scratch;
    if (!diag) diag = &scratch;
    memset(diag, 0, sizeof *diag);
    if (err && errlen) err[0] = 0;
    if (!m) return err_fail(err, errlen, WIRE_ERR_ARG, "wire_decode: NULL message");
    memset(m, 0, sizeof *m);
    if (!buf && len) return err_fail(err, errlen, WIRE_ERR_ARG, "wire_decode: NULL buffer");
    if (len > WIRE_MAX_FRAME)
        return err_fail(err, errlen, WIRE_ERR_OVERSIZE, "message: %zu bytes over the %u limit", len,
                    WIRE_MAX_FRAME);
    if (len == 0) return err_fail(err, errlen, WIRE_ERR_MALFORMED, "message: empty frame");
    size_t end = 0;
    int rc = wire_prescan(buf, len, &end, err, errlen);
    if (rc) return rc;
    if (end != len)
        return err_fail(err, errlen, WIRE_ERR_TRAILING, "message: %zu bytes after the map",
                    len - end);
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&res, buf, len, &off);
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
        msgpack_unpacked_destroy(&res);
        if (ur == MSGPACK_UNPACK_NOMEM_ERROR)
            return err_fail(err, errlen, WIRE_ERR_NOMEM, "message: out of memory while parsing");
        return err_fail(err, errlen, WIRE_ERR_MALFORMED, "message: not valid MessagePack");
    }
    dec_t dc = {"message", err, errlen, diag};
    const msgpack_object *root = &res.data;
    msg_type t = MSG_NONE;
    if (root->type != MSGPACK_OBJECT_MAP) {
        rc = err_fail(err, errlen, WIRE_ERR_MALFORMED, "message: not a map");
    } else if (!(rc = decode_header(&dc, root, &t))) {
        const wire_schema_t *s = wire_schema_get(t);
        dc.ctx = s->name;
        diag->type = t;
        m->type = t;
        rc = decode_map(&dc, root, s, (char *)&m->u, 1);
        if (rc) wire_msg_free(m);
    }
    msgpack_unpacked_destroy(&res);
    return rc;
}

/* ---- bus events ----------------------------------------------------------------------- */

int wire_event_pack(const char *topic, const wire_msg_t *m, void **frame, size_t *len) {
    if (!topic || !m || !frame || !len) return WIRE_ERR_ARG;
    *frame = NULL;
    *len = 0;
    size_t tl = strlen(topic);
    if (tl > WIRE_MAX_TOPIC) return WIRE_ERR_OVERSIZE;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    /* topic and separator first, then the body straight after: one buffer, no copy */
    int rc = msgpack_sbuffer_write(&sb, topic, tl) | msgpack_sbuffer_write(&sb, "", 1)
                 ? WIRE_ERR_NOMEM : encode_into(&sb, m);
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return rc;
    }
    size_t size = sb.size;
    *frame = msgpack_sbuffer_release(&sb);
    *len = size;
    return WIRE_OK;
}

int wire_event_unpack(const void *frame, size_t len, char *topic_out, size_t topic_cap,
                      wire_msg_t *m, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (topic_out && topic_cap) topic_out[0] = 0;
    if (!m) return err_fail(err, errlen, WIRE_ERR_ARG, "wire_event_unpack: NULL message");
    memset(m, 0, sizeof *m);
    if (!frame && len) return err_fail(err, errlen, WIRE_ERR_ARG, "wire_event_unpack: NULL frame");
    size_t scan = len < WIRE_MAX_TOPIC + 1 ? len : WIRE_MAX_TOPIC + 1;
    const char *nul = scan ? memchr(frame, 0, scan) : NULL;
    if (!nul)
        return err_fail(err, errlen, WIRE_ERR_MALFORMED,
                    "event: no NUL after a topic of at most %d bytes", WIRE_MAX_TOPIC);
    size_t tl = (size_t)(nul - (const char *)frame);
    if (topic_out && topic_cap) {
        size_t k = tl < topic_cap - 1 ? tl : topic_cap - 1;
        memcpy(topic_out, frame, k);
        topic_out[k] = 0;
    }
    return wire_decode(nul + 1, len - tl - 1, m, err, errlen);
}
