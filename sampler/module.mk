# sampler/: extra targets. The generation benchmark's C side (bench/bench_generate.sh builds
# it; it links the sampler library, so it lives with the sampler's rules).
build/bench/generate: bench/generate.c $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -Wl,--start-group $(LIBS) -Wl,--end-group $(LDLIBS)

# The service benchmark's checkpoint writer (bench/bench_serve.sh).
build/bench/serve_ckpt: bench/serve_ckpt.c $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -Wl,--start-group $(LIBS) -Wl,--end-group $(LDLIBS)
