# tests/emu/module.mk: the execution-model emulator (docs/DEVICES.md, "The emulator"): the CUDA
# device (model/device_cuda.cu) and the NCCL transport (trainer/dp_nccl.c) built against the
# shim headers of tests/emu/include and run on the CPU, under AddressSanitizer.
#
#   build/emu/libemu.a                 the emulator (tests/emu/emu_*.cc)
#   build/emu/model/device_cuda.cu.o   device_cuda.cu after tests/emu/prepass.sh, compiled by clang++
#                                      with every load and store observed (trace-loads/stores)
#   build/emu/trainer/dp_nccl.o        dp_nccl.c against the shim's cuda_runtime_api.h and nccl.h
#   build/emu/tests/test_*             test binaries linked with them (run by tests/it_emu*.sh,
#                                      once each, not once per ISA level)
#   build/emu/bin/trainer, sampler     bin/trainer (with the emulated NCCL) and bin/sampler on the
#                                      emulated CUDA device
# Needs clang++ (DEPS_TEST: clang, libclang-rt-dev), not nvcc: a clean clone without the CUDA
# toolkit builds and runs it too.
EMU_CXX ?= $(shell command -v clang++ 2>/dev/null)
ifeq ($(EMU_CXX),)
  $(info [build] clang++: not found, the emulated CUDA device is not built (make deps installs clang))
else
EMU_SAN      := -fsanitize=address -fno-omit-frame-pointer
EMU_CXXFLAGS := -g -std=c++20 -Wall -Wno-unused-function -I. -Itests/emu/include $(EMU_SAN) -MMD -MP
# every load, store and memcpy of the emulated .cu files calls the emulator: AddressSanitizer's
# checks as calls, renamed __emu_* (emu_sched.cc passes each on to the real check), none left out
# as provably safe; no vector code, so a thread's accesses are the ones its source makes
EMU_COV      := -mllvm -asan-instrumentation-with-call-threshold=0 -mllvm -asan-memory-access-callback-prefix=__emu_ \
                -mllvm -asan-opt=0 -fno-vectorize -fno-slp-vectorize
EMU_HDRS     := $(wildcard tests/emu/*.h tests/emu/include/*.h)
EMU_RT_OBJS  := $(patsubst tests/emu/%.cc,build/emu/rt/%.o,$(filter-out tests/emu/emu_perf.cc,$(wildcard tests/emu/emu_*.cc)))
EMU_LDLIBS    = $(filter-out -lcublas -lcudart -lnccl,$(LDLIBS)) -lgomp
EMU_DEVICE   := build/emu/model/device_cuda.cu.o
EMU_NCCL     := build/emu/trainer/dp_nccl.o
EMU_BINS     := build/emu/tests/test_device_compare build/emu/tests/test_emu build/emu/tests/test_cuda_device build/emu/bin/trainer build/emu/bin/sampler
EMU_LLVM_CONFIG ?= $(shell v=$$($(EMU_CXX) -dumpversion | cut -d. -f1); command -v llvm-config-$$v 2>/dev/null || command -v llvm-config 2>/dev/null)
ifneq ($(EMU_LLVM_CONFIG),)
EMU_BINS     += build/emu/tests/test_emu_perf build/emu/bench/train_step
else
  $(info [build] llvm-config: not found, the emulator's performance model is not built (make deps installs llvm-dev))
endif
$(info [build] emulated CUDA device: $(EMU_CXX) ($(shell $(EMU_CXX) --version | head -1)))

build/emu/rt/%.o: tests/emu/%.cc $(EMU_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_CXXFLAGS) -O2 -c $< -o $@

build/emu/libemu.a: $(EMU_RT_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

# a .cu file as C++ (launches rewritten), then compiled with nvcc's implicit header forced in
build/emu/%.cu.cc: %.cu tests/emu/prepass.sh
	@mkdir -p $(@D)
	sh tests/emu/prepass.sh $< $@
build/emu/%.cu.o: build/emu/%.cu.cc $(EMU_HDRS) $(FLAGS_STAMP)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_COV) -O2 -include cuda_runtime.h -include emu_project.h -c $< -o $@
build/emu/tests/%.cu.cc: tests/emu/%.cu tests/emu/prepass.sh
	@mkdir -p $(@D)
	sh tests/emu/prepass.sh $< $@

$(EMU_NCCL): trainer/dp_nccl.c $(EMU_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) -Itests/emu/include $(filter-out -I$(CUDA_HOME)/include,$(CFLAGS)) -DFT_HAVE_CUDA -c $< -o $@

build/emu/tests/test_device_compare: build/tests/test_device_compare.o $(EMU_DEVICE) build/emu/libemu.a $(LIBS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_SAN) -o $@ $< $(EMU_DEVICE) build/emu/libemu.a -Wl,--start-group $(LIBS) -Wl,--end-group $(EMU_LDLIBS)
build/emu/tests/test_cuda_device.o: tests/emu/test_cuda_device.c $(EMU_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) -Itests/emu/include $(filter-out -I$(CUDA_HOME)/include,$(CFLAGS)) -c $< -o $@
build/emu/tests/test_cuda_device: build/emu/tests/test_cuda_device.o $(EMU_DEVICE) build/emu/libemu.a $(LIBS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_SAN) -o $@ $< $(EMU_DEVICE) build/emu/libemu.a -Wl,--start-group $(LIBS) -Wl,--end-group $(EMU_LDLIBS)
build/emu/tests/test_emu: build/emu/tests/test_emu.cu.o build/emu/libemu.a $(LIBS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_SAN) -o $@ $< build/emu/libemu.a -Wl,--start-group $(LIBS) -Wl,--end-group $(EMU_LDLIBS)
build/emu/bin/trainer: build/trainer/main.o $(EMU_DEVICE) $(EMU_NCCL) build/emu/libemu.a $(LIBS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_SAN) -o $@ $< $(EMU_DEVICE) $(EMU_NCCL) build/emu/libemu.a -Wl,--start-group $(LIBS) -Wl,--end-group $(EMU_LDLIBS)
build/emu/bin/sampler: build/sampler/main.o $(EMU_DEVICE) build/emu/libemu.a $(LIBS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_SAN) -o $@ $< $(EMU_DEVICE) build/emu/libemu.a -Wl,--start-group $(LIBS) -Wl,--end-group $(EMU_LDLIBS)

# The performance model (bench/gpu_model.sh, docs/DEVICES.md "The performance model"): the same
# device objects compiled once more with tests/emu/flops_pass.cc (an LLVM pass plugin that counts
# each basic block's floating-point operations), linked with the counters of tests/emu/emu_perf.cc
# into build/emu/bench/train_step. Needs LLVM's development files of clang's version (llvm-dev).
EMU_FLOPS_SO    := build/emu/libemu_flops.so
EMU_PERF_DEVICE := $(patsubst build/emu/%,build/emu/perf/%,$(EMU_DEVICE))
build/emu/libemu_flops.so: tests/emu/flops_pass.cc
	@mkdir -p $(@D)
	@[ -n "$(EMU_LLVM_CONFIG)" ] || { echo "$@: llvm-config not found (make deps installs llvm-dev)"; exit 1; }
	$(EMU_CXX) -shared -fPIC -O1 $$($(EMU_LLVM_CONFIG) --cxxflags) $< -o $@
build/emu/perf/%.cu.o: build/emu/%.cu.cc $(EMU_HDRS) $(EMU_FLOPS_SO) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_COV) -fpass-plugin=$(EMU_FLOPS_SO) -O2 -include cuda_runtime.h -include emu_project.h -c $< -o $@
build/emu/tests/test_emu_perf.cu.o: build/emu/tests/test_emu_perf.cu.cc $(EMU_HDRS) $(EMU_FLOPS_SO) $(FLAGS_STAMP)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(EMU_COV) -fpass-plugin=$(EMU_FLOPS_SO) -O2 -include cuda_runtime.h -include emu_project.h -c $< -o $@
build/emu/tests/test_emu_perf: build/emu/tests/test_emu_perf.cu.o build/emu/libemu.a $(LIBS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_SAN) -o $@ $< build/emu/libemu.a -Wl,--start-group $(LIBS) -Wl,--end-group $(EMU_LDLIBS)
build/emu/perf/emu_perf.o: tests/emu/emu_perf.cc $(EMU_HDRS) $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_CXXFLAGS) -O2 -c $< -o $@
build/emu/bench/train_step: build/bench/train_step.o $(EMU_PERF_DEVICE) build/emu/perf/emu_perf.o build/emu/libemu.a $(LIBS)
	@mkdir -p $(@D)
	$(EMU_CXX) $(EMU_SAN) -o $@ $< $(EMU_PERF_DEVICE) build/emu/perf/emu_perf.o build/emu/libemu.a -Wl,--start-group $(LIBS) -Wl,--end-group $(EMU_LDLIBS)
.PHONY: bench-gpu-model
bench-gpu-model: build/emu/bench/train_step
	@bash bench/gpu_model.sh

.PRECIOUS: build/emu/%.cu.cc
.PHONY: emu
emu: $(EMU_BINS)
all: emu
endif
