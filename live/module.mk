# live/: bin/live's page and the npm packages it needs, vendored at build time (never committed):
#   uPlot (the curves) from its npm package into build/npm/uplot, built into bin/live by
#     live/embed.sh; when npm is unreachable bin/live is still built, and its page shows the
#     latest values as tables instead of curves (it says so); `make live-vendor` tries again;
#   playwright-core (drives Debian's chromium in tests/it_live.sh) into build/npm/playwright-core,
#     fetched by `make data` like the other npm data.
UPLOT_VERSION      := 1.6.32
# (1.61 is the last playwright-core for Node 18, Debian 12's nodejs: 1.62 and later need Node 20
# and stop at once under 18 -- found by make test in a fresh Debian 12 chroot)
PLAYWRIGHT_VERSION := 1.61.1
LIVE_PAGE   := live/page/index.html live/page/live.js live/page/live.css
UPLOT_FILES := build/npm/uplot/package/dist/uPlot.iife.min.js build/npm/uplot/package/dist/uPlot.min.css
NPM_PACK    := timeout 180 npm pack --silent --fetch-retries=1 --fetch-timeout=30000
.PHONY: live-vendor

# The outcome of the fetch ("ok" or "missing"), remembered so an offline build does not retry
# npm on every make.
build/npm/uplot.state: live/module.mk
	@mkdir -p build/npm
	@if ( [ -f build/npm/uplot-$(UPLOT_VERSION).tgz ] || ( cd build/npm && $(NPM_PACK) uplot@$(UPLOT_VERSION) >/dev/null 2>&1 ) ) \
	    && rm -rf build/npm/uplot && mkdir -p build/npm/uplot \
	    && tar xzf build/npm/uplot-$(UPLOT_VERSION).tgz -C build/npm/uplot && [ -f $(word 1,$(UPLOT_FILES)) ]; then \
	    echo ok > $@; echo "[build] uPlot $(UPLOT_VERSION): vendored from npm into build/npm/uplot"; \
	else rm -rf build/npm/uplot; echo missing > $@; \
	    echo "[build] uPlot: npm unreachable, so bin/live's page shows tables instead of curves (make live-vendor tries again)"; fi

live-vendor:
	@rm -f build/npm/uplot.state
	@$(MAKE) --no-print-directory bin/live

build/live/assets.c: $(LIVE_PAGE) live/embed.sh build/npm/uplot.state
	@mkdir -p $(@D)
	bash live/embed.sh $@ '/|text/html; charset=utf-8|live/page/index.html' \
	    '/live.js|text/javascript; charset=utf-8|live/page/live.js' '/live.css|text/css; charset=utf-8|live/page/live.css' \
	    '/uPlot.iife.min.js|text/javascript; charset=utf-8|$(word 1,$(UPLOT_FILES))' \
	    '/uPlot.min.css|text/css; charset=utf-8|$(word 2,$(UPLOT_FILES))'

build/live/assets.o: build/live/assets.c $(LIVE_PAGE) $(FLAGS_STAMP)
	$(CC) $(CFLAGS) -c $< -o $@

build/liblive.a: build/live/assets.o
bin/live: LDLIBS += -lmicrohttpd
# only the libraries it calls: the BLAS, CUDA and MPI ones others need would cost it ~100 MB of memory
bin/live: LDFLAGS += -Wl,--as-needed

# playwright-core for the browser test (no dependencies of its own; never `npx playwright install`:
# the browser is Debian's chromium)
# (the marker names the version, so a new PLAYWRIGHT_VERSION is fetched over an older one)
build/npm/playwright-core/version-$(PLAYWRIGHT_VERSION):
	@mkdir -p build/npm
	@cd build/npm && $(call npm_pack,playwright-core@$(PLAYWRIGHT_VERSION))
	@rm -rf build/npm/playwright-core && mkdir -p build/npm/playwright-core
	tar xzf build/npm/playwright-core-$(PLAYWRIGHT_VERSION).tgz -C build/npm/playwright-core
	@touch $@
data: build/npm/playwright-core/version-$(PLAYWRIGHT_VERSION)

# bench/bench_live.sh's page clients
build/bench/live_clients: bench/live_clients.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -o $@ $<
