# Both commands create or refresh .venv themselves; a fresh machine needs only python3 and make.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean prometheus perf-analyzer

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m tritonize.pipeline.demo

test: $(STAMP) prometheus perf-analyzer
	$(PY) -m pytest -ra

# prometheus + promtool for the monitoring tests: installed where it can be (Debian/Ubuntu as root);
# elsewhere those tests skip and say why. Never fails the build.
PROMTOOL := $(shell command -v promtool 2>/dev/null)
prometheus:
ifeq ($(PROMTOOL),)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >/dev/null \
	   || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus >/dev/null)) \
	  || echo "prometheus: apt-get install failed; the Prometheus tests will skip"; \
	else echo "prometheus: not root or no apt-get; the Prometheus tests will skip"; fi
endif

# Triton's perf_analyzer for `client perf`, `tune`, `convert cpu` and their tests: the binary from the
# tritonclient 2.51.0 wheel, libcudart from nvidia-cuda-runtime-cu12, libb64 from the Debian package libb64-0d
# (installed as root where apt-get can; else a private copy from `apt-get download`). Where it cannot be
# had, the perf_analyzer tests skip and say why. Never fails the build.
perf-analyzer: $(STAMP)
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! /sbin/ldconfig -p | grep -q 'libb64.so.0d '; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libb64-0d >/dev/null 2>&1 \
	  || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libb64-0d >/dev/null 2>&1) \
	  || echo "perf-analyzer: apt-get install libb64-0d failed; trying a private copy"; fi
	@$(VENV)/bin/tritonize tools get-perf-analyzer >/dev/null \
	  || echo "perf-analyzer: could not be fetched; the perf_analyzer tests will skip"

clean:
	rm -rf build models/*_model .pytest_cache
