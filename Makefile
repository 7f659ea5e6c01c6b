# The two commands of CALF, demo and test (the whole suite, as CI runs it), plus test-fast (the suite without
# tests marked slow), lint (ruff and the import-cycle check), docs (the manual, in strict mode) and launch-tools. Each sets itself up on first use (scripts/bootstrap.sh).
SHELL := /bin/bash
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint docs bootstrap launch-tools

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	@. ./env.sh && calf demo

test: bootstrap
	@. ./env.sh && python -m pytest $(PYTEST_ARGS)

test-fast: bootstrap
	@. ./env.sh && python -m pytest -m "not slow" $(PYTEST_ARGS)

lint: bootstrap
	@. ./env.sh && ruff check . && python scripts/check_imports.py

# The manual (docs/, mkdocs.yml) into build/site, in strict mode: a broken link or reference fails. Its tools
# (requirements-docs.lock) are installed into .venv on first use, without changing a package requirements.lock pins.
DOCS_HASH = $(shell sha256sum requirements-docs.lock | cut -d' ' -f1)
docs: bootstrap
	@if [[ "$$(cat .venv/.calf-stamps/docs 2>/dev/null)" != "$(DOCS_HASH)" ]]; then \
	  echo "[docs] install requirements-docs.lock" >&2; \
	  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -r requirements-docs.lock \
	    2>&1 | grep -v "^WARNING: Location 'file:" >&2 || true; \
	  .venv/bin/python -m mkdocs --version >/dev/null && mkdir -p .venv/.calf-stamps && echo "$(DOCS_HASH)" > .venv/.calf-stamps/docs; \
	fi
	@. ./env.sh && NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict --quiet
	@echo "[docs] the manual is in build/site (open build/site/index.html)"

# ros2 launch on a machine without ROS: install the launch bundle (wheels of launch, launch_ros, ros2launch,
# ros2cli and the composition_interfaces source, with its install.sh) into .venv; env.sh then sources its overlay.
launch-tools: bootstrap
	@test -x "$(LAUNCH_BUNDLE)/install.sh" || { echo "make launch-tools: pass LAUNCH_BUNDLE=DIR, the ROS 2 launch bundle holding install.sh" >&2; exit 2; }
	@"$(LAUNCH_BUNDLE)/install.sh" .venv "$(CURDIR)/build/launch_overlay" >/dev/null
	@echo "ros2 launch is installed: source env.sh again"
