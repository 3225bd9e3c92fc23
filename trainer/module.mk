# trainer/: `make brown` trains the baseline on the Brown corpus through the pipeline and plots
# its loss (results/brown_baseline.png).
.PHONY: brown
brown: deps
	@$(MAKE) --no-print-directory all data
	@bash trainer/examples/brown_baseline.sh
