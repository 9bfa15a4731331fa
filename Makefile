# Fresh machine → running job. Everything the project needs is installed here:
# uv (pinned, in .uv/), the locked environment in .venv (uv.lock, exactly),
# Debian's Fashion-MNIST files and, for the docs test, Debian's chromium
# (apt, as root or through sudo). `make run` installs the core and the
# `train` extra only (no TensorFlow); `make test` adds the test, docs, serve
# and tfds extras (pytest, pytest-xdist, hypothesis, mkdocs, playwright, the annotation
# service, tensorflow-datasets with TensorFlow) that a run never uses.
# `make wheel-check` builds the wheel and tries it in clean environments.
# `make test-bench` adds the `bench` extra (torch) and runs the tests that
# skip without it.
PYTHON ?= python3
VENV ?= .venv
WORKDIR ?= runs/vicreg
CONFIG ?= configs/vicreg.py
UV_VERSION := 0.13.9
UV := .uv/bin/uv
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT_GET := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: setup setup-test setup-bench data browser postgres run test test-slow test-bench lock wheel-check gpu-wheels

setup: $(VENV)/.installed

setup-test: $(VENV)/.installed-test

$(UV):
	$(PYTHON) -m venv .uv
	.uv/bin/pip install --quiet 'uv==$(UV_VERSION)'

# --locked: fail (instead of re-resolving) when uv.lock no longer matches
# pyproject.toml, so CI catches a stale lock. UV_PYTHON_DOWNLOADS=never: use
# the machine's $(PYTHON), never a downloaded interpreter. --inexact: the
# default sync leaves the extras of an earlier `make test` in place. The
# interpreter is named by its real path (sys.executable): given a wrapper
# such as pyenv's shim, uv took it for another Python and rebuilt .venv from
# scratch on every sync. --compile-bytecode: uv writes no .pyc by default,
# and where PYTHONDONTWRITEBYTECODE is set (as in many container images)
# Python never writes them either, so every process compiled the sources of
# all it imports again: the main job's imports took 5.4 s instead of 2.0 s
# on a 2-core machine (`python benchmarks/startup.py`). Compiling costs
# about 13 s once, in the sync.
PYTHON_EXE = $$($(PYTHON) -c 'import sys; print(sys.executable)')
UV_SYNC := UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=$(VENV) \
  UV_LINK_MODE=copy $(UV) sync --locked --inexact --compile-bytecode \
  --python "$(PYTHON_EXE)"
# The project's own modules (an editable install, which uv leaves alone):
# compiled before each command; an unchanged module costs a stat, an edited
# one is compiled again, and a stale .pyc is never used (Python checks the
# source's time and size).
COMPILE_OWN := $(VENV)/bin/python -m compileall -q -j 0 ssljax configs

# The extras of each command (pyproject.toml lists what each brings). The
# tests include tfds: the tensorflow-datasets sources are tested there, the
# TensorFlow-free main job by `make wheel-check`. `bench` (torch, a CUDA
# build on Linux x86-64, several GB) only by `make test-bench`.
RUN_EXTRAS := --extra train
TEST_EXTRAS := $(RUN_EXTRAS) --extra tfds --extra test --extra docs --extra serve
BENCH_EXTRAS := $(TEST_EXTRAS) --extra bench

$(VENV)/.installed: pyproject.toml uv.lock | $(UV)
	$(UV_SYNC) $(RUN_EXTRAS)
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(UV_SYNC) $(TEST_EXTRAS)
	touch $@

setup-bench: $(VENV)/.installed-bench

$(VENV)/.installed-bench: $(VENV)/.installed-test
	$(UV_SYNC) $(BENCH_EXTRAS)
	touch $@

# After editing the dependencies in pyproject.toml: re-resolve and commit uv.lock.
lock: | $(UV)
	$(UV) lock

# The wheel in clean environments: the core alone (losses' doctests, a
# jax.grad), then core + train without TensorFlow (the main job's smoke run).
wheel-check: data | $(UV)
	UV=$(UV) PYTHON="$(PYTHON_EXE)" .ci/wheel_check

data: $(FMNIST)

$(FMNIST):
	$(APT_GET) update -qq
	$(APT_GET) install -y -qq dataset-fashion-mnist

browser: $(CHROMIUM)

$(CHROMIUM):
	$(APT_GET) update -qq
	$(APT_GET) install -y -qq chromium

# PostgreSQL server binaries for the slow test of the annotation service's
# PostgreSQL database (the test starts its own throw-away server).
postgres:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null || \
	  { $(APT_GET) update -qq && $(APT_GET) install -y -qq postgresql; }

run: setup data
	@$(COMPILE_OWN)
	$(VENV)/bin/python -m ssljax.main --config $(CONFIG) --workdir $(WORKDIR)

# The fast tests on up to 4 pytest-xdist workers (one per CPU below that):
# most of a test's time is XLA compiling, which runs on one core, so two
# workers on 2 cores took the suite from 26 to 16 min here (2026-11-28). More
# than 4 would add a JAX process (about 1 GB) each for little more speed.
# PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= auto
test: setup-test data browser
	@$(COMPILE_OWN)
	$(VENV)/bin/python -m pytest -q --durations=25 -n $(PYTEST_WORKERS) --maxprocesses=4

test-slow: setup-test data browser postgres
	@$(COMPILE_OWN)
	$(VENV)/bin/python -m pytest -q -m slow

# The tests that import torch (pytest.importorskip("torch")): ssljax's train
# step and evaluation against the PyTorch job of benchmarks/. Elsewhere they
# skip; here a missing torch, torchvision or lightly fails before pytest, so
# nothing is skipped silently.
BENCH_TESTS := tests/test_first_epoch.py tests/test_vs_pytorch.py \
  tests/test_accelerator_benchmark.py
test-bench: setup-bench data
	@$(COMPILE_OWN)
	$(VENV)/bin/python -c 'import torch, torchvision, lightly'
	$(VENV)/bin/python -m pytest -q -rs $(BENCH_TESTS)

# The wheels a lent GPU machine needs for benchmarks/gpu_session.sh (it reaches
# no registry; its python3 3.12 has jax, flax, optax, torch): the `train`
# extra's packages it lacks, at uv.lock's versions, for CPython 3.12 x86-64,
# into .whl/ (ignored), which the device call carries.
GPU_WHEELS := grain==0.2.18 array-record==0.8.6 ml-collections==1.1.0 dm-pix==0.4.5 \
  portpicker==1.6.0
gpu-wheels:
	$(PYTHON) -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 \
	  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
	  $(GPU_WHEELS)
