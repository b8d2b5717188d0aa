# Everything a fresh clone needs: `make demo` and `make test` create .venv and install first.
# The bench extra (the peers we measure against) is installed too, so strict mypy sees the same
# packages everywhere.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all,test,bench]'
	# arq declares redis<6 and mideng's redis extra needs redis>=7, so no resolver installs both
	# from one set of extras; arq runs on the redis 7 and 8 installed beside it.
	$(BIN)/python -m pip install --quiet --no-deps 'arq>=0.26'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/mideng demo

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench core redis sql http python
