# layerbench — the user's whole interface.
#   make compare STACK=ray     layer vs its version-matched bare vLLM, report under reports/<run>/
#   make run STACK=vllm        one deployment through the load harness (PROFILE=quick|cpu|default|<file>)
#   make run STACK=endpoint URL=http://127.0.0.1:8000   measure a server that is already running
#   make audit STACK=ray       which vllm:* metrics survive behind the layer (STACK=triton: both metric settings)
#   make report                all stacks from every compare under results/ (RUN=<run-id>: one compare's report again)
#   make soak                  10 min at c=64 against the reference engine with faults on a schedule
#   make compare STACK=ray RESUME=<run-id>   continue an interrupted or failed compare
#   make compare STACK=ray MDE=2% BUDGET=20m   size the compare for a 2% effect within 20 minutes; it stops when
#                              every level is decided (MAX_PAIRS=N: at most N pairs; PAIRS=N: exactly N, no early stop)
#   make test                  unit + integration tests (starts real vLLM on CPU)
#   make compare STACK=kserve MODE=inprocess   KServe's modes: raw (default), inprocess, proxy
#   make compare STACK=ray TARGET=k8s ARGS=--dry-run   the GPU cluster's manifests, rendered and validated (or docker)
#   make diagnose STACK=ray    why the layer costs: one pair, every process profiled (LEVELS=1,16), a few minutes
#   make capacity STACK=vllm   the highest concurrency meeting the SLA (SLA_TTFT_P95=0.5 SLA_ITL_P95=0.05, seconds)
#   make capacity STACK=ray BASELINE=1   ... and its bare vLLM's: the capacity lost to the layer
#   make sweep STACK=ray SETTING=max_num_seqs=16,64   an engine setting, on the bare engine and behind the layer
#   make sweep STACK=ray OPT=ingress_replicas=1,2,4   which part of the layer costs: each shape vs the bare engine
#   make sweep STACK=ray SHAPES=128x128,2048x128 LEVELS=1,16   the layer's cost by request shape (input x output)
#   GPU_HOURLY_USD=2.29 (any command): reports add the run's cost and $ per million output tokens
#   make doctor                whether this host can run a compare (GPUs, driver, CUDA, Python, disk, model...)
#   make gpu-check             on an NVIDIA host before setup: driver sources, build, NVML, client rate; one table
#   make compare STACK=ray ARGS=--dry-run   the plan (model, revision, engine build, GPUs, settings), nothing deployed
#   make setup DRY_RUN=1       what setup would install on this host, and why; changes nothing
#   MODEL=org/name REVISION=<commit> GPUS=0,1 (run, compare, capacity, sweep): the model and GPUs to serve with
#   REPLICAS=N (run, compare, capacity, sweep): N engines per side, the bare side spread by the load client
#   OPT="key=value ..." (run, serve, compare, diagnose, capacity, audit): the stack's options, each a --opt
#                              (make compare STACK=vllm-router OPT=policy=round_robin); make sweep takes OPT=k=v1,v2
.DEFAULT_GOAL := help
SHELL := /bin/bash
# the Python that makes every environment: the first of 3.12, 3.11, 3.10 found (PY=python3.11 to choose)
PY ?= $(shell for p in python3.12 python3.11 python3.10; do $$p -c '' >/dev/null 2>&1 && { echo $$p; break; }; done)
export PY
VENV := .venv
ENGINE_VENV := .venv-engine
MODEL_DIR := .cache/models/tiny-qwen2
STAMPS := .stamps
STACK ?= vllm
PROFILE ?= quick
URL ?=
TARGET ?= local
MODE ?=
CLUSTER_CONFIG ?=
REPEATS ?=
PAIRS ?=
MDE ?=
BUDGET ?=
MAX_PAIRS ?=
DEPLOYMENTS ?=
# BUSY_HOST=warn|go (compare): a busy host is refused before deploying unless warn (say so, go on) or go (not checked)
BUSY_HOST ?=
RESUME ?=
DURATION ?= 600
ARGS ?=
MODEL ?=
REVISION ?=
GPUS ?=
CLIENT_PROCS ?=
REPLICAS ?=
DRY_RUN ?=
# DRY_RUN=1: every setup step prints what it would install and why; no stamp, venv or file is written
DRY := $(filter-out 0 no false,$(DRY_RUN))
export DRY_RUN := $(DRY)
STAMP = $(if $(DRY),@echo "  (dry run: $@ not written)",@touch $@)
RUN = $(if $(DRY),@echo "  would run:",)
BASELINE ?=
BOTH ?=
RUN ?=
SLA_TTFT_P95 ?=
SLA_ITL_P95 ?=
SETTING ?=
SHAPES ?=
LEVELS ?=
OPT ?=
# the stack's options as the CLI takes them: MODE= (KServe's shape) and each OPT= word, one --opt apiece
OPTS = $(if $(MODE),--opt mode=$(MODE)) $(foreach o,$(OPT),--opt $(o))
LB := $(VENV)/bin/layerbench
SLOW_WORKERS ?= 2
SETUP_JOBS ?= 3

# a layer's own environment is scripts/setup_<layer>.sh, run with ENGINE_VENV and CLIENT_VENV and stamped once;
# the layers are whatever setup scripts there are (the client's, the engine's and Chromium's are not layers)
LAYERS := $(filter-out client engine chromium,$(patsubst scripts/setup_%.sh,%,$(wildcard scripts/setup_*.sh)))
# what a command needs: the engine environment and the model, and the stack's own environment where it has one;
# TARGET=docker|k8s deploys the official images on GPU hosts and a dry run (ARGS=--dry-run) installs nothing:
# this machine then only needs the client
needs = $(if $(filter-out local,$(TARGET))$(filter --dry-run,$(ARGS)),client,setup $(if $(filter $(STACK),$(LAYERS)),$(STAMPS)/setup-$(STACK)))
MODEL_ARGS = $(if $(MODEL),--model $(MODEL)) $(if $(REVISION),--revision $(REVISION)) $(if $(GPUS),--gpus $(GPUS)) \
	$(if $(CLIENT_PROCS),--client-procs $(CLIENT_PROCS)) $(if $(REPLICAS),--replicas $(REPLICAS))

setup-%: setup $(STAMPS)/setup-% ;  # a layer's own environment (make setup-ray): see LAYERS
setup-chromium: $(STAMPS)/chromium  ## Debian's headless Chromium, for the report's browser test

.PHONY: setup setup-chromium client run serve compare diagnose capacity sweep audit report soak test \
	test-setup test-fast lint bench-harness calibrate clean help stacks doctor gpu-check lock
ifneq ($(DRY),)
.PHONY: $(STAMPS)/client $(STAMPS)/engine $(STAMPS)/gpulike $(STAMPS)/model $(STAMPS)/engine-check \
	$(LAYERS:%=$(STAMPS)/setup-%)
endif
help:  ## this list (also plain `make`)
	@sed -n '2,23p' Makefile
	@echo '# targets:'
	@awk -F ':.*## ' '/^[a-z-]+:.*## /{printf "#   %-16s %s\n", $$1, $$2}' Makefile
	@printf "#   %-16s %s\n" "setup-<layer>" "a layer's own environment (scripts/setup_<layer>.sh): $(LAYERS)"

setup: client $(STAMPS)/engine $(STAMPS)/gpulike $(STAMPS)/model $(STAMPS)/engine-check  ## the client, the engine environment (vLLM's build for this host, the GPU-like model's plugin), the tiny model and a one-token GPU check
client: $(STAMPS)/client  ## the client's virtual environment only

$(STAMPS)/client: pyproject.toml scripts/setup_client.sh locks/client.txt
	$(if $(DRY),,@mkdir -p $(STAMPS))
	bash scripts/setup_client.sh $(VENV)
	$(STAMP)

$(STAMPS)/engine: scripts/setup_engine.sh harness/host/engine_build.py
	$(if $(DRY),,@mkdir -p $(STAMPS))
	bash scripts/setup_engine.sh $(ENGINE_VENV)
	$(STAMP)

# the GPU-like engine (engine.model: gpu-like): a vLLM plugin whose model step sleeps, in the engine environment
$(STAMPS)/gpulike: $(STAMPS)/engine engine_plugin/pyproject.toml $(wildcard engine_plugin/layerbench_gpulike/*.py)
	$(RUN) rm -rf engine_plugin/build  # a stale build would go into the wheel
	$(RUN) $(ENGINE_VENV)/bin/pip install -q --no-deps --no-build-isolation ./engine_plugin
	$(STAMP)

.PRECIOUS: $(STAMPS)/setup-%
.SECONDEXPANSION:
$(STAMPS)/setup-%: scripts/setup_%.sh $$(wildcard locks/$$*.txt locks/$$*-client.txt) $(STAMPS)/engine $(STAMPS)/client
	ENGINE_VENV=$(ENGINE_VENV) CLIENT_VENV=$(VENV) bash scripts/setup_$*.sh
	$(STAMP)

# every environment's lock, locks/<name>.txt, compiled again from locks/<name>.in (and pyproject.toml for the
# client's) with uv, every file's hash included; the same files again until an input changes (scripts/lock.py)
lock:  ## the hashed lock files under locks/ again from their inputs there (needs the package index; ARGS=ray: one)
	$(if $(PY),,@echo "no python3.12, python3.11 or python3.10 on PATH: install one, or set PY=" >&2; exit 1)
	$(PY) scripts/lock.py $(ARGS)

# Debian's headless Chromium and its driver, for the report's browser test (needs root or passwordless sudo)
$(STAMPS)/chromium: scripts/setup_chromium.sh
	@mkdir -p $(STAMPS)
	bash scripts/setup_chromium.sh
	@touch $@

$(STAMPS)/model: scripts/make_model.py $(STAMPS)/engine
	$(RUN) $(ENGINE_VENV)/bin/python scripts/make_model.py $(MODEL_DIR)
	$(STAMP)

# on a GPU host: one token generated on the GPU, so a build that does not fit fails here, named
$(STAMPS)/engine-check: scripts/check_engine.py $(STAMPS)/engine $(STAMPS)/model
	$(RUN) $(ENGINE_VENV)/bin/python scripts/check_engine.py $(MODEL_DIR)
	$(STAMP)

doctor:  ## whether this host can run a compare: GPUs, driver, CUDA, Python, disk, model, ports, docker, kubectl
	@$(if $(PY),,echo "no python3.12, python3.11 or python3.10 on PATH: install one, or set PY=" >&2; exit 1)
	@$(PY) -m harness.host.doctor --target $(TARGET) $(if $(MODEL),--model $(MODEL)) $(if $(REVISION),--revision $(REVISION))

# on a real NVIDIA host, before any setup: the driver from each source, the build setup would choose, NVML for 20 s
# and doctor's GPU lines (system Python and nvidia-ml-py only), then the client's events/s per core in 1-8 processes
# where the client environment exists; one table, non-zero on any mismatch
gpu-check:  ## on an NVIDIA host: driver, build, NVML sampler, doctor and the client's rate per core, in one table
	@$(if $(PY),,echo "no python3.12, python3.11 or python3.10 on PATH: install one, or set PY=" >&2; exit 1)
	@$(PY) -m harness.bench.gpu_check $(if $(wildcard $(VENV)/bin/python),--client-python $(VENV)/bin/python) $(ARGS)

run: $(needs)  ## one deployment through the load harness
	$(LB) run --stack $(STACK) --profile $(PROFILE) $(MODEL_ARGS) $(if $(URL),--url $(URL)) $(OPTS) --target $(TARGET) $(if $(CLUSTER_CONFIG),--cluster-config $(CLUSTER_CONFIG)) $(ARGS)

# up until Ctrl-C, as a compare deploys it: prints each side's URL, model and /metrics for your own client
serve: $(needs)  ## deploy a stack (BOTH=1: and its bare vLLM) as a compare does; up until Ctrl-C
	$(LB) serve --stack $(STACK) --profile $(PROFILE) $(MODEL_ARGS) $(OPTS) \
		$(if $(filter-out 0 no false,$(BOTH)),--both) $(ARGS)

compare: $(needs)  ## a layer against its version-matched bare vLLM; report under reports/<run>/
	$(LB) compare $(if $(RESUME),--resume $(RESUME),--stack $(STACK) --profile $(PROFILE) $(MODEL_ARGS)) \
		$(if $(REPEATS),--repeats $(REPEATS)) $(if $(PAIRS),--pairs $(PAIRS)) $(if $(DEPLOYMENTS),--deployments $(DEPLOYMENTS)) $(OPTS) --target $(TARGET) $(if $(CLUSTER_CONFIG),--cluster-config $(CLUSTER_CONFIG)) \
		$(if $(MDE),--mde $(MDE)) $(if $(BUDGET),--budget $(BUDGET)) $(if $(MAX_PAIRS),--max-pairs $(MAX_PAIRS)) $(if $(BUSY_HOST),--busy-host $(BUSY_HOST)) $(ARGS)

# why the layer costs, alone, in a few minutes: one pair, every level profiled after its window (LEVELS=1,16)
diagnose: $(needs)  ## one pair with every process profiled: the diagnosis report without a verdict's pairs
	$(LB) diagnose --stack $(STACK) --profile $(PROFILE) $(MODEL_ARGS) $(if $(LEVELS),--levels $(LEVELS)) \
		$(OPTS) $(ARGS)

capacity: $(needs)  ## the highest concurrency (or rate) meeting the SLA
	$(LB) capacity --stack $(STACK) --profile $(PROFILE) $(MODEL_ARGS) $(if $(URL),--url $(URL)) $(OPTS) \
		$(if $(filter-out 0 no false,$(BASELINE)),--baseline) $(if $(SLA_TTFT_P95),--sla-ttft-p95 $(SLA_TTFT_P95)) \
		$(if $(SLA_ITL_P95),--sla-itl-p95 $(SLA_ITL_P95)) $(if $(REPEATS),--repeats $(REPEATS)) --target $(TARGET) \
		$(if $(CLUSTER_CONFIG),--cluster-config $(CLUSTER_CONFIG)) $(ARGS)

sweep: $(needs)  ## an engine setting (SETTING=), a layer option (OPT=) or the request's shape (SHAPES=) swept
	$(LB) sweep --stack $(STACK) --profile $(PROFILE) $(MODEL_ARGS) $(if $(SETTING),--setting $(SETTING)) $(if $(OPT),--option $(OPT)) \
		$(if $(SHAPES),--shapes $(SHAPES)) $(if $(LEVELS),--levels $(LEVELS)) \
		$(if $(REPEATS),--repeats $(REPEATS)) $(if $(MODE),--opt mode=$(MODE)) $(ARGS)

audit: $(needs)  ## which vllm:* metrics survive behind the layer
	$(LB) audit --stack $(STACK) $(if $(URL),--url $(URL)) $(OPTS) --target $(TARGET) $(if $(CLUSTER_CONFIG),--cluster-config $(CLUSTER_CONFIG)) $(ARGS)

report: client  ## all stacks: reports/summary.{md,html,csv}; RUN=<run-id>: that compare's report again
	$(if $(RUN),$(LB) render $(RUN),$(LB) report) $(ARGS)

stacks: client  ## every stack with its options, types and defaults
	$(LB) stacks

soak: client  ## the reference engine at c=64 with faults on a schedule
	$(LB) soak --duration $(DURATION) $(ARGS)

bench-harness: setup  ## layerbench's own accuracy against the reference engine
	$(LB) bench-harness $(ARGS)

calibrate: setup  ## the GPU-like engine's step and worker CPU against the configured ones (a bench-harness section)
	$(LB) bench-harness --only gpulike --out-dir reports/harness/gpulike $(ARGS)

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
# The tests that start nothing run on every core (pytest-xdist); then, one at a time, those that measure a known
# effect or this CPU's speed (two deployments at once would share the host's cores and move each other's timings),
# while no other lane has loaded the host: a CI run that ran them after the side-by-side lane took 61 min over
# them instead of 13, and 10 of 35 failed on a starved host (a client-bound level, a known proxy cost read
# 60% high). Then the other slow tests.
test:  ## lint + every test (starts real vLLM, Ray, Triton, KServe, Chromium)
	@$(MAKE) --no-print-directory test-setup
	$(VENV)/bin/ruff check harness stacks tests scripts engine_plugin
	$(VENV)/bin/pytest -n auto -m "not slow" tests
	$(VENV)/bin/pytest -v -m "slow and alone" --durations=10 tests
	@# these wait on servers more than they compute, so SLOW_WORKERS run at once, a file to a worker (tests that
	@# share a deployment are in one file; loadgroup does not group on pytest 9.2: pytest-xdist#1386), the
	@# costliest files first (tests/conftest.py; xdist would otherwise reorder them by their number of tests). Two,
	@# not three: with three, vLLM, Ray and KServe starting at once on the 2 cores kept Ray's engine from being
	@# ready within 600 s and starved the reference engine's load client
	$(VENV)/bin/pytest -n $(SLOW_WORKERS) --dist loadfile --no-loadscope-reorder -v -m "slow and not alone" \
		--durations=15 tests

# what make test installs, SETUP_JOBS at a time where no two installs touch one environment: the client, the engine
# and the layers beside it, then Ray (setup_ray.sh installs into the engine environment), then the layers that read
# the engine environment through a .pth while they install (KServe, Triton). One at a time, from scratch on this
# 2-core host, the installs took 254 s (2026-12-03)
ENGINE_WRITERS := ray
ENGINE_READERS := kserve triton
test-setup:  ## everything make test needs, installed SETUP_JOBS at a time (the same stamps as make setup, setup-<layer>)
	@$(MAKE) --no-print-directory -j $(SETUP_JOBS) setup $(STAMPS)/chromium \
		$(patsubst %,$(STAMPS)/setup-%,$(filter-out $(ENGINE_WRITERS) $(ENGINE_READERS),$(LAYERS)))
	@$(MAKE) --no-print-directory $(patsubst %,$(STAMPS)/setup-%,$(filter $(ENGINE_WRITERS),$(LAYERS)))
	@$(MAKE) --no-print-directory -j $(SETUP_JOBS) $(patsubst %,$(STAMPS)/setup-%,$(filter $(ENGINE_READERS),$(LAYERS)))

test-fast: client  ## the tests that start nothing, on every core (about a minute), the layering contract among them
	$(VENV)/bin/pytest -n auto -m "not slow" tests

lint: client  ## ruff
	$(VENV)/bin/ruff check harness stacks tests scripts engine_plugin

clean:  ## results/, generated reports/<run>/ and caches (not the committed examples)
	rm -rf results .pytest_cache .ruff_cache
	@# generated reports (reports/<run>/, summary.*, soak/); the committed examples and harness figures stay
	if [ -d reports ]; then find reports -mindepth 1 -maxdepth 1 ! -name examples ! -name harness ! -name README.md -exec rm -rf {} +; fi
