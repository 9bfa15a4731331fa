# Fresh machine → running job. Everything the project needs is installed here:
# Debian's Fashion-MNIST files (apt, as root or through sudo) and a local venv.
PYTHON ?= python3
VENV ?= .venv
WORKDIR ?= runs/vicreg
CONFIG ?= configs/vicreg.py
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: setup data run test test-slow

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

data: $(FMNIST)

$(FMNIST):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq dataset-fashion-mnist

run: setup data
	$(VENV)/bin/python -m ssljax.main --config $(CONFIG) --workdir $(WORKDIR)

test: setup data
	$(VENV)/bin/python -m pytest -q

test-slow: setup data
	$(VENV)/bin/python -m pytest -q -m slow
