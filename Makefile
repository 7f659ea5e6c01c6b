# The two commands of CALF, demo and test (the whole suite, as CI runs it), plus test-fast (the suite without
# tests marked slow), lint and launch-tools. Each sets itself up on first use (scripts/bootstrap.sh).
SHELL := /bin/bash
PYTEST_ARGS ?=

.PHONY: demo test test-fast lint bootstrap launch-tools

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	@. ./env.sh && calf demo

test: bootstrap
	@. ./env.sh && python -m pytest $(PYTEST_ARGS)

test-fast: bootstrap
	@. ./env.sh && python -m pytest -m "not slow" $(PYTEST_ARGS)

lint: bootstrap
	@. ./env.sh && ruff check .

# ros2 launch on a machine without ROS: install the launch bundle (wheels of launch, launch_ros, ros2launch,
# ros2cli and the composition_interfaces source, with its install.sh) into .venv; env.sh then sources its overlay.
launch-tools: bootstrap
	@test -x "$(LAUNCH_BUNDLE)/install.sh" || { echo "make launch-tools: pass LAUNCH_BUNDLE=DIR, the ROS 2 launch bundle holding install.sh" >&2; exit 2; }
	@"$(LAUNCH_BUNDLE)/install.sh" .venv "$(CURDIR)/build/launch_overlay" >/dev/null
	@echo "ros2 launch is installed: source env.sh again"
