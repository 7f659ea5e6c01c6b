# The two commands of CALF. Each sets itself up on first use (scripts/bootstrap.sh).
SHELL := /bin/bash
PYTEST_ARGS ?=

.PHONY: demo test lint bootstrap

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	@. ./env.sh && calf demo

test: bootstrap
	@. ./env.sh && python -m pytest $(PYTEST_ARGS)

lint: bootstrap
	@. ./env.sh && ruff check .
