/* tests/test_sample.c: token sampling against distributions known in closed form. */
#include "model/sample.h"
#include "tests/check.h"
#include <stdlib.h>
#include <string.h>

#define V 8
static const float Z[V] = {1.0f, 3.0f, -2.0f, 2.5f, 0.0f, 3.0f, -1.0f, 0.5f};

static sample_t *mk(int v) {
    char err[128];
    sample_t *s = NULL;
    CHECK(sample_create(&s, v, err, sizeof err) == 0, "%s", err);
    return s;
}

/* softmax(Z / t) in double */
static void softmax(double *p, double t) {
    double mx = -1e30, sum = 0;
    for (int i = 0; i < V; i++) mx = Z[i] > mx ? Z[i] : mx;
    for (int i = 0; i < V; i++) sum += p[i] = exp((Z[i] - mx) / t);
    for (int i = 0; i < V; i++) p[i] /= sum;
}

static void test_greedy(void) {
    sample_t *s = mk(V);
    rng_t r;
    rng_seed(&r, 1);
    rng_t r0 = r;
    sample_opts_t o = {0.0f, 0, 1.0f};
    /* ids 1 and 5 tie at 3.0: greedy takes the first */
    CHECK(sample_pick(s, Z, &o, &r) == 1);
    CHECK(memcmp(&r, &r0, sizeof r) == 0, "greedy draws nothing");
    o = (sample_opts_t){1.0f, 1, 1.0f};
    for (int i = 0; i < 50; i++) CHECK(sample_pick(s, Z, &o, &r) == 1, "top-k 1 is the argmax");
    CHECK(sample_argmax(Z, V) == 1);
    /* a temperature with no float reciprocal (1e-40: subnormal) is greedy over the tie, not NaN */
    o = (sample_opts_t){1e-40f, 0, 1.0f};
    float p[V];
    sample_probs(s, Z, &o, p);
    float rest = 0.0f;
    for (int i = 0; i < V; i++) rest += (i == 1 || i == 5) ? 0.0f : p[i];
    CHECK(p[1] == 0.5f && p[5] == 0.5f && rest == 0.0f, "tiny temperature: p[1] %g p[5] %g rest %g", p[1], p[5], rest);
    for (int i = 0; i < 50; i++) {
        uint32_t id = sample_pick(s, Z, &o, &r);
        CHECK(id == 1 || id == 5, "tiny temperature picked %u", id);
    }
    sample_destroy(&s);
    CHECK(s == NULL);
}

static void test_probs_plain(void) {
    sample_t *s = mk(V);
    float p[V];
    double q[V];
    for (double t = 0.5; t <= 2.0; t *= 2) {
        sample_opts_t o = {(float)t, 0, 1.0f};
        CHECK(sample_probs(s, Z, &o, p) == V);
        softmax(q, t);
        /* float output of a double computation: 1e-6 relative covers the final rounding */
        for (int i = 0; i < V; i++) CHECK_CLOSE(p[i], q[i], 1e-7, 1e-6);
    }
    sample_destroy(&s);
}

static void test_top_k(void) {
    sample_t *s = mk(V);
    float p[V];
    double q[V];
    sample_opts_t o = {1.0f, 3, 1.0f};
    CHECK(sample_probs(s, Z, &o, p) == 3);
    softmax(q, 1.0);
    /* kept: 1, 5 (3.0) and 3 (2.5), renormalised */
    double kept = q[1] + q[5] + q[3];
    for (int i = 0; i < V; i++) {
        double want = (i == 1 || i == 5 || i == 3) ? q[i] / kept : 0.0;
        CHECK_CLOSE(p[i], want, 1e-7, 1e-6);
    }
    sample_destroy(&s);
}

/* top-p keeps the smallest prefix (by decreasing probability) whose mass reaches p. */
static void test_top_p(void) {
    sample_t *s = mk(V);
    float p[V];
    double q[V];
    softmax(q, 1.0);
    int order[V] = {1, 5, 3, 0, 7, 4, 6, 2};  /* decreasing Z, ties by id */
    for (double pp = 0.05; pp <= 1.0; pp += 0.05) {
        int want_n = 0;
        double cum = 0;
        while (want_n < V && cum < pp) cum += q[order[want_n++]];
        sample_opts_t o = {1.0f, 0, (float)pp};
        int n = sample_probs(s, Z, &o, p);
        /* a p within float rounding of a prefix sum may legitimately land on either side */
        int near = 0;
        double c2 = 0;
        for (int i = 0; i < V; i++) { c2 += q[order[i]]; if (fabs(c2 - pp) < 1e-6) near = 1; }
        if (near) continue;
        CHECK(n == want_n, "top-p %.2f kept %d, want %d", pp, n, want_n);
        for (int i = 0; i < V; i++) {
            int in = 0;
            for (int j = 0; j < want_n; j++) in |= order[j] == i;
            CHECK_CLOSE(p[i], in ? q[i] / cum : 0.0, 1e-7, 1e-6);
        }
    }
    sample_destroy(&s);
}

/* Empirical frequencies over many draws match the distribution: with n = 200000 draws the
 * standard deviation of a frequency is sqrt(p(1-p)/n) <= 0.0012; 5 sigma is 0.006. */
static void test_frequencies(void) {
    sample_t *s = mk(V);
    const int n = 200000;
    sample_opts_t opts[] = {{0.7f, 0, 1.0f}, {1.3f, 4, 1.0f}, {1.0f, 0, 0.8f}};
    for (int k = 0; k < 3; k++) {
        float p[V];
        sample_probs(s, Z, &opts[k], p);
        int cnt[V] = {0};
        rng_t r;
        rng_seed(&r, 100 + k);
        for (int i = 0; i < n; i++) cnt[sample_pick(s, Z, &opts[k], &r)]++;
        for (int i = 0; i < V; i++) {
            CHECK_CLOSE((double)cnt[i] / n, p[i], 0.006, 0.0);
            if (p[i] == 0.0f) CHECK(cnt[i] == 0, "filtered id %d drawn %d times", i, cnt[i]);
        }
    }
    sample_destroy(&s);
}

static void test_seeded(void) {
    sample_t *s = mk(V);
    sample_opts_t o = {1.0f, 0, 0.9f};
    rng_t a, b;
    rng_seed(&a, 42);
    rng_seed(&b, 42);
    int same = 1;
    for (int i = 0; i < 200; i++) same &= sample_pick(s, Z, &o, &a) == sample_pick(s, Z, &o, &b);
    CHECK(same, "same seed, same draws");
    rng_seed(&b, 43);
    int diff = 0;
    for (int i = 0; i < 200; i++) diff |= sample_pick(s, Z, &o, &a) != sample_pick(s, Z, &o, &b);
    CHECK(diff, "another seed, other draws");
    sample_destroy(&s);
}

static void test_opts_check(void) {
    char err[128];
    sample_opts_t o = SAMPLE_OPTS_DEFAULT;
    CHECK(sample_opts_check(&o, err, sizeof err) == 0);
    o.temperature = -1;
    CHECK(sample_opts_check(&o, err, sizeof err) < 0 && strstr(err, "temperature"));
    o = SAMPLE_OPTS_DEFAULT; o.temperature = NAN;
    CHECK(sample_opts_check(&o, err, sizeof err) < 0);
    o = SAMPLE_OPTS_DEFAULT; o.top_p = 0;
    CHECK(sample_opts_check(&o, err, sizeof err) < 0 && strstr(err, "top-p"));
    o = SAMPLE_OPTS_DEFAULT; o.top_p = 1.5f;
    CHECK(sample_opts_check(&o, err, sizeof err) < 0);
    sample_t *s = NULL;
    CHECK(sample_create(&s, 0, err, sizeof err) < 0 && s == NULL);
}

/* A large vocabulary with -inf logits (masked ids) never yields a masked id. */
static void test_masked(void) {
    const int n = 1000;
    float *z = malloc(sizeof(float) * n);
    for (int i = 0; i < n; i++) z[i] = (i % 7 == 3) ? 0.5f : -INFINITY;
    sample_t *s = mk(n);
    rng_t r;
    rng_seed(&r, 3);
    sample_opts_t o = SAMPLE_OPTS_DEFAULT;
    int bad = 0;
    for (int i = 0; i < 2000; i++) bad += sample_pick(s, z, &o, &r) % 7 != 3;
    CHECK(bad == 0, "%d masked ids drawn", bad);
    sample_destroy(&s);
    free(z);
}

int main(void) {
    RUN(test_greedy);
    RUN(test_probs_plain);
    RUN(test_top_k);
    RUN(test_top_p);
    RUN(test_frequencies);
    RUN(test_seeded);
    RUN(test_opts_check);
    RUN(test_masked);
    return check_summary();
}
