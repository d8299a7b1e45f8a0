# Two entry points, each doing all of its own set-up on a fresh machine:
#   make demo   -> an incident report from a shipped sample run
#   make test   -> the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	touch $@

.PHONY: demo test
demo: $(VENV)/.installed
	$(PY) -m postmortem analyze sample_runs/cnn_domain_shift -o report.html

test: $(VENV)/.installed
	$(PY) -m pytest -q
