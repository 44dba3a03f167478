# The two set-up-free commands of the README. Both create .venv and install
# what they need on first use (and again whenever pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
# One test worker more than cores: the end-to-end tests wait on Snakemake's jobs, Slurm's status polls and
# subprocesses, and one more worker fills those waits (measured in docs/runs.md).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

.PHONY: run test browser bytecode clean-venv

run: $(STAMP) bytecode
	$(VENV)/bin/snakemake --profile profiles/local

test: $(STAMP) browser bytecode
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=40

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet --no-compile -e '.[test]'
	@# Byte-compiled on every core at once (pip compiles on one): where PYTHONDONTWRITEBYTECODE is set, no
	@# process would write them later, and each would compile its imports again. The packages' own test
	@# suites (a quarter of the files) are never imported here.
	$(VENV)/bin/python -m compileall -q -j 0 -x '/tests?/' $(VENV)/lib >/dev/null
	touch $(STAMP)

# The package's own modules byte-compiled too (an editable install leaves them in src/): every workflow job is
# a new process that imports them, and where PYTHONDONTWRITEBYTECODE is set each would compile them again.
bytecode: $(STAMP)
	$(VENV)/bin/python -m compileall -q -j 0 src >/dev/null

# The explorer's browser tests use Debian's chromium: installed here when we are root with apt and it is
# missing (elsewhere the tests say how to install it, and skip; under CI=true they fail).
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null \
	  && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends chromium >/dev/null; } \
	  || echo "make test: chromium not installed (apt-get install chromium): the explorer's browser tests will skip" >&2

clean-venv:
	rm -rf $(VENV)
