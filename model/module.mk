# model/module.mk: targets the model component owns.
#   make fixtures            regenerate the PyTorch reference fixtures (tests/fixtures/llama_*, free_*, ltm_*,
#                            and the masked mixers' mixer_*, llama_ae_*, llama_mem_*)
#   make build/bench/train_step   the training-step timer (bench/train_step.c)

fixtures: tests/ref/llama_ref.py tests/ref/free_ref.py tests/ref/ltm_ref.py tests/ref/mixer_ref.py
	$(SYSPYTHON) tests/ref/llama_ref.py tests/fixtures
	$(SYSPYTHON) tests/ref/free_ref.py tests/fixtures
	$(SYSPYTHON) tests/ref/ltm_ref.py tests/fixtures
	$(SYSPYTHON) tests/ref/mixer_ref.py tests/fixtures

build/bench/train_step: build/bench/train_step.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< -Wl,--start-group $(LIBS) -Wl,--end-group $(LDLIBS)

# `make bench-bins` (bench/module.mk) also builds the training-step timer.
bench-bins: build/bench/train_step

# The ops' exp/sigmoid/max loops (ops_math.h) hold clamps and selects that GCC turns into
# vector code only when a float compare may be assumed not to trap (otherwise: "control flow
# in loop", scalar code; measured: swiglu and cross-entropy not vectorised at all). No value
# changes: this is not -ffast-math (no reassociation, no finite-math assumptions).
$(patsubst %.c,build/%.o,$(wildcard model/ops_*.c)): CFLAGS += -fno-trapping-math

# AdamW's element loop is vectorised per level (ops_adamw.c) and must give the scalar loop's
# bits: no FMA contraction in that file, and sqrtf as the instruction (libm's call sets errno
# for a negative argument, which the loop never has; the values are the same).
build/model/ops_adamw.o: CFLAGS += -ffp-contract=off -fno-math-errno

# The q|k|v split and join (ops_qkv.c) likewise: built per level, the baseline's bits.
build/model/ops_qkv.o: CFLAGS += -ffp-contract=off
