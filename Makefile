# Both commands create or refresh .venv themselves; a fresh machine needs only python3 and make.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean prometheus shellcheck evhtp perf-analyzer mutation planted

# uv installs it, with pip's configuration (dev/uv_install.py): 48 s where pip took 95-134 s here (the packages are
# 6 GB, torch's CUDA libraries). pip where uv cannot be had or fails.
UV_INSTALL := $(VENV)/bin/python dev/uv_install.py $(VENV)/bin/uv
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	($(PY) -m pip install -q 'uv==0.13.9' && $(UV_INSTALL) $(PY) -e ".[dev]") || $(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

# moto's S3 server for the `repo push` tests, in an environment of its own: moto needs boto3, whose
# botocore would downgrade python-dateutil in .venv. The tests start it as a server process and skip
# (saying why) where it could not be installed. Never fails the build.
MOTO_STAMP := $(VENV)/moto/.installed
MOTO := 'moto[s3]==5.2.5' 'flask>=3' 'flask-cors>=6'
$(MOTO_STAMP): | $(STAMP)
	@(python3 -m venv $(VENV)/moto \
	  && ($(UV_INSTALL) $(VENV)/moto/bin/python $(MOTO) || $(VENV)/moto/bin/pip install -q $(MOTO)) \
	  && touch $@) || echo "moto: install failed; the S3 tests will skip"

demo: $(STAMP)
	$(PY) -m tritonize.pipeline.demo

# Four workers (pytest-xdist) on the two cores: a worker spends much of its time waiting (on a server's start, a
# healing test's kill, the package index, a subprocess): beside other work, two workers kept 0.84 of a core busy on
# average and took 22.4 minutes, four 1.16 cores and 15.0 minutes (benchmarks/RESULTS.md). Each test file runs whole
# on one worker, so a file's module-scoped server starts once; the longest files first (tests/conftest.py STARTED_FIRST;
# xdist's own order, the most tests first, is off). The session's exported models are made once for all
# (tests/conftest.py `made_once`). torch computes on one thread per process: the cores are the workers'.
#
# First, alone and quickly, the linter ([tool.ruff] in pyproject.toml), then the lowest Python that requires-python
# admits: vermin reads every file against it (tests/test_python_floor.py). NVIDIA's recorded engine graphs are read
# where the project's shared copy lies beside the checkout (never committed: tests/nvidia_engines.py). Each test's time
# goes to build/make-test.xml (benchmarks/suite_times.py compares two runs per test file).
#
# Python writes its bytecode caches (`__pycache__/`, ignored by git) for the run, whatever the environment says: with
# PYTHONDONTWRITEBYTECODE set (this project's machines set it), every worker, server stub and CLI process compiled
# tritonize, and pytest rewrote every test module's asserts, from source again: 14 CPU-s per collection, not 8.
NVIDIA_TREX := $(wildcard $(abspath ../shared/data/nvidia-trex))
test: export PYTHONDONTWRITEBYTECODE =
test: $(STAMP) prometheus shellcheck evhtp perf-analyzer $(MOTO_STAMP)
	$(VENV)/bin/ruff check --quiet .
	$(PY) -m pytest -q -n 0 tests/test_python_floor.py
	OMP_NUM_THREADS=1 $(if $(NVIDIA_TREX),TRITONIZE_NVIDIA_TREX=$(NVIDIA_TREX)) $(PY) -m pytest -ra -n 4 --dist loadfile --no-loadscope-reorder \
	  --ignore=tests/test_python_floor.py --junitxml=build/make-test.xml

# $(call apt,PACKAGE,TESTS): install a Debian/Ubuntu package where it can be (as root); elsewhere, or
# when it fails, TESTS skip and say why. Never fails the build.
apt = if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(1) >/dev/null \
	   || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(1) >/dev/null)) \
	  || echo "$(1): apt-get install failed; $(2) will skip"; \
	else echo "$(1): not root or no apt-get; $(2) will skip"; fi

# prometheus + promtool for the monitoring tests and the Kubernetes bundle's rules.
PROMTOOL := $(shell command -v promtool 2>/dev/null)
prometheus:
ifeq ($(PROMTOOL),)
	@$(call apt,prometheus,the Prometheus tests)
endif

# shellcheck for the Kubernetes bundle's smoke.sh.
SHELLCHECK := $(shell command -v shellcheck 2>/dev/null)
shellcheck:
ifeq ($(SHELLCHECK),)
	@$(call apt,shellcheck,the smoke.sh lint)
endif

# libevhtp (the HTTP library of tritonserver 2.51; Debian's 1.2.18 has its parser) for the front's differential tests,
# which build an oracle server on it with gcc.
EVHTP := $(wildcard /usr/include/evhtp/evhtp.h)
evhtp:
ifeq ($(EVHTP),)
	@$(call apt,libevhtp-dev,the front's libevhtp differential tests)
endif

# Triton's perf_analyzer for `client perf`, `tune`, `convert cpu` and their tests: the binary from the
# tritonclient 2.51.0 wheel, libcudart from nvidia-cuda-runtime-cu12, libb64 from the Debian package libb64-0d
# (installed as root where apt-get can; else a private copy from `apt-get download`). Where it cannot be
# had, the perf_analyzer tests skip and say why. Never fails the build.
perf-analyzer: $(STAMP)
	@/sbin/ldconfig -p | grep -q 'libb64.so.0d ' || $(call apt,libb64-0d,the perf_analyzer tests (unless a private copy works))
	@$(VENV)/bin/tritonize tools get-perf-analyzer >/dev/null \
	  || echo "perf-analyzer: could not be fetched; the perf_analyzer tests will skip"

# Mutation testing, not part of `make test`: mutmut mutates the core modules ([tool.mutmut] in pyproject.toml)
# and runs their fast tests against each mutant, then lists the mutants no test killed (`.venv/bin/mutmut
# show NAME` shows one). The artifacts the tests share are exported once for every mutant's tests, from
# squeezenet1_1 (5 MB, where resnet18 is 47 MB: each mutant's tests load them afresh, which halves the run);
# torch runs one thread per test process (mutmut runs one process per core: more threads only wait on each other).
# The suite's /tmp check is make test's: each mutant's pytest would count the folders its neighbour's leave meanwhile.
MUTATION_ARTIFACTS := build/mutation-squeezenet1_1
mutation: $(STAMP)
	$(PY) -m pip install -q -e ".[mutation]"
	$(VENV)/bin/tritonize export --arch squeezenet1_1 --weights none --format all --artifacts $(MUTATION_ARTIFACTS) > /dev/null
	OMP_NUM_THREADS=1 TRITONIZE_HYPOTHESIS=mutation TRITONIZE_TESTS_TMP_CHECKED_BY=mutation \
	  TRITONIZE_TEST_ARTIFACTS=$(abspath $(MUTATION_ARTIFACTS)) $(VENV)/bin/mutmut run
	$(VENV)/bin/mutmut results

# The bugs planted by hand (benchmarks/planted/*.patch, docs/mutation.md): each applied to a scratch copy of
# this checkout, in turn, and only the tests named for it run; it says which test caught each, or SURVIVED.
planted: $(STAMP)
	$(PY) benchmarks/planted.py

clean:
	rm -rf build models/*_model .pytest_cache mutants
