# trainer/: `make brown` trains the baseline on the Brown corpus through the pipeline and plots
# its loss (results/brown_baseline.png).
.PHONY: brown
brown: deps
	@$(MAKE) --no-print-directory all data
	@bash trainer/examples/brown_baseline.sh

# `make figure4`: seed 000 §4.1 reproduced and measured (results/figure4.{md,json}); at most
# 2 hours on 2 cores with the default recipe (trainer/examples/figure4.sh says the knobs).
.PHONY: figure4
figure4: deps
	@$(MAKE) --no-print-directory all
	@bash trainer/examples/figure4.sh
