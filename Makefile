# Both commands create or refresh .venv themselves; a fresh machine needs only python3 and make.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean prometheus

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m tritonize.pipeline.demo

test: $(STAMP) prometheus
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

clean:
	rm -rf build models/*_model .pytest_cache
