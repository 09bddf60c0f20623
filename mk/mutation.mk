# Mutation testing of the critical modules with mutmut 3 (config: [tool.mutmut] in pyproject.toml; per-module
# killers, score and equivalent mutants: tests/mutation/). Slow, so outside `make test`. One module:
# `make mutation MODULE=pdkit.ops.purchase`. mutants/ keeps the mutated copy and mutmut's test statistics
# between runs (delete it for a fresh run).

MUTATION_MODULES := pdkit.ops.purchase pdkit.model.reservation pdkit.functions.reservation_guard pdkit.functions.block_clock \
	pdkit.model.profile_files pdkit.pods.weights_manifest pdkit.functions.block_lifecycle pdkit.render.serving.drain \
	pdkit.render.serving.sglang_args pdkit.render.serving.router_args pdkit.pods.staging pdkit.model.plan
# Of the plan, its validation rules and the network-interface layout (the estimates are not under mutation).
PLAN_FUNCTIONS := _build _router _upstream_deepep_reach _role_images _pod_security _instance_type _model _zones \
	_kubernetes _efa_devices _interfaces _weights _purchase _market _endpoint _role _mtp_pairing _node_total
MODULE ?=
MUTATION_JOBS ?= 2
MUTATION_FAIL_UNDER ?= 90
# mutmut's names for the selected mutants: every function of a module, or the plan's listed ones.
mutation_selection = $(foreach m,$(or $(MODULE),$(MUTATION_MODULES)),$(if $(filter pdkit.model.plan,$(m)),$(foreach f,$(PLAN_FUNCTIONS),$(m).x_$(f)__mutmut_*),$(m).*))

.PHONY: mutation

# One mutmut run for every module: it collects which test reaches which function once, runs the clean tests
# once and forks every mutant from one warmed-up process (a run per module repeated that for each).
mutation: setup ## Mutation testing (mutmut) of the critical modules; per-module score (MODULE=pdkit.x for one)
	@$(if $(filter-out $(MUTATION_MODULES),$(MODULE)),echo "MODULE=$(filter-out $(MUTATION_MODULES),$(MODULE)) is not under mutation; one of: $(MUTATION_MODULES)" >&2; exit 2)
	@mkdir -p build && echo "mutmut: $(words $(or $(MODULE),$(MUTATION_MODULES))) module(s), $(MUTATION_JOBS) at a time; progress: tail -f build/mutmut.log"
	@start=$$SECONDS; set -f; mutmut run --max-children $(MUTATION_JOBS) $(mutation_selection) > build/mutmut.log 2>&1 \
		|| { tail -n 30 build/mutmut.log; echo "mutmut failed: build/mutmut.log"; exit 1; }; \
		echo "mutmut: done in $$((SECONDS - start)) s"
	python tests/mutation/score.py --fail-under $(MUTATION_FAIL_UNDER) $(foreach m,$(MODULE),--module $(m))
