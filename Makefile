# Two entry points on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test install

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	$(PY) -m pip install -q -e ".[test,local,integrations]"

demo: install
	$(VENV)/bin/threadrecall demo

test: install
	cargo test --release -q
	$(PY) -m pytest
