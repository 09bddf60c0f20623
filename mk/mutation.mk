# Mutation testing of the critical modules with mutmut 3 (config: [tool.mutmut] in pyproject.toml; per-module
# killers, score and equivalent mutants: tests/mutation/). Slow, so outside `make test`. One module at a time:
# `make mutation MODULE=pdkit.purchase`. Results stay in mutants/ (unchanged mutants are not re-run).

MUTATION_MODULES := pdkit.purchase pdkit.reservation pdkit.functions.reservation_guard pdkit.functions.block_clock \
	pdkit.profile_files pdkit.serving.weights_manifest
MODULE ?=
MUTATION_JOBS ?= 2
MUTATION_FAIL_UNDER ?= 90

.PHONY: mutation

mutation: setup ## Mutation testing (mutmut) of the critical modules; per-module score (MODULE=pdkit.x for one)
	@mkdir -p build && for m in $(or $(MODULE),$(MUTATION_MODULES)); do \
		start=$$SECONDS; mutmut run --max-children $(MUTATION_JOBS) "$$m.*" > build/mutmut-$$m.log 2>&1 \
			|| { tail -n 30 build/mutmut-$$m.log; echo "mutmut failed on $$m: build/mutmut-$$m.log"; exit 1; }; \
		echo "mutmut: $$m in $$((SECONDS - start)) s (log: build/mutmut-$$m.log)"; done
	python tests/mutation/score.py --fail-under $(MUTATION_FAIL_UNDER)
