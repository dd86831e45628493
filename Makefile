# Both commands create or refresh .venv themselves; a fresh machine needs only python3 and make.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m tritonize.pipeline.demo

test: $(STAMP)
	$(PY) -m pytest -ra

clean:
	rm -rf build models/*_model .pytest_cache
