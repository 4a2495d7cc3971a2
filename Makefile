# layerbench — the user's whole interface.
#   make compare STACK=ray     layer vs its version-matched bare vLLM, report under reports/<run>/
#   make run STACK=vllm        one deployment through the load harness (PROFILE=quick|cpu|default|<file>)
#   make run STACK=endpoint URL=http://127.0.0.1:8000   measure a server that is already running
#   make audit STACK=ray       which vllm:* metrics survive behind the layer (STACK=triton: both metric settings)
#   make report                all-stacks summary from every run under results/
#   make soak                  10 min at c=64 against the reference engine with faults on a schedule
#   make compare STACK=ray RESUME=<run-id>   continue an interrupted or failed compare
#   make test                  unit + integration tests (starts real vLLM on CPU)
#   make compare STACK=kserve MODE=inprocess   KServe's modes: raw (default), inprocess, proxy
#   make compare STACK=ray TARGET=k8s ARGS=--dry-run   the GPU cluster's manifests, rendered and validated (or docker)
#   make capacity STACK=vllm   the highest concurrency meeting the SLA (SLA_TTFT_P95=0.5 SLA_ITL_P95=0.05, seconds)
#   make capacity STACK=ray BASELINE=1   ... and its bare vLLM's: the capacity lost to the layer
#   make sweep STACK=ray SETTING=max_num_seqs=16,64   an engine setting, on the bare engine and behind the layer
#   make sweep STACK=ray OPT=ingress_replicas=1,2,4   which part of the layer costs: each shape vs the bare engine
#   GPU_HOURLY_USD=2.29 (any command): reports add the run's cost and $ per million output tokens
SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
ENGINE_VENV := .venv-engine
VLLM_VERSION := 0.32.0
RAY_VERSION := 2.60.0
PYTRITON_VERSION := 0.7.0
TRITONCLIENT_VERSION := 2.73.0
TRITON_VENV := .venv-triton
KSERVE_VERSION := 0.21.0
KSERVE_VENV := .venv-kserve
MODEL_DIR := .cache/models/tiny-qwen2
STAMPS := .stamps
STACK ?= vllm
PROFILE ?= quick
URL ?=
TARGET ?= local
MODE ?=
CLUSTER_CONFIG ?=
REPEATS ?=
RESUME ?=
DURATION ?= 600
ARGS ?=
BASELINE ?=
SLA_TTFT_P95 ?=
SLA_ITL_P95 ?=
SETTING ?=
OPT ?=
LB := $(VENV)/bin/layerbench

# stacks that need the engine environment and the model; the others only need the client
ENGINE_STACKS := vllm ray triton kserve
# TARGET=docker|k8s deploys the official images on GPU hosts: this machine only needs the client
needs = $(if $(filter-out local,$(TARGET)),client,$(if $(filter $(STACK),$(ENGINE_STACKS)),setup $(if $(filter ray triton kserve,$(STACK)),$(STAMPS)/$(STACK)),client))

setup-ray: setup $(STAMPS)/ray
setup-triton: setup $(STAMPS)/triton
setup-kserve: setup $(STAMPS)/kserve

.PHONY: setup setup-ray setup-triton setup-kserve client run compare capacity sweep audit report soak test test-fast lint \
	bench-harness clean help
help:
	@sed -n '2,16p' Makefile

setup: client $(STAMPS)/engine $(STAMPS)/model
client: $(STAMPS)/client

$(STAMPS)/client: pyproject.toml
	@mkdir -p $(STAMPS)
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	@touch $@

$(STAMPS)/engine: scripts/setup_engine.sh
	@mkdir -p $(STAMPS)
	bash scripts/setup_engine.sh $(ENGINE_VENV) $(VLLM_VERSION)
	@touch $@

$(STAMPS)/ray: $(STAMPS)/engine scripts/setup_ray.sh
	bash scripts/setup_ray.sh $(ENGINE_VENV) $(RAY_VERSION)
	@touch $@

$(STAMPS)/triton: $(STAMPS)/engine $(STAMPS)/client scripts/setup_triton.sh
	bash scripts/setup_triton.sh $(TRITON_VENV) $(ENGINE_VENV) $(VENV) $(PYTRITON_VERSION) $(TRITONCLIENT_VERSION)
	@touch $@

$(STAMPS)/kserve: $(STAMPS)/engine scripts/setup_kserve.sh
	bash scripts/setup_kserve.sh $(KSERVE_VENV) $(ENGINE_VENV) $(KSERVE_VERSION)
	@touch $@

$(STAMPS)/model: scripts/make_model.py $(STAMPS)/engine
	$(ENGINE_VENV)/bin/python scripts/make_model.py $(MODEL_DIR)
	@touch $@

run: $(needs)
	$(LB) run --stack $(STACK) --profile $(PROFILE) $(if $(URL),--url $(URL)) $(if $(MODE),--opt mode=$(MODE)) --target $(TARGET) $(if $(CLUSTER_CONFIG),--cluster-config $(CLUSTER_CONFIG)) $(ARGS)

compare: $(needs)
	$(LB) compare $(if $(RESUME),--resume $(RESUME),--stack $(STACK) --profile $(PROFILE)) \
		$(if $(REPEATS),--repeats $(REPEATS)) $(if $(MODE),--opt mode=$(MODE)) --target $(TARGET) $(if $(CLUSTER_CONFIG),--cluster-config $(CLUSTER_CONFIG)) $(ARGS)

capacity: $(needs)
	$(LB) capacity --stack $(STACK) --profile $(PROFILE) $(if $(URL),--url $(URL)) $(if $(MODE),--opt mode=$(MODE)) \
		$(if $(filter-out 0 no false,$(BASELINE)),--baseline) $(if $(SLA_TTFT_P95),--sla-ttft-p95 $(SLA_TTFT_P95)) \
		$(if $(SLA_ITL_P95),--sla-itl-p95 $(SLA_ITL_P95)) $(if $(REPEATS),--repeats $(REPEATS)) $(ARGS)

sweep: $(needs)
	$(LB) sweep --stack $(STACK) --profile $(PROFILE) $(if $(SETTING),--setting $(SETTING)) $(if $(OPT),--option $(OPT)) \
		$(if $(REPEATS),--repeats $(REPEATS)) $(if $(MODE),--opt mode=$(MODE)) $(ARGS)

audit: $(needs)
	$(LB) audit --stack $(STACK) $(if $(URL),--url $(URL)) $(if $(MODE),--opt mode=$(MODE)) --target $(TARGET) $(if $(CLUSTER_CONFIG),--cluster-config $(CLUSTER_CONFIG)) $(ARGS)

report: client
	$(LB) report $(ARGS)

soak: client
	$(LB) soak --duration $(DURATION) $(ARGS)

bench-harness: setup
	$(LB) bench-harness $(ARGS)

# pytest exits 5 when it collected nothing: that is a failure here, not a pass.
test: setup $(STAMPS)/ray $(STAMPS)/triton $(STAMPS)/kserve
	$(VENV)/bin/ruff check harness stacks tests scripts
	$(VENV)/bin/pytest -v tests

test-fast: client
	$(VENV)/bin/pytest -v -m "not slow" tests

lint: client
	$(VENV)/bin/ruff check harness stacks tests scripts

clean:
	rm -rf results .pytest_cache .ruff_cache
