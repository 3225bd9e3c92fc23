/* bus/wire.h: every message that crosses a process, as MessagePack (docs/PROTOCOL.md).
 *
 * A message is one MessagePack map with at least "v" (protocol version, WIRE_VERSION) and
 * "type" (a string, the msg_type names below); the other fields depend on the type. Decoding
 * is strict: wrong version, unknown type, missing or mistyped field (a string that is not
 * UTF-8 included), trailing bytes after the map, or a frame over WIRE_MAX_FRAME give a
 * negative status and a one-line reason in `err`;
 * the decoder never reads outside the buffer it was given. Unknown extra keys are ignored
 * (so a newer peer can add optional fields without breaking older ones).
 *
 * Ownership: wire_decode fills `m`, allocating copies of every variable-size payload (strings,
 * token arrays, masks: `bin` bodies are copied out because they are not aligned); the caller
 * releases them with wire_msg_free. wire_encode reads `m` and allocates *buf (free()). */
#ifndef BUS_WIRE_H
#define BUS_WIRE_H
#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION 1
#define WIRE_MAX_FRAME (256u << 20) /* 256 MiB: far above any batch a trainer asks for */
#define WIRE_MAX_STR 4096           /* strings (paths, messages, names) */
#define WIRE_MAX_KV 64              /* entries of a metrics/eval "values" map */
#define WIRE_NAME_LEN 48            /* metric names, run names, task names */

typedef enum {
    WIRE_OK = 0,
    WIRE_ERR_MALFORMED = -1,   /* not MessagePack, or truncated */
    WIRE_ERR_VERSION = -2,     /* "v" missing or not WIRE_VERSION */
    WIRE_ERR_TYPE = -3,        /* unknown "type" */
    WIRE_ERR_MISSING = -4,     /* a required field is absent */
    WIRE_ERR_MISTYPED = -5,    /* a field has the wrong MessagePack type or an invalid value */
    WIRE_ERR_TRAILING = -6,    /* bytes after the map */
    WIRE_ERR_OVERSIZE = -7,    /* frame or field larger than the limits */
    WIRE_ERR_NOMEM = -8,
    WIRE_ERR_ARG = -9,         /* bad argument to an encode call */
} wire_status;

/* glibc's <sys/socket.h> (pulled in by msgpack.h and by socket code under _GNU_SOURCE)
 * declares an enumerator MSG_BATCH, a sendmmsg flag, which would clash with ours. We take
 * that header first, then make the name MSG_BATCH mean our enumerator WIRE_MSG_BATCH in
 * every file that includes wire.h: code keeps writing MSG_BATCH, and nothing in this
 * project uses the socket flag. */
#include <sys/socket.h>
#ifdef MSG_BATCH
#undef MSG_BATCH
#endif
#define MSG_BATCH WIRE_MSG_BATCH

typedef enum {
    MSG_NONE = 0,
    MSG_BATCH_REQ,   /* trainer -> loader: "batch_req" */
    MSG_BATCH,       /* loader -> trainer: "batch" */
    MSG_INFO_REQ,    /* client -> loader: "info_req" */
    MSG_INFO,        /* loader -> client: "info" */
    MSG_ERROR,       /* any reply: "error" */
    MSG_METRICS,     /* bus event: "metrics" (training step metrics) */
    MSG_CKPT,        /* bus event: "ckpt" (a checkpoint was written) */
    MSG_CKPT_INDEX,  /* bus welcome: "ckpt_index" (latest ckpt of every run seen) */
    MSG_EVAL,        /* bus event: "eval" (evaluation results) */
    MSG_LOADER,      /* bus event: "loader" (a loader announces itself, heartbeat) */
    MSG_LOG,         /* bus event: "log" (a human-readable line from a program) */
    MSG_GEN_REQ,     /* client -> bin/sampler --serve: "gen_req" (added by the sampler) */
    MSG_GEN,         /* bin/sampler --serve -> client: "gen" */
    MSG_GEN_PART,    /* bin/sampler --serve -> client: "gen_part" (streamed text so far) */
    MSG_GEN_CANCEL,  /* client -> bin/sampler --serve: "gen_cancel" */
    MSG_DP_HELLO,    /* trainer rank -> rank 0's rendezvous: "dp_hello" (data parallelism) */
    MSG_DP_WELCOME,  /* rank 0 -> a rank that said hello: "dp_welcome" */
    MSG_DP_BEAT,     /* trainer ranks' heartbeat, both ways: "dp_beat" */
    MSG_STAGE,       /* bus event: "stage" (an evaluator or sampler service announces itself) */
    MSG_TYPE_COUNT
} msg_type;

/* Batch layouts. */
enum { WIRE_PACK = 0, WIRE_PAD = 1 };     /* "layout": "pack" | "pad" */
enum { WIRE_TRAIN = 0, WIRE_VAL = 1 };    /* "split": "train" | "val" */

typedef struct {
    char name[WIRE_NAME_LEN];
    double value;
} wire_kv_t;

typedef struct {
    uint64_t req_id;      /* echoed in the reply */
    uint64_t seed, epoch, step;
    uint32_t rank, world; /* data-parallel rank in [0, world) */
    uint32_t B, T;        /* rows, and tokens per row (the row carries T+1 tokens) */
    uint8_t layout;       /* WIRE_PACK or WIRE_PAD */
    uint8_t split;        /* WIRE_TRAIN or WIRE_VAL */
} msg_batch_req_t;

typedef struct {
    uint64_t req_id, seed, epoch, step;
    uint32_t rank, world, B, T;
    uint8_t layout, split;
    uint64_t steps_per_epoch;
    uint32_t *tokens;     /* (B, T+1) token ids, row-major; "tokens": bin, little-endian u32 */
    uint8_t *mask;        /* (B, T) 1 where the target tokens[b][t+1] counts; NULL = all count.
                             "mask": bin of B*T bytes, or absent */
} msg_batch_t;

typedef struct {
    uint64_t req_id;
    uint32_t world, B, T; /* to compute steps_per_epoch */
    uint8_t layout, split;
} msg_info_req_t;

typedef struct {
    uint64_t req_id;
    uint32_t vocab_size, eot_id;
    uint64_t n_docs, n_tokens, n_bytes; /* of the split served */
    uint64_t steps_per_epoch;           /* for the (world, B, T, layout, split) asked */
    char *tokenizer;                    /* tokenizer name, e.g. "gpt2", "bytes", "bpe" */
    char *tokenizer_hash;               /* hex digest identifying the vocabulary */
    char *dataset;                      /* dataset path as the loader opened it */
} msg_info_t;

typedef struct {
    uint64_t req_id;
    int32_t code;  /* one of the LOADER_E* or service codes documented in PROTOCOL.md */
    char *message; /* one human-readable line */
} msg_error_t;

typedef struct {
    char run[WIRE_NAME_LEN];
    uint64_t step;
    double time;               /* unix seconds */
    uint32_t n;                /* entries used in values */
    wire_kv_t values[WIRE_MAX_KV]; /* "values": map name -> float64 (loss, lr, grad_norm, tok_s...) */
    char precision[WIRE_NAME_LEN]; /* optional: "fp32", "bf16", "tf32" (model/precision.h) */
} msg_metrics_t;

typedef struct {
    char run[WIRE_NAME_LEN];
    uint64_t step;
    double time;
    char *path;    /* checkpoint directory */
    char *model;   /* "llama" | "free" | ... */
} msg_ckpt_t;

typedef struct {
    uint32_t n;
    msg_ckpt_t *items; /* "items": array of ckpt maps (each without "v"/"type") */
} msg_ckpt_index_t;

typedef struct {
    char run[WIRE_NAME_LEN];
    uint64_t step;
    double time;
    char task[WIRE_NAME_LEN];
    char *ckpt;    /* checkpoint path evaluated */
    uint32_t n;
    wire_kv_t values[WIRE_MAX_KV];
} msg_eval_t;

typedef struct {
    char name[WIRE_NAME_LEN];  /* loader instance name */
    char *endpoint;            /* where it serves batch_req */
    char *dataset;
    uint64_t pid;
    uint64_t served;           /* batches served so far */
} msg_loader_t;

typedef struct {
    char program[WIRE_NAME_LEN];
    char *line;
} msg_log_t;

/* Generation service (bin/sampler --serve, docs/PROTOCOL.md 2.4). One request, one sample:
 * a client wanting several asks several times (index 0, 1, ...). */
typedef struct {
    uint64_t req_id;
    char *prompt;          /* text, encoded by the server's vocabulary ("" allowed: see eot) */
    uint32_t max_new;      /* tokens to generate, >= 1 (the server enforces a limit) */
    double temperature;    /* 0: greedy */
    uint32_t top_k;        /* 0: all */
    double top_p;          /* in (0, 1]; 1: all */
    uint64_t seed;
    char *latent;          /* "independent" | "shared" (Free Transformer; ignored otherwise) */
    uint32_t index;        /* which sample of the series (seeding: docs/sampler.md) */
    uint32_t group;        /* samples per shared-latent group, >= 1 */
    uint32_t flags;        /* bit 0: stop at end-of-text; bit 1: put end-of-text before the prompt */
    uint32_t deadline_ms;  /* optional: give up this long after the server received it (0: never) */
    uint8_t stream;        /* optional bool: gen_part messages before the final gen */
} msg_gen_req_t;

typedef struct {
    uint64_t req_id;
    char *text;            /* the generated text (UTF-8; invalid bytes as U+FFFD) */
    uint32_t n_tokens;     /* generated tokens */
    char *stop;            /* "eot" | "length" | "truncated" (text cut at WIRE_MAX_STR bytes) */
    char *ckpt;            /* checkpoint directory that answered */
    uint64_t step;         /* its training step (0 when unknown) */
} msg_gen_t;

/* Data-parallel training (docs/PROTOCOL.md §1.5, trainer/dp_link.h): every rank says hello
 * at rank 0's rendezvous socket, rank 0 answers each with a welcome once all have come, and the
 * same sockets then carry heartbeats. */
typedef struct {
    char run[WIRE_NAME_LEN];
    uint32_t rank, world;
    uint64_t pid;
    char *host;            /* the sender's host name, for messages */
    char *flags;           /* the options every rank must share, as text ("B=4 T=64 ...") */
} msg_dp_hello_t;

typedef struct {
    int32_t code;          /* 0: joined; otherwise refused, message says why */
    char *message;
    uint32_t world;
    char *nccl_id;         /* hex of the NCCL unique id; "" when the collectives are MPI's */
} msg_dp_welcome_t;

typedef struct {
    uint32_t rank;         /* the sender */
    uint64_t step;         /* optimizer steps the sender has done */
    int32_t lost;          /* -1: no rank known lost; k: rank k is lost (rank 0 tells the others) */
    char *why;             /* how rank `lost` was found lost ("" when none) */
    uint32_t bye;          /* 1: the sender leaves in order (the run ended): not a loss */
} msg_dp_beat_t;

typedef struct {
    uint64_t req_id;
    char *text;            /* the text so far (whole characters only) */
    uint32_t n_tokens;     /* tokens generated so far */
} msg_gen_part_t;

typedef struct {
    uint64_t req_id;       /* the request of this connection to drop */
} msg_gen_cancel_t;

/* A stage of the pipeline announcing itself every second (bus/beat.h): who, for which run,
 * where it serves, what it is doing. The loaders have their own "loader" event. */
typedef struct {
    char program[WIRE_NAME_LEN]; /* "evaluator", "sampler" */
    char name[WIRE_NAME_LEN];    /* instance name, unique among that program's instances */
    uint64_t pid;
    char run[WIRE_NAME_LEN];     /* the run it works for ("" when none) */
    char *endpoint;              /* where it serves requests ("" when it serves none) */
    char *state;                 /* one line: what it is doing */
    uint64_t done;               /* evaluations written, or requests answered */
    uint8_t bye;                 /* optional bool: the last beat of a stage stopping in order */
} msg_stage_t;

typedef struct {
    msg_type type;
    union {
        msg_batch_req_t batch_req;
        msg_batch_t batch;
        msg_info_req_t info_req;
        msg_info_t info;
        msg_error_t error;
        msg_metrics_t metrics;
        msg_ckpt_t ckpt;
        msg_ckpt_index_t ckpt_index;
        msg_eval_t eval;
        msg_loader_t loader;
        msg_log_t log;
        msg_gen_req_t gen_req;
        msg_gen_t gen;
        msg_gen_part_t gen_part;
        msg_gen_cancel_t gen_cancel;
        msg_dp_hello_t dp_hello;
        msg_dp_welcome_t dp_welcome;
        msg_dp_beat_t dp_beat;
        msg_stage_t stage;
    } u;
} wire_msg_t;

/* Encodes m as one MessagePack map. *buf is malloc'ed (caller frees), *len its size.
 * WIRE_ERR_ARG for a string or name that is not valid UTF-8 (clean it with wire_utf8_clean,
 * bus/utf8.h), WIRE_ERR_OVERSIZE for one over its limit. */
int wire_encode(const wire_msg_t *m, void **buf, size_t *len);
/* Decodes exactly one map occupying all of buf[0..len). On failure m is left empty (nothing
 * to free) and err holds "what was wrong: where" (always NUL-terminated when errlen > 0). */
int wire_decode(const void *buf, size_t len, wire_msg_t *m, char *err, size_t errlen);
/* What a receiver needs to answer a request that did not decode (docs/PROTOCOL.md §1.3): the
 * type when the header was good, the field the failure is about, and the req_id when it was
 * read before the failure (it comes first in every request's table). */
typedef struct {
    msg_type type;      /* MSG_NONE when "v"/"type" did not decode */
    const char *field;  /* a schema field name (static), NULL when the failure is no field's */
    uint64_t req_id;
    int has_req_id;
} wire_diag_t;
/* wire_decode, also filling *diag (on success too: type, req_id). diag may be NULL. */
int wire_decode_diag(const void *buf, size_t len, wire_msg_t *m, wire_diag_t *diag, char *err,
                     size_t errlen);
/* Encodes the reply "error" {req_id, code, message}. message may hold any bytes (services
 * quote requests in it): it goes out as UTF-8 (invalid bytes as U+FFFD), cut to WIRE_MAX_STR
 * bytes at a character boundary. */
int wire_error_encode(uint64_t req_id, int32_t code, const char *message, void **buf, size_t *len);
/* Releases what wire_decode allocated and zeroes m. Safe on a zeroed message. */
void wire_msg_free(wire_msg_t *m);
const char *wire_strerror(int status);
const char *wire_type_name(msg_type t);      /* "batch_req", ... */
/* Adds name=value to a metrics/eval values map; returns WIRE_ERR_OVERSIZE when full. */
int wire_kv_add(wire_kv_t *kv, uint32_t *n, const char *name, double value);

/* ---- bus events -------------------------------------------------------------------------
 * On the bus an event is ONE ZeroMQ frame: the topic in ASCII, a 0x00 byte, then the
 * MessagePack body. Topics are "<kind>/<run or name>" (e.g. "metrics/brown1", "ckpt/brown1",
 * "eval/brown1", "loader/l0", "log/trainer"), so a prefix subscription "metrics" or
 * "ckpt/brown1" selects what a subscriber wants. One frame (not two) so that the bus's
 * ZMQ_XPUB_WELCOME_MSG, which is a single frame, is an ordinary event: topic "ckpt/",
 * body a ckpt_index message. */
int wire_event_pack(const char *topic, const wire_msg_t *m, void **frame, size_t *len);
/* Splits a frame; topic is copied into topic_out (NUL-terminated, truncated to topic_cap). */
int wire_event_unpack(const void *frame, size_t len, char *topic_out, size_t topic_cap,
                      wire_msg_t *m, char *err, size_t errlen);

/* Writes m as one line of JSON (no trailing newline), topic included when non-NULL; token
 * arrays are summarised by their length, not dumped. Returns bytes written or <0. */
int wire_to_json(const char *topic, const wire_msg_t *m, char *out, size_t cap);

/* ---- additions (bus engineer) -------------------------------------------------------- */
#define WIRE_MAX_ITEMS 4096  /* entries of a ckpt_index "items" array */
#define WIRE_MAX_TOPIC 256   /* bus topic bytes, the NUL separator not counted */
/* The msg_type for a "type" string, MSG_NONE when unknown. */
msg_type wire_type_from_name(const char *name);
/* 1 when a and b carry the same fields (strings by content, NULL == NULL, doubles bitwise,
 * token/mask arrays by content), else 0. For tests and the fuzzer's round-trip check. */
int wire_msg_equal(const wire_msg_t *a, const wire_msg_t *b);
/* Sets one field of m (whose type is already set) from text, as `bin/bus send` takes it:
 * numbers in decimal, strings as they are, layout/split by name. For metrics and eval an
 * unknown key becomes an entry of "values". Strings are malloc'ed (wire_msg_free releases
 * them). Token arrays cannot be set this way. Returns 0 or a negative wire_status. */
int wire_field_set(wire_msg_t *m, const char *key, const char *value, char *err, size_t errlen);
#endif
