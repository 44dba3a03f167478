# The two set-up-free commands of the README. Both create .venv and install
# what they need on first use (and again whenever pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test clean-venv

run: $(STAMP)
	$(VENV)/bin/snakemake --profile profiles/local

test: $(STAMP)
	$(VENV)/bin/python -m pytest -n auto --dist loadfile --no-loadscope-reorder --durations=25

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

clean-venv:
	rm -rf $(VENV)
