# Two entry points (see README): `make lab` sets up and opens the tutorials in JupyterLab
# (`make demo` is its headless twin), `make test` sets up, runs every test and builds the docs.
# Works on a fresh Debian machine as root (or with sudo), inside or outside a venv.

SHELL := /bin/bash
# Outside a virtual environment, use (and create) .venv; inside one, use it as it is.
ifdef VIRTUAL_ENV
PY := python
else
PY := .venv/bin/python
endif
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
EXAMPLES := $(wildcard examples/*.acir)

.PHONY: setup system-deps python-deps demo test docs docs-build lab notebook bench clean

setup: system-deps python-deps

# System packages: graphviz's `dot` (graphs), Chromium (the browser test), a C compiler
# (the host target), Node.js/npm (building the JupyterLab extension). Installed only where missing.
system-deps:
	@missing=""; \
	command -v dot >/dev/null || missing="$$missing graphviz"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v cc >/dev/null || missing="$$missing gcc"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	python3 -c 'import venv, ensurepip' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

python-deps:
	@if [ -z "$$VIRTUAL_ENV" ] && [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test,notebook,docs]"

# The headless twin of `make lab`: optimise every example, then execute the quick-start
# tutorial and write it as HTML (demo-output/), as a browser would show it.
demo: setup
	@mkdir -p demo-output
	@for f in $(EXAMPLES); do echo "== $$f"; $(PY) -m autocomp_jupyter.cli optimize $$f --target tpu --tune 200 \
	  --vis-graph demo-output/$$(basename $$f .acir).dot || exit 1; done
	@if [ -f tutorials/01_quick_start.ipynb ]; then \
	  $(PY) -m jupyter nbconvert --to html --execute --output-dir demo-output tutorials/01_quick_start.ipynb \
	  && echo "wrote demo-output/01_quick_start.html"; fi

# TVM (the optional bridge) is installed where its wheel is available; its test skips otherwise.
# The tests run on every core (pytest-xdist): each test is independent of the others.
test: setup
	@$(PY) -c 'import tvm' 2>/dev/null || $(PY) -m pip install -q "apache-tvm>=0.27" \
	  || echo "apache-tvm did not install: the TVM bridge test will be skipped"
	$(PY) -m pytest -q -n $$(nproc)
	@$(MAKE) --no-print-directory docs-build

# The documentation site (mkdocs.yml) into build/site/, in strict mode: a warning fails the
# build, as does a broken internal link (docs/check_links.py). The tutorials are shown as the
# test run left them (build/tutorials/); a missing or stale one is executed here.
docs: setup
	@$(MAKE) --no-print-directory docs-build

docs-build:
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet
	$(PY) docs/check_links.py build/site

lab: setup
	$(PY) -m jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root) tutorials/

# The same tutorials in Notebook 7 (`jupyter notebook`, installed by the notebook extra).
notebook: setup
	$(PY) -m notebook $$([ "$$(id -u)" = 0 ] && echo --allow-root) tutorials/

clean:
	rm -rf .venv build dist *.egg-info .pytest_cache demo-output
