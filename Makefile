# Commands for a fresh machine (see README.md):
#   make demo   # create .venv, install, run `tba-lab train` with its defaults
#   make test   # create .venv, install, run the test suite without the tests marked slow (CI)
#   make test-all  # ... the whole suite, slow tests included
#   make lab    # create .venv, install, open the course (the students' copies) in JupyterLab
#   make assignments / make grade SUBMITTED=DIR / make site   # for instructors (README)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN     = $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e ".[dev]"
	touch $@

.PHONY: install demo test test-all lab assignments grade site clean
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

# The students' copies (nbgrader's release of notebooks/: no solutions), written once: a
# student's work lives there, so `make lab` never rewrites them (`make assignments
# COURSE_ARGS=--force` does). The instructor's copies: make lab LAB_DIR=notebooks
COURSE      = runs/course
STUDENT_DIR = $(COURSE)/release
$(STUDENT_DIR): | $(BIN)/.installed
	$(BIN)/tba-lab course release --out $(COURSE)

# JupyterLab on LAB_DIR (the venv's bin first on PATH, so that %tensorboard finds its server): from PORT on, the first free port (a second user or a second lab gets
# the next one), a fresh random token in the URL it prints; e.g. make lab PORT=9000 LAB_ARGS=--no-browser
PORT     ?= 8888
LAB_ARGS ?=
LAB_DIR  ?= $(STUDENT_DIR)
# nbgrader's instructor pages off (its formgrader wants the course folder under the lab's root);
# a student keeps its Validate button
NBGRADER_OFF = $(foreach e,formgrader course_list,--ServerApp.jpserver_extensions nbgrader.server_extensions.$(e)=False)
lab: $(KERNEL) $(STUDENT_DIR)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/jupyter lab --ServerApp.root_dir=$(LAB_DIR) --ServerApp.port=$(PORT) --ServerApp.port_retries=50 \
		$(NBGRADER_OFF) $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# For instructors (nbgrader): the students' copies in $(COURSE)/release (about 10 s), then the
# grading of $(COURSE)/submitted/<student>/<NN_name>/<NN_name>.ipynb, or of SUBMITTED copied
# there first, each run with SMOKE (about 15 s a notebook), into $(COURSE)/grades.csv
COURSE_ARGS ?=
assignments: $(BIN)/.installed
	$(BIN)/tba-lab course release --out $(COURSE) $(COURSE_ARGS)

grade: $(BIN)/.installed
	$(BIN)/tba-lab course grade --out $(COURSE) $(if $(SUBMITTED),--submitted $(SUBMITTED)) $(COURSE_ARGS)

# The course as a static website, offline, in runs/site/html (open index.html): runs the notebooks (full if <= 3 min, else SMOKE), about 14 min on 2 cores; e.g. SITE_ARGS=--smoke
site: $(BIN)/.installed
	$(BIN)/tba-lab course site --out runs/site $(SITE_ARGS)

clean:
	rm -rf $(VENV) runs
