# Mutation testing of the critical modules with mutmut 3 (config: [tool.mutmut] in pyproject.toml; per-module
# killers, score and equivalent mutants: tests/mutation/). Slow, so outside `make test`. One module at a time:
# `make mutation MODULE=pdkit.ops.purchase`. Results stay in mutants/ (unchanged mutants are not re-run).

MUTATION_MODULES := pdkit.ops.purchase pdkit.model.reservation pdkit.functions.reservation_guard pdkit.functions.block_clock \
	pdkit.model.profile_files pdkit.pods.weights_manifest pdkit.functions.block_lifecycle pdkit.render.serving.drain \
	pdkit.render.serving.sglang_args pdkit.render.serving.router_args pdkit.pods.staging pdkit.model.plan
# Of the plan, its validation rules and the network-interface layout (the estimates are not under mutation).
PLAN_FUNCTIONS := _build _router _upstream_deepep_reach _role_images _pod_security _instance_type _model _zones \
	_kubernetes _efa_devices _interfaces _weights _purchase _market _endpoint _role _mtp_pairing _node_total
MODULE ?=
MUTATION_JOBS ?= 2
MUTATION_FAIL_UNDER ?= 90

.PHONY: mutation

mutation: setup ## Mutation testing (mutmut) of the critical modules; per-module score (MODULE=pdkit.x for one)
	@mkdir -p build && for m in $(or $(MODULE),$(MUTATION_MODULES)); do \
		case $$m in pdkit.model.plan) sel='$(foreach f,$(PLAN_FUNCTIONS),pdkit.model.plan.x_$(f)__mutmut_*)';; *) sel="$$m.*";; esac; \
		start=$$SECONDS; set -f; mutmut run --max-children $(MUTATION_JOBS) $$sel > build/mutmut-$$m.log 2>&1 \
			|| { tail -n 30 build/mutmut-$$m.log; echo "mutmut failed on $$m: build/mutmut-$$m.log"; exit 1; }; \
		echo "mutmut: $$m in $$((SECONDS - start)) s (log: build/mutmut-$$m.log)"; done
	python tests/mutation/score.py --fail-under $(MUTATION_FAIL_UNDER)
