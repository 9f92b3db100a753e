# Two entry points on a fresh machine: `make demo` and `make test`; `make lint` checks the code.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint install

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(PY)
	$(PY) -m pip install -q -e ".[test,local,integrations,lint]"

demo: install
	$(VENV)/bin/threadrecall demo

test: install
	cargo test --release -q
	$(PY) -m pytest

lint: install
	cargo fmt --check
	cargo clippy --release --all-targets --features python -q -- -D warnings
	$(VENV)/bin/ruff check python
	$(VENV)/bin/mypy python/threadrecall
	$(PY) -m mypy.stubtest threadrecall._core
