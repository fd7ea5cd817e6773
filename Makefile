# jaxrepl — the two commands: `make run` (the main job) and `make test` (everything).
# Both install what is missing first (scripts/setup.sh). `make bench` compares us with JAX.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
SHARED ?= $(abspath $(ROOT)/../shared)

# rustup's tools, also when CI runs us from a non-login shell.
export PATH := $(HOME)/.cargo/bin:$(PATH)

# Build outputs live outside the clone so that fresh clones (CI) reuse them.
export CARGO_TARGET_DIR ?= $(HOME)/.cache/jaxrepl/target
# The MLIR build environment. .cargo/config.toml sets the same for cargo, but evcxr's
# child builds (the engine `:dep` in each session) never read that file.
export MLIR_SYS_220_PREFIX := /usr/lib/llvm-22
export TABLEGEN_220_PREFIX := /usr/lib/llvm-22
export LIBCLANG_PATH := /usr/lib/llvm-22/lib
export MLIR_SYS_LINK_SHARED := 1

# 2 cores shared with other work: builds run niced.
NICE ?= nice -n 10
CARGO ?= cargo
CARGO_FLAGS ?=

BIN_DIR := $(CARGO_TARGET_DIR)/debug
export JAXREPL_BIN := $(BIN_DIR)/jaxrepl
export JAXREPL_KERNEL_BIN := $(BIN_DIR)/jaxrepl-kernel
# The session's prelude `:dep`s this clone's engine (the binaries live outside the clone).
export JAXREPL_ENGINE_DIR := $(ROOT)/engine

# Jupyter state stays inside the clone (nothing in $HOME); the kernelspec is installed
# afresh into JUPYTER_PATH before every test run, pointing at the binary just built.
JUPYTER_DIR := $(ROOT)/.jupyter
export JUPYTER_PATH := $(JUPYTER_DIR)/path
export JUPYTER_RUNTIME_DIR := $(JUPYTER_DIR)/runtime
export JUPYTER_CONFIG_DIR := $(JUPYTER_DIR)/config
export JUPYTER_DATA_DIR := $(JUPYTER_DIR)/data
export JUPYTER_PLATFORM_DIRS := 1
export IPYTHONDIR := $(ROOT)/.ipython

VENV := $(ROOT)/.venv
VENV_JAX := $(ROOT)/.venv-jax
NOTEBOOK ?= notebooks/201-01-jit.ipynb
PYTEST_ARGS ?=
# pytest-xdist workers for the Python client tests (0: one process). Each test module stays
# on one worker (--dist loadfile: its notebook or kernel is started once; a notebook has one
# module); a second worker's first session copies the warm build slot instead of building
# the engine (repl/ slots.rs).
PYTEST_WORKERS ?= 2
BENCH_BIN ?= bench

.PHONY: help setup build run repl test test-rust test-warm test-py kernelspec bench clean-jupyter

help:
	@echo "make run    install what is missing, build, run $(NOTEBOOK) in jaxrepl (prints every cell and output)"
	@echo "make test   install what is missing, build, cargo test, jaxrepl --warm, Python client tests (tests/py)"
	@echo "make bench  our engine and session against JAX 0.10.2 ($(SHARED)/bench/jax_bench.py), one table"
	@echo "make setup  only install what is missing (scripts/setup.sh)"
	@echo "make build  only build the workspace (cargo build, debug) into $(CARGO_TARGET_DIR)"

setup:
	@bash $(ROOT)/scripts/setup.sh

# `--tests` too: `cargo test` unifies dependency features with the dev-dependencies, and a
# bins-only build with other features would rebuild evcxr's rust-analyzer crates each time
# the two alternate in the shared target directory.
build: setup
	cd $(ROOT) && $(NICE) $(CARGO) build --workspace --bins --tests $(CARGO_FLAGS)

run: build
	cd $(ROOT) && $(JAXREPL_BIN) $(NOTEBOOK)

# The interactive prompt (not part of the two commands; handy after `make run`).
repl: build
	cd $(ROOT) && $(JAXREPL_BIN)

test: build test-rust test-warm test-py

test-rust: build
	cd $(ROOT) && $(NICE) $(CARGO) test --workspace $(CARGO_FLAGS)

# Builds the session's persistent evaluation directory (the engine `:dep`) so that the
# Python tests' first engine cell does not pay a cold engine build.
test-warm: build
	cd $(ROOT) && $(JAXREPL_BIN) --warm

kernelspec: build
	rm -rf $(JUPYTER_DIR)
	mkdir -p $(JUPYTER_PATH) $(JUPYTER_RUNTIME_DIR) $(JUPYTER_CONFIG_DIR) $(JUPYTER_DATA_DIR)
	$(JAXREPL_KERNEL_BIN) --install $(JUPYTER_PATH)
	test -f $(JUPYTER_PATH)/kernels/jaxrepl/kernel.json || \
	  { echo "make: $(JAXREPL_KERNEL_BIN) --install did not write $(JUPYTER_PATH)/kernels/jaxrepl/kernel.json" >&2; exit 1; }
	$(VENV)/bin/jupyter kernelspec list

# pytest's exit status passes through unchanged: 5 (no tests collected) fails too.
test-py: kernelspec test-warm
	cd $(ROOT) && $(VENV)/bin/python -m pytest tests/py -v -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS)

# Ours: the engine's bench binary (docs/bench.md fixes its JSON keys); JAX: the shared script.
# scripts/bench.py runs both and prints one table; it says so when our binary does not exist.
bench:
	@bash $(ROOT)/scripts/setup.sh --bench
	cd $(ROOT) && $(NICE) $(CARGO) build --release --bin $(BENCH_BIN) $(CARGO_FLAGS) || \
	  echo "make bench: could not build the engine's bench binary (see above); the table will say so" >&2
	cd $(ROOT) && $(VENV)/bin/python scripts/bench.py --shared $(SHARED) --bin $(CARGO_TARGET_DIR)/release/$(BENCH_BIN)

clean-jupyter:
	rm -rf $(JUPYTER_DIR) $(ROOT)/.ipython
