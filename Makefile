# Two commands for a fresh machine (see README.md):
#   make demo   # create .venv, install, run `tba-lab train` with its defaults
#   make test   # create .venv, install, run the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN     = $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev]"
	touch $@

.PHONY: install demo test clean
install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/tba-lab train

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) runs
