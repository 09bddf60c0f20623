# SGLang conformance: every SGLang and router command line the kit renders, for every profile in
# config/, is parsed and resolved by the pinned SGLang 0.5.23 and smg themselves, on the CPU, in their
# own virtualenv (conformance/README.md). Included by the Makefile; appends to TEST_TARGETS and TEST_SETUP.

SGLANG_VENV := .venv-sglang
SGLANG_BIN := $(CURDIR)/$(SGLANG_VENV)/bin
SGLANG_LOCK := conformance/requirements-sglang.txt

.PHONY: conformance lock-sglang conformance-help

# Rebuilt when the lock changes; made with the same python3 as the kit venv (PYTHON3), and independent of it, so
# `make test` installs both at once. --no-compile: byte-compiling torch, transformers and sglang costs 74 of
# 133 s here; the check imports a small part of them, compiled in memory on each run (PYTHONDONTWRITEBYTECODE),
# and was no slower for it (9.4 s against 13.1 s with every .pyc in place).
$(SGLANG_VENV)/.installed: $(SGLANG_LOCK)
	rm -rf $(SGLANG_VENV)
	$(PYTHON3) -m venv $(SGLANG_VENV)
	echo '*' > $(SGLANG_VENV)/.gitignore
	$(SGLANG_BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-compile --require-hashes -r $(SGLANG_LOCK)
	touch $@

# MODEL_CONFIG=path/to/config.json resolves against that file (e.g. the published one) instead of conformance/models/.
conformance: setup $(SGLANG_VENV)/.installed ## Feed every rendered SGLang and router command line to SGLang 0.5.23 / smg (in .venv-sglang); MODEL_CONFIG=path to use a real config.json
	@out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && \
	$(BIN)/python -m conformance.export_cases "$$out" $(if $(MODEL_CONFIG),--model-config "$(abspath $(MODEL_CONFIG))") && \
	$(SGLANG_BIN)/python conformance/check_sglang.py "$$out/cases.json"

conformance-help: $(SGLANG_VENV)/.installed ## Regenerate conformance/help/ (the --help texts of the pinned SGLang and smg)
	$(SGLANG_BIN)/python conformance/check_sglang.py --write-help conformance/help

lock-sglang: setup ## Re-resolve conformance/requirements-sglang.txt from conformance/requirements-sglang.in
	$(BIN)/pip-compile --quiet --strip-extras --generate-hashes --allow-unsafe --no-emit-index-url --no-emit-find-links \
		-o $(SGLANG_LOCK) conformance/requirements-sglang.in
	$(BIN)/python conformance/lock_nodeps.py conformance/requirements-sglang.in $(SGLANG_LOCK)

TEST_TARGETS += conformance
TEST_SETUP += $(SGLANG_VENV)/.installed
# tests/containers/test_image_serving_contents.py reads the pinned smg wheel from .venv-sglang: build it before pytest
# runs, so a clean `make test` runs that test instead of skipping it.
unit: $(SGLANG_VENV)/.installed
