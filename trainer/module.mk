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

# `make ltm`: the Latent-thought LM (seed 003) against the baseline on Brown (results/ltm.*);
# LTM_STEPS, LTM_K, ... set the scale (trainer/examples/ltm.sh); under 2 hours with the defaults.
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
