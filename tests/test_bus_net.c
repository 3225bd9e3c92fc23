/* tests/test_bus_net.c: who may talk to whom (bus/net.h, bus/keys.h): key files written and
 * read back (mode, atomic replacement, '#' as a key's first digit, line-numbered errors), the
 * endpoints counted as local, the policy that refuses clear text to anything else, and CURVE
 * on a loopback TCP port: an authorized client is answered, a client with another key, one
 * trusting the wrong server key, and one without CURVE are not; a frame over the size limit
 * is refused by the server while its next client is served. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "bus/keys.h"
#include "bus/net.h"
#include "tests/check.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" /* CHECK(cond) without a message */

static char dir[256];

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", dir, name); }

static void write_file(const char *name, const char *text, mode_t mode) {
    char p[512];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    chmod(p, mode);
}

static void test_local_endpoints(void) {
    static const char *local[] = {"ipc:///tmp/x", "inproc://a", "tcp://127.0.0.1:5710", "tcp://127.9.8.7:1",
                                  "tcp://localhost:5", "tcp://[::1]:5", "tcp://10.0.0.1:4;127.0.0.1:5"};
    static const char *remote[] = {"tcp://0.0.0.0:5710", "tcp://*:5710", "tcp://10.0.0.1:5", "tcp://128.0.0.1:5",
                                   "tcp://lo:5", "tcp://127.0.0.1.evil.com:5", "tcp://example.org:5",
                                   "pgm://eth0;239.0.0.1:5", "tcp://127.0.0.1", "ws://127.0.0.1:5"};
    for (size_t i = 0; i < sizeof local / sizeof *local; i++)
        CHECK(bus_net_endpoint_local(local[i]), "%s should be local", local[i]);
    for (size_t i = 0; i < sizeof remote / sizeof *remote; i++)
        CHECK(!bus_net_endpoint_local(remote[i]), "%s should not be local", remote[i]);
}

static void test_key_files(void) {
    char prefix[300], p[320], err[512];
    path_of(prefix, sizeof prefix, "k1");
    bus_keypair_t kp, back;
    CHECK(bus_keys_generate(&kp, err, sizeof err) == 0, "%s", err);
    CHECK(bus_keys_write(prefix, &kp, "node one", 0, err, sizeof err) == 0, "%s", err);
    snprintf(p, sizeof p, "%s.key", prefix);
    struct stat st;
    CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600, "mode %o", st.st_mode & 0777);
    CHECK(bus_keys_read_pair(p, &back, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(back.pub, kp.pub) && !strcmp(back.sec, kp.sec));
    /* not replaced without force, replaced with it */
    bus_keypair_t kp2;
    bus_keys_generate(&kp2, err, sizeof err);
    CHECK(bus_keys_write(prefix, &kp2, "x", 0, err, sizeof err) == BUS_ERR_REFUSED && strstr(err, "exists"));
    CHECK(bus_keys_read_pair(p, &back, err, sizeof err) == 0 && !strcmp(back.pub, kp.pub), "kept");
    CHECK(bus_keys_write(prefix, &kp2, "x", 1, err, sizeof err) == 0, "%s", err);
    CHECK(bus_keys_read_pair(p, &back, err, sizeof err) == 0 && !strcmp(back.pub, kp2.pub), "replaced");
    /* a secret key others can read is refused */
    chmod(p, 0644);
    CHECK(bus_keys_read_pair(p, &back, err, sizeof err) == BUS_ERR_REFUSED && strstr(err, "chmod 600"), "%s", err);
    chmod(p, 0600);
    /* a pair whose halves do not belong together */
    char text[256];
    snprintf(text, sizeof text, "public %s\nsecret %s\n", kp.pub, kp2.sec);
    write_file("mixed.key", text, 0600);
    path_of(p, sizeof p, "mixed.key");
    CHECK(bus_keys_read_pair(p, &back, err, sizeof err) == BUS_ERR_REFUSED && strstr(err, "not the secret"));
    /* the .pub file is one line: key and name */
    snprintf(p, sizeof p, "%s.pub", prefix);
    FILE *f = fopen(p, "r");
    char line[256] = "";
    CHECK(f && fgets(line, sizeof line, f));
    if (f) fclose(f);
    CHECK(!strncmp(line, kp2.pub, 40) && strstr(line, " x\n"), "%s", line);
}

static void test_lists(void) {
    char text[1024], p[320], err[512];
    bus_keypair_t a, b;
    bus_keys_generate(&a, err, sizeof err);
    bus_keys_generate(&b, err, sizeof err);
    const char *second = b.pub;
    snprintf(text, sizeof text, "# authorized clients\n\n%s trainer-1\n  %s\n# %s not a key line\n", a.pub, second,
             a.pub);
    write_file("auth", text, 0644);
    path_of(p, sizeof p, "auth");
    char(*keys)[BUS_KEY_Z85] = NULL;
    int n = 0;
    CHECK(bus_keys_read_list(p, &keys, &n, err, sizeof err) == 0, "%s", err);
    CHECK(n == 2 && !strcmp(keys[0], a.pub) && !strcmp(keys[1], second), "n=%d", n);
    free(keys);
    write_file("auth_bad", "# ok\nnot-a-key\n", 0644);
    path_of(p, sizeof p, "auth_bad");
    CHECK(bus_keys_read_list(p, &keys, &n, err, sizeof err) == BUS_ERR_REFUSED && strstr(err, "auth_bad:2:"),
          "%s", err);
    snprintf(text, sizeof text, "tcp://10.0.0.2:* %s\ntcp://127.0.0.1:5710 %s\n* %s\n", a.pub, second, a.pub);
    write_file("trust", text, 0644);
    path_of(p, sizeof p, "trust");
    bus_trust_t *t = NULL;
    CHECK(bus_keys_read_trust(p, &t, &n, err, sizeof err) == 0 && n == 3, "%s", err);
    CHECK(bus_keys_trusted(t, n, "tcp://10.0.0.2:5555") && !strcmp(bus_keys_trusted(t, n, "tcp://10.0.0.2:5555"), a.pub));
    CHECK(!strcmp(bus_keys_trusted(t, n, "tcp://127.0.0.1:5710"), second));
    CHECK(!strcmp(bus_keys_trusted(t, n, "ipc:///x"), a.pub), "the catch-all");
    bus_keys_trust_free(&t, n);
    CHECK(t == NULL);
    write_file("trust_bad", "tcp://x:1\n", 0644);
    path_of(p, sizeof p, "trust_bad");
    CHECK(bus_keys_read_trust(p, &t, &n, err, sizeof err) == BUS_ERR_REFUSED && strstr(err, "trust_bad:1:"),
          "%s", err);
}

/* Without keys: clear text on loopback and ipc only, unless insecure. */
static void test_policy_without_keys(void) {
    char err[512];
    CHECK(bus_net_setup(NULL, err, sizeof err) == 0, "%s", err);
    void *ctx = zmq_ctx_new();
    void *s = bus_net_socket(ctx, ZMQ_ROUTER, BUS_PEER_REQUESTS, err, sizeof err);
    CHECK(bus_net_bind(ctx, s, "tcp://0.0.0.0:*", err, sizeof err) == BUS_ERR_REFUSED);
    CHECK(strstr(err, "--insecure") && strstr(err, "--key") && !strchr(err, '\n'), "one line naming the way out: %s",
          err);
    CHECK(bus_net_connect(s, "tcp://10.1.2.3:5555", err, sizeof err) == BUS_ERR_REFUSED && strstr(err, "--trust"),
          "%s", err);
    char ep[300];
    snprintf(ep, sizeof ep, "ipc://%s/plain", dir);
    CHECK(bus_net_bind(ctx, s, ep, err, sizeof err) == 0, "%s", err);
    CHECK(bus_net_bind(ctx, s, "tcp://127.0.0.1:*", err, sizeof err) == 0, "%s", err);
    zmq_close(s);
    bus_net_opts_t o = {.insecure = 1};
    CHECK(bus_net_setup(&o, err, sizeof err) == 0);
    s = bus_net_socket(ctx, ZMQ_DEALER, BUS_PEER_REPLIES, err, sizeof err);
    CHECK(bus_net_connect(s, "tcp://10.1.2.3:5555", err, sizeof err) == 0, "--insecure allows it: %s", err);
    zmq_close(s);
    /* a key without a list of clients is a server that has not said whom it serves */
    char key[320];
    path_of(key, sizeof key, "k1.key");
    bus_net_opts_t k = {.key = key};
    CHECK(bus_net_setup(&k, err, sizeof err) == 0, "%s", err);
    s = bus_net_socket(ctx, ZMQ_ROUTER, BUS_PEER_REQUESTS, err, sizeof err);
    CHECK(bus_net_bind(ctx, s, "tcp://127.0.0.1:*", err, sizeof err) == BUS_ERR_REFUSED && strstr(err, "--authorized"),
          "%s", err);
    zmq_close(s);
    /* limits: from the options, else the environment, else the default; out of range refused */
    bus_net_opts_t m = {.max_bytes = {[BUS_PEER_REQUESTS] = 5000}};
    setenv("FT_MAX_SUB_BYTES", "123456", 1);
    CHECK(bus_net_setup(&m, err, sizeof err) == 0, "%s", err);
    CHECK(bus_net_max_bytes(BUS_PEER_REQUESTS) == 5000 && bus_net_max_bytes(BUS_PEER_SUB) == 123456 &&
          bus_net_max_bytes(BUS_PEER_EVENTS) == BUS_MAX_EVENTS_BYTES);
    setenv("FT_MAX_SUB_BYTES", "12x", 1);
    CHECK(bus_net_setup(NULL, err, sizeof err) == BUS_ERR_REFUSED && strstr(err, "FT_MAX_SUB_BYTES"), "%s", err);
    unsetenv("FT_MAX_SUB_BYTES");
    m.max_bytes[BUS_PEER_REQUESTS] = 10;
    CHECK(bus_net_setup(&m, err, sizeof err) == BUS_ERR_REFUSED);
    zmq_ctx_term(ctx);
    bus_net_reset();
}

/* Answers every request waiting on the server with "ok" (a poll of ms first). Returns the
 * number of requests answered. */
static int serve(void *router, int ms) {
    int n = 0;
    zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
    while (zmq_poll(&it, 1, ms) > 0) {
        zmq_msg_t f[3];
        int k = 0, more = 1;
        while (more && k < 3) {
            zmq_msg_init(&f[k]);
            zmq_msg_recv(&f[k], router, 0);
            more = zmq_msg_more(&f[k]);
            k++;
        }
        if (k == 3) {
            zmq_msg_send(&f[0], router, ZMQ_SNDMORE);
            zmq_msg_send(&f[1], router, ZMQ_SNDMORE);
            zmq_send(router, "ok", 2, 0);
            n++;
        }
        for (int i = 0; i < k; i++) zmq_msg_close(&f[i]);
        ms = 0;
    }
    return n;
}

/* A client exchange while the server serves: both on this thread, so poll in turns. */
static int exchange(void *router, void *client, const char *body, size_t len) {
    if (zmq_send(client, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return 0;
    if (zmq_send(client, body, len, ZMQ_DONTWAIT) < 0) return 0;
    for (int i = 0; i < 30; i++) {
        serve(router, 50);
        zmq_pollitem_t it = {client, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&it, 1, 50) > 0) {
            char buf[64];
            zmq_recv(client, buf, sizeof buf, 0);
            return zmq_recv(client, buf, sizeof buf, 0) == 2;
        }
    }
    return 0;
}

static void *raw_client(void *ctx, const char *ep, const char *server_key, const bus_keypair_t *me) {
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (server_key) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_key, 40);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, me->pub, 40);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, me->sec, 40);
    }
    zmq_connect(s, ep);
    return s;
}

/* A server bound by host name (the command line every rank shares: tcp://hostA:5730): bound to
 * the name's address; a name that is not this host's, or resolves nowhere, is one clear line. */
static void test_bind_by_host_name(void) {
    char err[512], ep[300];
    CHECK(bus_net_setup(NULL, err, sizeof err) == 0, "%s", err);
    void *ctx = zmq_ctx_new();
    void *s = bus_net_socket(ctx, ZMQ_ROUTER, BUS_PEER_REQUESTS, err, sizeof err);
    CHECK(bus_net_bind(ctx, s, "tcp://localhost:*", err, sizeof err) == 0, "%s", err);
    size_t n = sizeof ep;
    zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &n);
    CHECK(!strncmp(ep, "tcp://127.0.0.1:", 16) || !strncmp(ep, "tcp://[::1]:", 12), "bound as %s", ep);
    void *c = bus_net_socket(ctx, ZMQ_DEALER, BUS_PEER_REPLIES, err, sizeof err);
    CHECK(bus_net_connect(c, ep, err, sizeof err) == 0, "%s", err);
    CHECK(exchange(s, c, "hi", 2), "a client reaches the server bound by name");
    zmq_close(c);
    bus_net_opts_t o = {.insecure = 1}; /* past the policy, to the bind */
    CHECK(bus_net_setup(&o, err, sizeof err) == 0, "%s", err);
    CHECK(bus_net_bind(ctx, s, "tcp://no-such-host.invalid:5999", err, sizeof err) == BUS_ERR_ZMQ &&
              strstr(err, "no-such-host.invalid") && !strchr(err, '\n'),
          "%s", err);
    zmq_close(s);
    zmq_ctx_term(ctx);
    bus_net_reset();
}

static void test_curve_on_loopback(void) {
    char err[512], key[320], auth[320], trust[320], ep[64], text[512];
    CHECK(zmq_has("curve"), "libzmq without CURVE");
    path_of(key, sizeof key, "k1.key");
    bus_keypair_t me, other;
    CHECK(bus_keys_read_pair(key, &me, err, sizeof err) == 0, "%s", err);
    bus_keys_generate(&other, err, sizeof err);
    /* the server authorizes this process's own key only */
    snprintf(text, sizeof text, "%s self\n", me.pub);
    write_file("auth_self", text, 0644);
    path_of(auth, sizeof auth, "auth_self");
    bus_net_opts_t o = {.key = key, .authorized = auth, .max_bytes = {[BUS_PEER_REQUESTS] = 4096}};
    CHECK(bus_net_setup(&o, err, sizeof err) == 0, "%s", err);
    void *ctx = zmq_ctx_new();
    void *router = bus_net_socket(ctx, ZMQ_ROUTER, BUS_PEER_REQUESTS, err, sizeof err);
    CHECK(bus_net_bind(ctx, router, "tcp://127.0.0.1:*", err, sizeof err) == 0, "%s", err);
    size_t n = sizeof ep;
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &n);
    /* now the client side: trust the server's key for this endpoint */
    snprintf(text, sizeof text, "%s %s\n", ep, me.pub);
    write_file("trust_self", text, 0644);
    path_of(trust, sizeof trust, "trust_self");
    bus_net_opts_t c = {.key = key, .authorized = auth, .trust = trust, .max_bytes = {[BUS_PEER_REQUESTS] = 4096}};
    CHECK(bus_net_setup(&c, err, sizeof err) == 0, "%s", err);
    unsigned long long refused0 = bus_net_refused();
    void *good = bus_net_socket(ctx, ZMQ_DEALER, BUS_PEER_REPLIES, err, sizeof err);
    CHECK(bus_net_connect(good, ep, err, sizeof err) == 0, "%s", err);
    CHECK(exchange(router, good, "hi", 2), "the authorized client is answered");
    void *stranger = raw_client(ctx, ep, me.pub, &other);
    CHECK(!exchange(router, stranger, "hi", 2), "a client key not in the list is refused");
    CHECK(bus_net_refused() > refused0, "the handler counted the refusal");
    void *wrong_server = raw_client(ctx, ep, other.pub, &me);
    CHECK(!exchange(router, wrong_server, "hi", 2), "a client trusting another server key gets nothing");
    void *plain = raw_client(ctx, ep, NULL, NULL);
    CHECK(!exchange(router, plain, "hi", 2), "a client without CURVE is refused");
    /* over the 4096-byte limit: the server drops that peer; the next client is served */
    static char big[64 << 10];
    memset(big, 'x', sizeof big);
    CHECK(!exchange(router, good, big, sizeof big), "an oversized frame is not delivered");
    void *again = bus_net_socket(ctx, ZMQ_DEALER, BUS_PEER_REPLIES, err, sizeof err);
    CHECK(bus_net_connect(again, ep, err, sizeof err) == 0, "%s", err);
    CHECK(exchange(router, again, "hi", 2), "a new client is served after it");
    void *socks[] = {good, stranger, wrong_server, plain, again, router};
    for (size_t i = 0; i < sizeof socks / sizeof *socks; i++) zmq_close(socks[i]);
    zmq_ctx_term(ctx); /* returns only when the handler thread has closed its socket */
    bus_net_reset();
}

int main(void) {
    const char *t = getenv("FT_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/test_bus_net.%d", t ? t : "/tmp", (int)getpid());
    mkdir(dir, 0700);
    unsetenv("FT_KEY");
    unsetenv("FT_TRUST");
    unsetenv("FT_AUTHORIZED");
    unsetenv("FT_INSECURE");
    unsetenv("FT_ALLOW_ANY_CLIENT");
    RUN(test_local_endpoints);
    RUN(test_key_files);
    RUN(test_lists);
    RUN(test_policy_without_keys);
    RUN(test_bind_by_host_name);
    RUN(test_curve_on_loopback);
    return check_summary();
}
