/* bus/wire_error.c: wire_error_encode, the "error" reply every service sends (see wire.h).
 *
 * The loader and the sampler quote what was wrong with a request, and a request's bytes are
 * whatever the peer sent; cleaning the text here, once, keeps every error reply decodable by
 * clients that insist on UTF-8 strings (msgpack raw=False). */
#include <stdlib.h>
#include <string.h>

#include "bus/utf8.h"
#include "bus/wire.h"

int wire_error_encode(uint64_t req_id, int32_t code, const char *message, void **buf, size_t *len) {
    if (!buf || !len) return WIRE_ERR_ARG;
    const char *text = message ? message : "";
    char clean[WIRE_MAX_STR + 1];
    wire_utf8_clean(clean, sizeof clean, text, strlen(text));
    wire_msg_t m = {.type = MSG_ERROR};
    m.u.error.req_id = req_id;
    m.u.error.code = code;
    m.u.error.message = clean;
    return wire_encode(&m, buf, len);
}
