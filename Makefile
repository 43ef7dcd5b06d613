# Commands for a fresh machine (see README.md):
#   make demo   # create .venv, install, run `tba-lab train` with its defaults
#   make test   # create .venv, install, run the test suite without the tests marked slow (CI)
#   make test-all  # ... the whole suite, slow tests included
#   make lab    # create .venv, install, open the course (notebooks/) in JupyterLab
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN     = $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev]"
	touch $@

.PHONY: install demo test test-all lab clean
install: $(BIN)/.installed

demo: $(BIN)/.installed
	$(BIN)/tba-lab train

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -m "not slow"

test-all: $(BIN)/.installed
	$(BIN)/python -m pytest -q

# The project's kernel, inside the venv (not in ~/.local): "Python (tba-lab)" in JupyterLab.
KERNEL = $(VENV)/share/jupyter/kernels/tba-lab/kernel.json
$(KERNEL): $(BIN)/.installed
	$(BIN)/python -m ipykernel install --sys-prefix --name tba-lab --display-name "Python (tba-lab)"

# JupyterLab on notebooks/ (the venv's bin first on PATH, so that %tensorboard finds its server): from PORT on, the first free port (a second user or a second lab gets
# the next one), a fresh random token in the URL it prints; e.g. make lab PORT=9000 LAB_ARGS=--no-browser
PORT     ?= 8888
LAB_ARGS ?=
lab: $(KERNEL)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/jupyter lab --ServerApp.root_dir=notebooks --ServerApp.port=$(PORT) --ServerApp.port_retries=50 \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

clean:
	rm -rf $(VENV) runs
