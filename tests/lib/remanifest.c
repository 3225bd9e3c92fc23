/* tests/lib/remanifest.c: rewrites a checkpoint's MANIFEST over whatever its files hold now.
 *
 * Usage: remanifest CKPT_DIR. Integration tests build with it the damage a MANIFEST check alone
 * cannot see (a flipped data byte or an impossible config.json under a MANIFEST that matches
 * them), to check that every program applies the checkpoint rule of model/checkpoint.h the
 * same way. Written from docs/FORMATS.md §3 ("MANIFEST") alone, so it also checks that the
 * text there is enough to produce one. Built by the scripts that use it:
 *     cc -o "$W/remanifest" tests/lib/remanifest.c -lxxhash */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static int hash_file(const char *path, unsigned long long *size, unsigned long long *hash) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    XXH3_state_t *s = XXH3_createState();
    XXH3_64bits_reset(s);
    static char buf[1 << 16];
    size_t n;
    *size = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        XXH3_64bits_update(s, buf, n);
        *size += n;
    }
    fclose(f);
    *hash = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: remanifest CKPT_DIR\n");
        return 2;
    }
    const char *dir = argv[1], *base = strrchr(dir, '/');
    const char *digits = strstr(base ? base : dir, "ckpt-");
    if (!digits) {
        fprintf(stderr, "remanifest: %s is not a ckpt-<step> directory\n", dir);
        return 2;
    }
    const char *files[] = {"config.json", "model.safetensors", "optimizer.safetensors", "state.json"};
    char text[4096], path[4096];
    int at = snprintf(text, sizeof text, "ft-checkpoint-manifest 1\nstep %lld\n", atoll(digits + 5));
    for (int i = 0; i < 4; i++) {
        unsigned long long size, hash;
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (hash_file(path, &size, &hash)) continue; /* optimizer.safetensors is optional */
        at += snprintf(text + at, sizeof text - at, "file %s %llu %016llx\n", files[i], size, hash);
    }
    at += snprintf(text + at, sizeof text - at, "end %016llx\n", (unsigned long long)XXH3_64bits(text, at));
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, at, f) != (size_t)at || fclose(f)) {
        fprintf(stderr, "remanifest: cannot write %s\n", path);
        return 1;
    }
    return 0;
}
