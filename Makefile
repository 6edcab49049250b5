# The README's commands. `make demo` and `make test` set everything up on a fresh
# Debian/Ubuntu machine: the system library Open3D needs, a virtual environment, the package.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint format clean system-deps

setup: $(STAMP)

# Open3D's import needs libusb-1.0; install it (as root, or with sudo) only when missing.
system-deps:
	@if ! ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0'; then \
		echo "installing libusb-1.0-0 (needed by 'import open3d')"; \
		SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO="sudo"; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libusb-1.0-0 >/dev/null; \
	fi

$(STAMP): pyproject.toml | system-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: system-deps $(STAMP)
	$(BIN)/lidar-sim scan scenes/farm/survey.yaml -o out/demo.npz -o out/demo.pcd -o out/demo.las

test: system-deps $(STAMP)
	$(BIN)/ruff check simulator tests scenes benchmarks
	$(BIN)/ruff format --check simulator tests scenes benchmarks
	$(BIN)/pytest -q

format: $(STAMP)
	$(BIN)/ruff format simulator tests scenes benchmarks
	$(BIN)/ruff check --fix simulator tests scenes benchmarks

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache
