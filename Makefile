# openreg: the two commands are `make demo` and `make test`.
# Both run `make setup` first, which installs only what is missing.
SHELL := /bin/bash
PYTHON ?= python3
APT_PACKAGES := bazel-bootstrap bazel-rules-java libgrpc++-dev \
	protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev \
	libgtest-dev libgmock-dev
TORCH_VERSION := 2.13.0
BAZEL ?= bazel

.PHONY: setup apt-deps python-deps build install demo test bench clean \
	sanitize fuzz

setup: apt-deps python-deps build install

# Installs those of the Debian packages $(1) that are missing.
define apt_install
	@missing=""; for p in $(1); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
endef

apt-deps:
	$(call apt_install,$(APT_PACKAGES))

# Test-only Python modules (module=package). torch.testing._internal, used by
# the OpInfo conformance suite, imports numpy and expecttest.
PYTHON_TEST_MODULES := pytest=pytest numpy=numpy expecttest=expecttest
# Runtime Python modules: matplotlib draws openreg-fi's report plots;
# PyTorch's flight recorder analyzer (fr_trace -j) needs tabulate;
# openreg-smi --prometheus-port serves metrics with prometheus_client.
PYTHON_RUNTIME_MODULES := matplotlib=matplotlib tabulate=tabulate \
	prometheus_client=prometheus-client

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

# gcc 12's sanitizer runtimes (g++ already pulls them in; named so that a
# trimmed image still gets them).
SANITIZER_APT_PACKAGES := libasan8 libubsan1 libtsan2

# The C++ suites under AddressSanitizer + UBSan, then ThreadSanitizer
# (//tests:asan_tests, //tests:tsan_tests; docs/SECURITY.md, "How hostile
# input is tested"). Each config has its own output directory, so the first
# run compiles everything once more. Ends with "N passed, N failed".
sanitize: setup
	$(call apt_install,$(SANITIZER_APT_PACKAGES))
	@set -o pipefail; log=$$(mktemp); status=0; \
	for config in asan tsan; do \
	  $(BAZEL) test --config=$$config --nocache_test_results \
	    //tests:$${config}_tests 2>&1 | tee -a $$log || status=1; \
	done; \
	passed=$$(grep -cE '^//[^ ]+ +PASSED' $$log); \
	failed=$$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' $$log); \
	rm -f $$log; echo "$$passed passed, $$failed failed"; exit $$status

# libFuzzer needs clang; only `make fuzz` installs it.
FUZZ_APT_PACKAGES := clang-14 libclang-rt-14-dev
FUZZ_TARGETS := attach_hello command_record ipc_handle fault_plan
FUZZ_SECONDS ?= 60
FUZZ_DIR ?= /tmp/openreg-fuzz

# Each fuzz target under libFuzzer (clang 14, ASan + UBSan, coverage
# guided) for FUZZ_SECONDS, from its seeds; the corpus grows in
# FUZZ_DIR/<target> across runs and a failing input is saved as
# FUZZ_DIR/<target>-crash-*. `make test` runs the same targets for a few
# seconds each without libFuzzer.
fuzz: setup
	$(call apt_install,$(FUZZ_APT_PACKAGES))
	$(BAZEL) build --config=fuzz $(FUZZ_TARGETS:%=//tests/fuzz:%_fuzz_test_libfuzzer)
	@bin=$$($(BAZEL) info --config=fuzz bazel-bin 2>/dev/null); failed=""; \
	mkdir -p $(FUZZ_DIR); \
	for target in $(FUZZ_TARGETS); do \
	  binary=$$bin/tests/fuzz/$${target}_fuzz_test_libfuzzer; \
	  corpus=$(FUZZ_DIR)/$$target; \
	  OPENREG_FUZZ_WRITE_SEEDS=$$corpus $$binary >/dev/null || exit 1; \
	  echo "fuzz: $$target for $(FUZZ_SECONDS) s"; \
	  $$binary $$corpus -dict=$$corpus.dict \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=60 -rss_limit_mb=4096 \
	    -malloc_limit_mb=64 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/$$target- 2>$(FUZZ_DIR)/$$target.log \
	    || failed="$$failed $$target"; \
	  awk '/DONE/ {c = $$4} /number_of_executed_units/ {n = $$2} \
	    /peak_rss_mb/ {r = $$2} \
	    END {printf "  %s inputs, coverage %s, peak RSS %s MiB\n", n, c, r}' \
	    $(FUZZ_DIR)/$$target.log; \
	done; \
	if [ -n "$$failed" ]; then \
	  echo "fuzz: findings in$$failed (logs and inputs in $(FUZZ_DIR))"; exit 1; \
	fi; echo "fuzz: no findings"

clean:
	$(BAZEL) clean
