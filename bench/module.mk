# bench/: `make bench` runs every bench/bench_*.sh, each writing one JSON fragment into
# $(BENCH_OUT); bench/run.sh merges them into bench/results.json and prints the tables.
BENCH_OUT ?= build/bench-out
.PHONY: bench
bench: deps
	@$(MAKE) --no-print-directory all bench-bins
	@BENCH_OUT=$(BENCH_OUT) bash bench/run.sh

BENCH_BINS := build/bench/sgemm
.PHONY: bench-bins
bench-bins: $(BENCH_BINS)

build/bench/sgemm: bench/sgemm.c $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -Wl,--start-group $(LIBS) -Wl,--end-group $(LDLIBS)

# make bench-gpu: GPU training throughput and MFU (bench/gpu.sh); says so when no GPU exists.
.PHONY: bench-gpu
bench-gpu: deps
	@$(MAKE) --no-print-directory all bench-bins
	@bash bench/gpu.sh
