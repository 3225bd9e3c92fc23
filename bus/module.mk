# bus/module.mk: targets the bus component owns (included by the Makefile).
#
#   make fuzz                 build the wire-decoder fuzzer and run it FUZZ_SECONDS (60) on
#                             the seed corpus tests/fuzz/corpus/wire (new inputs go to
#                             build/fuzz/corpus, so the committed corpus stays small)
#   make fuzz-corpus          regenerate the seed corpus (one valid frame per message type)
#   make bus-asan             the wire unit test under ASan/UBSan

FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
WIRE_SRCS    := bus/wire.c bus/wire_schema.c bus/json.c bus/wire_text.c bus/utf8.c common/errmsg.c
FUZZ_FLAGS   := -std=gnu11 -g -O1 -I. -D_GNU_SOURCE

build/fuzz/fuzz_wire: tests/fuzz/fuzz_wire.c $(WIRE_SRCS) bus/wire.h bus/wire_schema.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    tests/fuzz/fuzz_wire.c $(WIRE_SRCS) -lmsgpackc -lm -o $@

build/fuzz/write_corpus: tests/fuzz/fuzz_wire.c $(WIRE_SRCS) bus/wire.h bus/wire_schema.h
	@mkdir -p $(@D)
	$(CC) $(FUZZ_FLAGS) -DFUZZ_WRITE_CORPUS tests/fuzz/fuzz_wire.c $(WIRE_SRCS) -lmsgpackc -lm -o $@

.PHONY: fuzz-corpus bus-asan
fuzz-corpus: build/fuzz/write_corpus
	@mkdir -p tests/fuzz/corpus/wire
	build/fuzz/write_corpus tests/fuzz/corpus/wire

fuzz: build/fuzz/fuzz_wire
	@mkdir -p build/fuzz/corpus
	build/fuzz/fuzz_wire -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=1024 \
	    -artifact_prefix=build/fuzz/ build/fuzz/corpus tests/fuzz/corpus/wire

build/fuzz/test_wire_asan: tests/test_wire.c $(WIRE_SRCS) bus/wire.h bus/wire_schema.h
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	    tests/test_wire.c $(WIRE_SRCS) -lmsgpackc -ljansson -lm -o $@

bus-asan: build/fuzz/test_wire_asan
	build/fuzz/test_wire_asan
