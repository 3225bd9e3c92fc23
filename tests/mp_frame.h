/* tests/mp_frame.h: hand-made MessagePack maps, for tests of what a peer may send that our
 * encoder never would (bytes that are not UTF-8, an unknown layout, a wrong type name).
 *
 *   size_t len;
 *   void *f = mp_frame(&len, "ussu", "v", 1ull, "type", "batch_req", "layout", "spiral",
 *                      "req_id", 7ull);
 *
 * One format letter per key/value pair: u = uint64_t, i = int64_t, d = double, s = a C string
 * packed as a msgpack str whatever its bytes. Returns a malloc'ed frame (free it). */
#ifndef TESTS_MP_FRAME_H
#define TESTS_MP_FRAME_H
#include <msgpack.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

static inline void *mp_frame(size_t *len, const char *fmt, ...) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, strlen(fmt));
    va_list ap;
    va_start(ap, fmt);
    for (const char *f = fmt; *f; f++) {
        const char *key = va_arg(ap, const char *);
        msgpack_pack_str(&pk, strlen(key));
        msgpack_pack_str_body(&pk, key, strlen(key));
        if (*f == 'u') msgpack_pack_uint64(&pk, va_arg(ap, uint64_t));
        else if (*f == 'i') msgpack_pack_int64(&pk, va_arg(ap, int64_t));
        else if (*f == 'd') msgpack_pack_double(&pk, va_arg(ap, double));
        else {
            const char *s = va_arg(ap, const char *);
            msgpack_pack_str(&pk, strlen(s));
            msgpack_pack_str_body(&pk, s, strlen(s));
        }
    }
    va_end(ap);
    *len = sb.size;
    return msgpack_sbuffer_release(&sb);
}
#endif
