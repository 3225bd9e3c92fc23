# trainer/: `make brown` trains the baseline and the Free Transformer on the Brown corpus through
# the pipeline, evaluates both and plots their curves (results/brown.{md,png}).
.PHONY: brown
brown: deps
	@$(MAKE) --no-print-directory all data
	@bash trainer/examples/brown.sh

# `make figure4`: seed 000 §4.1 reproduced and measured (results/figure4.{md,json}); at most
# 2 hours on 2 cores with the default recipe (trainer/examples/figure4.sh says the knobs).
.PHONY: figure4
figure4: deps
	@$(MAKE) --no-print-directory all
	@bash trainer/examples/figure4.sh

# `make bf16-check`: the baseline and the Free Transformer trained on Brown in fp32 and in bf16
# (the same seed and batches), curves compared, both evaluated, the bf16 baseline decoded by
# bin/sampler and by the PyTorch reference (results/bf16.{md,json}).
.PHONY: bf16-check
bf16-check: deps
	@$(MAKE) --no-print-directory all data
	@bash trainer/examples/bf16.sh

# `make ltm`: the Latent-thought LM (seed 003) at K = 4, 16, 64 against the baseline on Brown at
# equal training FLOPs (results/ltm.*); LTM_FLOPS, LTM_KS_TRAIN, ... set the scale
# (trainer/examples/ltm.sh); 1 h 29 min with the defaults here, on one thread of a shared machine.
.PHONY: ltm
ltm: deps
	@$(MAKE) --no-print-directory all data
	@bash trainer/examples/ltm.sh

# `make mixers`: seed 004's masked-mixer comparisons at this machine's scale (results/mixers.*);
# MIXERS_STEPS sets the length (default 2000, about 40 min on 2 quiet cores).
.PHONY: mixers
mixers: deps
	@$(MAKE) --no-print-directory all data
	@bash trainer/examples/mixers.sh

# Data-parallel training across processes (trainer/dp*.c): Open MPI (Debian's libopenmpi-dev,
# in DEPS_BUILD) for the CPU ranks. Detected like nvcc: found, trainer/dp_mpi.c is built
# against it; missing, --dp mpi says the build has none. Linked --as-needed, so a program
# that does not use it (everything but bin/trainer and the DP tests) does not load libmpi.
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)
ifeq ($(MPI_LIBS),)
  $(info [build] MPI: not found (make deps installs libopenmpi-dev); --dp mpi will say so)
else
  $(info [build] MPI: $(shell mpirun --version 2>/dev/null | head -1))
  MPI_STAMP := build/.mpi-$(shell echo '$(MPI_CFLAGS) $(MPI_LIBS)' | md5sum | cut -c1-8)
  $(MPI_STAMP):
	@mkdir -p build
	@rm -f build/.mpi-*
	@touch $@
  build/trainer/dp_mpi.o: CFLAGS += -DFT_HAVE_MPI $(MPI_CFLAGS)
  build/trainer/dp_mpi.o: $(MPI_STAMP)
  LDLIBS += -Wl,--push-state,--as-needed $(MPI_LIBS) -Wl,--pop-state
endif
