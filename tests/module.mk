# tests/module.mk: test targets beyond `make test`.
#   make test-gpu    the GPU checks (tests/gpu/run.sh); without a GPU they say they did not run

.PHONY: test-gpu
test-gpu: deps
	@$(MAKE) --no-print-directory all
	@bash tests/gpu/run.sh

# the execution-model emulator and its binaries (make all builds them; tests/it_emu*.sh run them)
include tests/emu/module.mk
