# openreg: the two commands are `make demo` and `make test`.
# Both run `make setup` first, which installs only what is missing.
SHELL := /bin/bash
PYTHON ?= python3
APT_PACKAGES := bazel-bootstrap bazel-rules-java libgrpc++-dev \
	protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev \
	libgtest-dev libgmock-dev
TORCH_VERSION := 2.13.0
BAZEL ?= bazel

.PHONY: setup apt-deps python-deps build install demo test bench clean

setup: apt-deps python-deps build install

apt-deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

# Test-only Python modules (module=package). torch.testing._internal, used by
# the OpInfo conformance suite, imports numpy and expecttest.
PYTHON_TEST_MODULES := pytest=pytest numpy=numpy expecttest=expecttest
# Runtime Python modules: matplotlib draws openreg-fi's report plots.
PYTHON_RUNTIME_MODULES := matplotlib=matplotlib

python-deps:
	@$(PYTHON) -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$(TORCH_VERSION)')" 2>/dev/null \
	  || $(PYTHON) -m pip install -q "torch==$(TORCH_VERSION)"
	@for entry in $(PYTHON_TEST_MODULES) $(PYTHON_RUNTIME_MODULES); do \
	  $(PYTHON) -c "import $${entry%%=*}" 2>/dev/null \
	    || $(PYTHON) -m pip install -q "$${entry#*=}"; \
	done

build:
	$(BAZEL) build //...

# --no-deps/--no-build-isolation: never let pip pull another torch.
install: build
	$(PYTHON) -m pip install -q --no-deps --no-build-isolation ./python

demo: setup
	$(PYTHON) examples/demo.py

# Every test really runs (no cached results); the last line is the plain
# "N passed, N failed" summary.
test: setup
	@set -o pipefail; log=$$(mktemp); \
	$(BAZEL) test --nocache_test_results //... 2>&1 | tee $$log; status=$$?; \
	passed=$$(grep -cE '^//[^ ]+ +PASSED' $$log); \
	failed=$$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' $$log); \
	rm -f $$log; echo "$$passed passed, $$failed failed"; exit $$status

bench: setup
	$(PYTHON) bench/run.py

clean:
	$(BAZEL) clean
