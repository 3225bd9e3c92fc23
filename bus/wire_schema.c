/* bus/wire_schema.c: the one description of every message's fields (see wire_schema.h),
 * plus what needs only that description: type names, freeing, equality. */
#include "bus/wire_schema.h"

#include <stdlib.h>
#include <string.h>

#define F(st, nm, kind, req) {#nm, kind, req, offsetof(st, nm), 0}
#define FN(st, nm, kind, req, cnt) {#nm, kind, req, offsetof(st, nm), offsetof(st, cnt)}

static const wire_field_t batch_req_fields[] = {
    F(msg_batch_req_t, req_id, WF_U64, 1), F(msg_batch_req_t, seed, WF_U64, 1),
    F(msg_batch_req_t, epoch, WF_U64, 1),  F(msg_batch_req_t, step, WF_U64, 1),
    F(msg_batch_req_t, rank, WF_U32, 1),   F(msg_batch_req_t, world, WF_U32, 1),
    F(msg_batch_req_t, B, WF_U32, 1),      F(msg_batch_req_t, T, WF_U32, 1),
    F(msg_batch_req_t, layout, WF_LAYOUT, 1), F(msg_batch_req_t, split, WF_SPLIT, 1),
};
/* B and T come before tokens and mask: the decoder converts in table order, so their
 * lengths can be checked against B and T whatever order the keys had on the wire. */
static const wire_field_t batch_fields[] = {
    F(msg_batch_t, req_id, WF_U64, 1), F(msg_batch_t, seed, WF_U64, 1),
    F(msg_batch_t, epoch, WF_U64, 1),  F(msg_batch_t, step, WF_U64, 1),
    F(msg_batch_t, rank, WF_U32, 1),   F(msg_batch_t, world, WF_U32, 1),
    F(msg_batch_t, B, WF_U32, 1),      F(msg_batch_t, T, WF_U32, 1),
    F(msg_batch_t, layout, WF_LAYOUT, 1), F(msg_batch_t, split, WF_SPLIT, 1),
    F(msg_batch_t, steps_per_epoch, WF_U64, 1),
    F(msg_batch_t, tokens, WF_TOKENS, 1), F(msg_batch_t, mask, WF_MASK, 0),
};
static const wire_field_t info_req_fields[] = {
    F(msg_info_req_t, req_id, WF_U64, 1), F(msg_info_req_t, world, WF_U32, 1),
    F(msg_info_req_t, B, WF_U32, 1),      F(msg_info_req_t, T, WF_U32, 1),
    F(msg_info_req_t, layout, WF_LAYOUT, 1), F(msg_info_req_t, split, WF_SPLIT, 1),
};
static const wire_field_t info_fields[] = {
    F(msg_info_t, req_id, WF_U64, 1),     F(msg_info_t, vocab_size, WF_U32, 1),
    F(msg_info_t, eot_id, WF_U32, 1),     F(msg_info_t, n_docs, WF_U64, 1),
    F(msg_info_t, n_tokens, WF_U64, 1),   F(msg_info_t, n_bytes, WF_U64, 1),
    F(msg_info_t, steps_per_epoch, WF_U64, 1),
    F(msg_info_t, tokenizer, WF_STR, 1),  F(msg_info_t, tokenizer_hash, WF_STR, 1),
    F(msg_info_t, dataset, WF_STR, 1),
};
static const wire_field_t error_fields[] = {
    F(msg_error_t, req_id, WF_U64, 1), F(msg_error_t, code, WF_I32, 1),
    F(msg_error_t, message, WF_STR, 1),
};
static const wire_field_t metrics_fields[] = {
    F(msg_metrics_t, run, WF_NAME, 1), F(msg_metrics_t, step, WF_U64, 1),
    F(msg_metrics_t, time, WF_F64, 1), FN(msg_metrics_t, values, WF_VALUES, 1, n),
    F(msg_metrics_t, precision, WF_NAME, 0),
};
static const wire_field_t ckpt_fields[] = {
    F(msg_ckpt_t, run, WF_NAME, 1), F(msg_ckpt_t, step, WF_U64, 1),
    F(msg_ckpt_t, time, WF_F64, 1), F(msg_ckpt_t, path, WF_STR, 1),
    F(msg_ckpt_t, model, WF_STR, 1),
};
static const wire_field_t ckpt_index_fields[] = {
    FN(msg_ckpt_index_t, items, WF_ITEMS, 1, n),
};
static const wire_field_t eval_fields[] = {
    F(msg_eval_t, run, WF_NAME, 1),  F(msg_eval_t, step, WF_U64, 1),
    F(msg_eval_t, time, WF_F64, 1),  F(msg_eval_t, task, WF_NAME, 1),
    F(msg_eval_t, ckpt, WF_STR, 1),  FN(msg_eval_t, values, WF_VALUES, 1, n),
};
static const wire_field_t loader_fields[] = {
    F(msg_loader_t, name, WF_NAME, 1),    F(msg_loader_t, endpoint, WF_STR, 1),
    F(msg_loader_t, dataset, WF_STR, 1),  F(msg_loader_t, pid, WF_U64, 1),
    F(msg_loader_t, served, WF_U64, 1),
};
static const wire_field_t log_fields[] = {
    F(msg_log_t, program, WF_NAME, 1), F(msg_log_t, line, WF_STR, 1),
};

/* the generation service (bin/sampler --serve) */
static const wire_field_t gen_req_fields[] = {
    F(msg_gen_req_t, req_id, WF_U64, 1),      F(msg_gen_req_t, prompt, WF_STR, 1),
    F(msg_gen_req_t, max_new, WF_U32, 1),     F(msg_gen_req_t, temperature, WF_F64, 1),
    F(msg_gen_req_t, top_k, WF_U32, 1),       F(msg_gen_req_t, top_p, WF_F64, 1),
    F(msg_gen_req_t, seed, WF_U64, 1),        F(msg_gen_req_t, latent, WF_STR, 1),
    F(msg_gen_req_t, index, WF_U32, 1),       F(msg_gen_req_t, group, WF_U32, 1),
    F(msg_gen_req_t, flags, WF_U32, 1),       F(msg_gen_req_t, deadline_ms, WF_U32, 0),
    F(msg_gen_req_t, stream, WF_BOOL, 0),
};
static const wire_field_t gen_fields[] = {
    F(msg_gen_t, req_id, WF_U64, 1), F(msg_gen_t, text, WF_STR, 1),
    F(msg_gen_t, n_tokens, WF_U32, 1), F(msg_gen_t, stop, WF_STR, 1),
    F(msg_gen_t, ckpt, WF_STR, 1), F(msg_gen_t, step, WF_U64, 1),
};
static const wire_field_t gen_part_fields[] = {
    F(msg_gen_part_t, req_id, WF_U64, 1), F(msg_gen_part_t, text, WF_STR, 1),
    F(msg_gen_part_t, n_tokens, WF_U32, 1),
};
static const wire_field_t gen_cancel_fields[] = {
    F(msg_gen_cancel_t, req_id, WF_U64, 1),
};

static const wire_field_t dp_hello_fields[] = {
    F(msg_dp_hello_t, run, WF_NAME, 1),  F(msg_dp_hello_t, rank, WF_U32, 1),
    F(msg_dp_hello_t, world, WF_U32, 1), F(msg_dp_hello_t, pid, WF_U64, 1),
    F(msg_dp_hello_t, host, WF_STR, 1),  F(msg_dp_hello_t, flags, WF_STR, 1),
};
static const wire_field_t dp_welcome_fields[] = {
    F(msg_dp_welcome_t, code, WF_I32, 1),  F(msg_dp_welcome_t, message, WF_STR, 1),
    F(msg_dp_welcome_t, world, WF_U32, 1), F(msg_dp_welcome_t, nccl_id, WF_STR, 1),
};
static const wire_field_t dp_beat_fields[] = {
    F(msg_dp_beat_t, rank, WF_U32, 1), F(msg_dp_beat_t, step, WF_U64, 1),
    F(msg_dp_beat_t, lost, WF_I32, 1), F(msg_dp_beat_t, why, WF_STR, 1),
    F(msg_dp_beat_t, bye, WF_U32, 1),
};

static const wire_field_t stage_fields[] = {
    F(msg_stage_t, program, WF_NAME, 1), F(msg_stage_t, name, WF_NAME, 1),
    F(msg_stage_t, pid, WF_U64, 1),      F(msg_stage_t, run, WF_NAME, 1),
    F(msg_stage_t, endpoint, WF_STR, 1), F(msg_stage_t, state, WF_STR, 1),
    F(msg_stage_t, done, WF_U64, 1),     F(msg_stage_t, bye, WF_BOOL, 0),
};

#define S(nm, arr) {nm, arr, (int)(sizeof arr / sizeof arr[0])}
static const wire_schema_t schemas[MSG_TYPE_COUNT] = {
    [MSG_BATCH_REQ] = S("batch_req", batch_req_fields),
    [MSG_BATCH] = S("batch", batch_fields),
    [MSG_INFO_REQ] = S("info_req", info_req_fields),
    [MSG_INFO] = S("info", info_fields),
    [MSG_ERROR] = S("error", error_fields),
    [MSG_METRICS] = S("metrics", metrics_fields),
    [MSG_CKPT] = S("ckpt", ckpt_fields),
    [MSG_CKPT_INDEX] = S("ckpt_index", ckpt_index_fields),
    [MSG_EVAL] = S("eval", eval_fields),
    [MSG_LOADER] = S("loader", loader_fields),
    [MSG_LOG] = S("log", log_fields),
    [MSG_GEN_REQ] = S("gen_req", gen_req_fields),
    [MSG_GEN] = S("gen", gen_fields),
    [MSG_GEN_PART] = S("gen_part", gen_part_fields),
    [MSG_GEN_CANCEL] = S("gen_cancel", gen_cancel_fields),
    [MSG_DP_HELLO] = S("dp_hello", dp_hello_fields),
    [MSG_DP_WELCOME] = S("dp_welcome", dp_welcome_fields),
    [MSG_DP_BEAT] = S("dp_beat", dp_beat_fields),
    [MSG_STAGE] = S("stage", stage_fields),
};
_Static_assert(sizeof gen_req_fields / sizeof gen_req_fields[0] <= WIRE_SCHEMA_MAX_FIELDS,
               "decoder bookkeeping too small");
_Static_assert(sizeof batch_fields / sizeof batch_fields[0] <= WIRE_SCHEMA_MAX_FIELDS,
               "decoder bookkeeping too small");
/* offsets are stored in 16 bits */
_Static_assert(sizeof(wire_msg_t) < 65536, "offsets do not fit uint16_t");

const wire_schema_t *wire_schema_get(msg_type t) {
    if ((int)t <= MSG_NONE || t >= MSG_TYPE_COUNT) return NULL;
    return &schemas[t];
}

const char *wire_type_name(msg_type t) {
    const wire_schema_t *s = wire_schema_get(t);
    return s ? s->name : "none";
}

msg_type wire_type_from_name(const char *name) {
    if (!name) return MSG_NONE;
    for (int t = MSG_NONE + 1; t < MSG_TYPE_COUNT; t++)
        if (strcmp(schemas[t].name, name) == 0) return (msg_type)t;
    return MSG_NONE;
}

const char *wire_strerror(int status) {
    switch (status) {
    case WIRE_OK: return "ok";
    case WIRE_ERR_MALFORMED: return "malformed message";
    case WIRE_ERR_VERSION: return "unsupported protocol version";
    case WIRE_ERR_TYPE: return "unknown message type";
    case WIRE_ERR_MISSING: return "required field missing";
    case WIRE_ERR_MISTYPED: return "field has the wrong type or value";
    case WIRE_ERR_TRAILING: return "trailing bytes after the message";
    case WIRE_ERR_OVERSIZE: return "message or field too large";
    case WIRE_ERR_NOMEM: return "out of memory";
    case WIRE_ERR_ARG: return "bad argument";
    default: return "unknown wire status";
    }
}

void wire_schema_free_fields(const wire_schema_t *s, void *base) {
    char *b = base;
    for (int i = 0; i < s->n_fields; i++) {
        const wire_field_t *f = &s->fields[i];
        switch (f->kind) {
        case WF_STR: case WF_TOKENS: case WF_MASK: {
            void **p = (void **)(b + f->off);
            free(*p);
            *p = NULL;
            break;
        }
        case WF_ITEMS: {
            msg_ckpt_t **items = (msg_ckpt_t **)(b + f->off);
            uint32_t *n = (uint32_t *)(b + f->off_n);
            if (*items)
                for (uint32_t k = 0; k < *n; k++)
                    wire_schema_free_fields(&schemas[MSG_CKPT], &(*items)[k]);
            free(*items);
            *items = NULL;
            *n = 0;
            break;
        }
        default: break;
        }
    }
}

void wire_msg_free(wire_msg_t *m) {
    if (!m) return;
    const wire_schema_t *s = wire_schema_get(m->type);
    if (s) wire_schema_free_fields(s, &m->u);
    memset(m, 0, sizeof *m);
}

static int str_eq(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return strcmp(a, b) == 0;
}

static int fields_equal(const wire_schema_t *s, const char *a, const char *b) {
    for (int i = 0; i < s->n_fields; i++) {
        const wire_field_t *f = &s->fields[i];
        const char *pa = a + f->off, *pb = b + f->off;
        switch (f->kind) {
        case WF_U64: case WF_F64: /* doubles bitwise, so NaN == NaN for the round trip */
            if (memcmp(pa, pb, 8)) return 0;
            break;
        case WF_U32: case WF_I32:
            if (memcmp(pa, pb, 4)) return 0;
            break;
        case WF_LAYOUT: case WF_SPLIT: case WF_BOOL:
            if (*pa != *pb) return 0;
            break;
        case WF_NAME:
            if (strncmp(pa, pb, WIRE_NAME_LEN)) return 0;
            break;
        case WF_STR:
            if (!str_eq(*(char *const *)pa, *(char *const *)pb)) return 0;
            break;
        case WF_TOKENS: case WF_MASK: {
            const msg_batch_t *ba = (const msg_batch_t *)a, *bb = (const msg_batch_t *)b;
            if (ba->B != bb->B || ba->T != bb->T) return 0;
            size_t n = f->kind == WF_TOKENS ? (size_t)ba->B * ((size_t)ba->T + 1) * 4
                                            : (size_t)ba->B * ba->T;
            const void *xa = *(void *const *)pa, *xb = *(void *const *)pb;
            if (!xa || !xb) {
                if (xa != xb && n) return 0;
            } else if (memcmp(xa, xb, n)) {
                return 0;
            }
            break;
        }
        case WF_VALUES: {
            uint32_t na = *(const uint32_t *)(a + f->off_n), nb = *(const uint32_t *)(b + f->off_n);
            if (na != nb || na > WIRE_MAX_KV) return 0;
            const wire_kv_t *ka = (const wire_kv_t *)pa, *kb = (const wire_kv_t *)pb;
            for (uint32_t k = 0; k < na; k++)
                if (strncmp(ka[k].name, kb[k].name, WIRE_NAME_LEN) ||
                    memcmp(&ka[k].value, &kb[k].value, sizeof(double)))
                    return 0;
            break;
        }
        case WF_ITEMS: {
            uint32_t na = *(const uint32_t *)(a + f->off_n), nb = *(const uint32_t *)(b + f->off_n);
            if (na != nb) return 0;
            const msg_ckpt_t *ia = *(msg_ckpt_t *const *)pa, *ib = *(msg_ckpt_t *const *)pb;
            if (na && (!ia || !ib)) return ia == ib;
            for (uint32_t k = 0; k < na; k++)
                if (!fields_equal(&schemas[MSG_CKPT], (const char *)&ia[k], (const char *)&ib[k]))
                    return 0;
            break;
        }
        }
    }
    return 1;
}

int wire_msg_equal(const wire_msg_t *a, const wire_msg_t *b) {
    if (!a || !b || a->type != b->type) return 0;
    const wire_schema_t *s = wire_schema_get(a->type);
    if (!s) return 1;
    return fields_equal(s, (const char *)&a->u, (const char *)&b->u);
}

int wire_kv_add(wire_kv_t *kv, uint32_t *n, const char *name, double value) {
    if (!kv || !n || !name) return WIRE_ERR_ARG;
    if (strlen(name) > WIRE_NAME_LEN - 1) return WIRE_ERR_OVERSIZE;
    if (*n >= WIRE_MAX_KV) return WIRE_ERR_OVERSIZE;
    memset(kv[*n].name, 0, WIRE_NAME_LEN);
    memcpy(kv[*n].name, name, strlen(name));
    kv[*n].value = value;
    (*n)++;
    return WIRE_OK;
}

int wire_field_present(const wire_field_t *f, const char *base) {
    if (f->kind == WF_MASK) return *(void *const *)(base + f->off) != NULL;
    if (f->kind == WF_NAME && !f->required) return *(base + f->off) != 0;
    return 1;
}
