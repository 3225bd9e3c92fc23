/* live/assets.h: the page's files, built into bin/live (live/embed.sh writes build/live/assets.c
 * at build time: the page from live/page/, uPlot from the npm package the Makefile vendored
 * into build/npm/uplot; live/module.mk). */
#ifndef LIVE_ASSETS_H
#define LIVE_ASSETS_H
#include <stddef.h>

typedef struct {
    const char *path;          /* URL path: "/", "/live.js", ... */
    const char *type;          /* Content-Type */
    const unsigned char *data;
    size_t len;
} live_asset_t;

extern const live_asset_t live_assets[];
extern const int live_n_assets;
extern const int live_have_uplot; /* 0: npm was unreachable at build time (no curves, tables) */
#endif
