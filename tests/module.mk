# tests/module.mk: test targets beyond `make test`.
#   make test-gpu    the GPU checks (tests/gpu/run.sh); without a GPU they say they did not run
#   make stress      bin/bus stopped by SIGTERM under load, 200 times (below)

.PHONY: test-gpu
test-gpu: deps
	@$(MAKE) --no-print-directory all
	@bash tests/gpu/run.sh

# the execution-model emulator and its binaries (make all builds them; tests/it_emu*.sh run them)
include tests/emu/module.mk

# make stress: bin/bus stopped by SIGTERM at random moments under publish/subscribe load, 200
# times (tests/lib/bus_stress.py; make test runs 12 of them in tests/it_sigterm.sh, FT_STRESS_N
# changes either count). Every stop must take under 2 s, with status 0 and the stop line.
.PHONY: stress
stress: all
	@d=$$(mktemp -d /tmp/ft-stress.XXXXXX) && /usr/bin/python3 tests/lib/bus_stress.py $${FT_STRESS_N:-200} $$d; rc=$$?; rm -rf $$d; exit $$rc
