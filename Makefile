# verl-pascal: the two commands are `make demo` and `make test` (README.md).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: test demo setup venv lint unit molecule clean clean-host

## test: everything CI runs, from a fresh machine (needs root for packages and Podman);
## the unit tests and the scenarios run in two lanes side by side (scripts/test.sh)
test:
	@scripts/test.sh

## demo: provision a throwaway container as if it were p40-box, with stand-in artifacts
## (setup and venv are its first stages: scripts/demo.sh prints one line per stage)
demo:
	@scripts/demo.sh

setup:
	scripts/setup-host.sh

venv: $(VENV)/.installed

# --no-compile: the ansible package alone brings tens of thousands of modules
# that are never imported; Python compiles those that are on first import
# (what it saves: docs/benchmarks.md, "The test command").
$(VENV)/.installed: requirements-dev.txt pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --no-compile -r requirements-dev.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

lint: venv
	$(BIN)/yamllint --strict .
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/ansible-lint --profile production
	shellcheck scripts/*.sh bench/*.sh scripts/standins/*.sh scripts/standins/nvcc scripts/standins/nvidia-smi scripts/standins/cuda-uninstaller \
	  scripts/standins/miniforge/installer-header.sh scripts/standins/miniforge/conda.sh scripts/standins/miniforge/condabin-conda

unit: venv
	$(BIN)/python -m pytest tests

molecule: setup venv
	scripts/molecule.sh test --all

clean:
	-podman rm -f verl-pascal-demo p40-box
	rm -rf .cache

## clean-host: remove what make test and make demo leave outside the clone (caches, images)
clean-host: clean
	-podman rmi -f $$(podman images --format '{{.Repository}}:{{.Tag}}' | grep '^localhost/verl-pascal') 2>/dev/null
	rm -rf /var/cache/verl-pascal-test $(HOME)/.cache/verl-pascal $(HOME)/.cache/pip $(HOME)/.cache/molecule $(HOME)/.cache/matplotlib $(HOME)/.ansible
	rm -f /etc/containers/containers.conf.d/50-verl-pascal.conf
