/* tests/fuzz/fuzz_wire.c: libFuzzer target for the wire decoder.
 *
 * Feeds the input to wire_decode (as a message) and to wire_event_unpack (as a bus event);
 * whatever decodes must re-encode, decode again to an equal message (decode(encode(m)) == m),
 * and print as JSON. Built by `make fuzz` with clang -fsanitize=fuzzer,address,undefined, so
 * an out-of-bounds read, a leak or undefined behaviour stops the run.
 *
 * With -DFUZZ_WRITE_CORPUS it is instead a small program that writes one valid event frame
 * per message type into the directory given as argv[1] (the seed corpus). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bus/wire.h"

static void round_trip(const wire_msg_t *m) {
    void *buf = NULL;
    size_t len = 0;
    int rc = wire_encode(m, &buf, &len);
    if (rc != WIRE_OK) {
        fprintf(stderr, "decoded %s does not re-encode: %s\n", wire_type_name(m->type),
                wire_strerror(rc));
        abort();
    }
    wire_msg_t again;
    char err[256];
    rc = wire_decode(buf, len, &again, err, sizeof err);
    if (rc != WIRE_OK || !wire_msg_equal(m, &again)) {
        fprintf(stderr, "round trip of %s failed: %s\n", wire_type_name(m->type),
                rc ? err : "messages differ");
        abort();
    }
    static char json[1 << 20];
    wire_to_json("t", m, json, sizeof json); /* may be OVERSIZE; must not crash */
    wire_msg_free(&again);
    free(buf);
}

#ifndef FUZZ_WRITE_CORPUS
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wire_msg_t m;
    char err[256], topic[64];
    if (wire_decode(data, size, &m, err, sizeof err) == WIRE_OK) {
        round_trip(&m);
        wire_msg_free(&m);
    } else if (m.type != MSG_NONE) {
        abort(); /* a failed decode must leave m empty */
    }
    if (wire_event_unpack(data, size, topic, sizeof topic, &m, err, sizeof err) == WIRE_OK) {
        round_trip(&m);
        wire_msg_free(&m);
    }
    return 0;
}
#else
/* One small valid message of each type, written as bus events "<type>/seed\0<msgpack>". */
int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    static uint32_t tokens[2 * 5];
    static uint8_t mask[2 * 4] = {1, 1, 0, 1, 1, 1, 1, 0};
    for (int i = 0; i < 10; i++) tokens[i] = (uint32_t)(i * 7919);
    msg_ckpt_t items[2] = {{.run = "r1", .step = 100, .time = 1.5, .path = "/c/1", .model = "free"},
                           {.run = "r2", .step = 9, .time = 2.5, .path = "/c/2", .model = NULL}};
    wire_msg_t msgs[MSG_TYPE_COUNT] = {0};
    for (int t = 1; t < MSG_TYPE_COUNT; t++) msgs[t].type = (msg_type)t;
    msgs[MSG_BATCH_REQ].u.batch_req = (msg_batch_req_t){.req_id = 1, .seed = 2, .epoch = 3,
        .step = 4, .rank = 0, .world = 1, .B = 2, .T = 4, .layout = WIRE_PAD, .split = WIRE_VAL};
    msgs[MSG_BATCH].u.batch = (msg_batch_t){.req_id = 1, .seed = 2, .B = 2, .T = 4, .world = 1,
        .steps_per_epoch = 10, .tokens = tokens, .mask = mask};
    msgs[MSG_INFO_REQ].u.info_req = (msg_info_req_t){.req_id = 5, .world = 1, .B = 8, .T = 64};
    msgs[MSG_INFO].u.info = (msg_info_t){.req_id = 5, .vocab_size = 256, .eot_id = 0,
        .n_docs = 3, .n_tokens = 300, .n_bytes = 290, .steps_per_epoch = 1,
        .tokenizer = "bytes", .tokenizer_hash = "00ff", .dataset = "/d"};
    msgs[MSG_ERROR].u.error = (msg_error_t){.req_id = 6, .code = -4, .message = "bad B"};
    msgs[MSG_METRICS].u.metrics = (msg_metrics_t){.run = "r1", .step = 10, .time = 3.5};
    wire_kv_add(msgs[MSG_METRICS].u.metrics.values, &msgs[MSG_METRICS].u.metrics.n, "loss", 3.25);
    wire_kv_add(msgs[MSG_METRICS].u.metrics.values, &msgs[MSG_METRICS].u.metrics.n, "lr", 1e-3);
    msgs[MSG_CKPT].u.ckpt = items[0];
    msgs[MSG_CKPT_INDEX].u.ckpt_index = (msg_ckpt_index_t){.n = 2, .items = items};
    msgs[MSG_EVAL].u.eval = (msg_eval_t){.run = "r1", .step = 100, .task = "val", .ckpt = "/c/1"};
    wire_kv_add(msgs[MSG_EVAL].u.eval.values, &msgs[MSG_EVAL].u.eval.n, "ppl", 12.5);
    msgs[MSG_LOADER].u.loader = (msg_loader_t){.name = "l0", .endpoint = "ipc:///tmp/l0",
        .dataset = "/d", .pid = 42, .served = 7};
    msgs[MSG_LOG].u.log = (msg_log_t){.program = "trainer", .line = "hello"};
    msgs[MSG_STAGE].u.stage = (msg_stage_t){.program = "evaluator", .name = "val-1", .pid = 42, .run = "r1",
        .endpoint = "", .state = "idle", .done = 2};
    for (int t = 1; t < MSG_TYPE_COUNT; t++) {
        char topic[64], path[512];
        snprintf(topic, sizeof topic, "%s/seed", wire_type_name((msg_type)t));
        void *frame;
        size_t len;
        if (wire_event_pack(topic, &msgs[t], &frame, &len) != WIRE_OK) return 1;
        snprintf(path, sizeof path, "%s/%s.event", argv[1], wire_type_name((msg_type)t));
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(frame, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "write %s failed\n", path);
            return 1;
        }
        /* the bare message too, so wire_decode starts from valid input as well */
        size_t tl = strlen(topic) + 1;
        snprintf(path, sizeof path, "%s/%s.msg", argv[1], wire_type_name((msg_type)t));
        f = fopen(path, "wb");
        if (!f || fwrite((char *)frame + tl, 1, len - tl, f) != len - tl || fclose(f) != 0) {
            fprintf(stderr, "write %s failed\n", path);
            return 1;
        }
        free(frame);
    }
    return 0;
}
#endif
