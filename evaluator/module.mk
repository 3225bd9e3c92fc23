# evaluator/module.mk: targets the evaluator owns.
#   make eval-tasks   regenerate the synthetic example tasks (evaluator/tasks/synth_{mc,em}.jsonl)
.PHONY: eval-tasks
eval-tasks: bin/tokenizer
	bin/tokenizer synth --n 400 --seed 99 | $(SYSPYTHON) evaluator/tasks/make_synth.py evaluator/tasks
