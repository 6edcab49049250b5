# The README's commands. `make demo` and `make test` set everything up on a fresh
# Debian/Ubuntu machine: the system library Open3D needs, a virtual environment, the package.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two set-ups, each with its stamp: the demo's (the package and its runtime dependencies)
# and the tests' on top of it (the dev extras, PyTorch, the devkits, ouster-sdk). `make test`
# after `make demo` installs only what the demo's set-up left out.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed-test

.PHONY: setup demo test lint format clean system-deps preset-plots docs

setup: $(STAMP)

# Debian packages, installed (as root, or with sudo) only when missing: libusb-1.0 for
# `import open3d`; software Vulkan for headless renders; Xvfb and Mesa GL for the viewer.
DEB_PACKAGES := libusb-1.0-0 libvulkan1 mesa-vulkan-drivers xvfb libgl1-mesa-dri

system-deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=""; [ "$$(id -u)" -eq 0 ] || SUDO="sudo"; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

$(DEMO_STAMP): pyproject.toml | system-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	@touch $@

# What the tests use beyond the demo, resolved by pip in one step so that it weighs every
# pin at once: the dev extras; PyTorch for the dataset loader's test (torch_dataset through a
# DataLoader; the CPU build 2.13.0 is the one this machine kind keeps on disk, so no other
# index is needed); and the requirements of ouster-sdk (the [ouster] extra: Ouster pcaps) as
# it states them, less its pins on rosbags (==0.9.23, older than the [ros] extra's) and flask,
# nanobind and pytest-asyncio (the tests do not use them). Last, and without their
# dependencies, the two packages that pin against what is installed: nuscenes-devkit 1.2
# (numpy < 2, yet it runs on numpy 2 for what the tests use) and ouster-sdk 1.0.1 (the bag
# reader and writer work with both rosbags). pip checks no dependencies of a --no-deps
# install, and no later install runs, so no resolver complaint is printed.
OUSTER_REQUIREMENTS := 'psutil>=5.9.5,<6' 'click>=8.1.3,<8.1.8' 'prettytable>=2.1.0,<3.17.0' \
	'requests>=2,<3' 'more-itertools>=8.6' 'threadpoolctl>=3.5.0' 'Pillow>=10.2.0' packaging \
	'zeroconf>=0.150.0'

$(STAMP): $(DEMO_STAMP)
	$(BIN)/pip install --quiet -e '.[dev]' 'torch==2.13.0' $(OUSTER_REQUIREMENTS)
	$(BIN)/pip install --quiet --no-deps 'nuscenes-devkit==1.2.0' 'ouster-sdk==1.0.1'
	@touch $@

demo: system-deps $(DEMO_STAMP)
	$(BIN)/lidar-sim scan scenes/farm/survey.yaml -o out/demo.npz -o out/demo.pcd -o out/demo.las

test: system-deps $(STAMP)
	$(BIN)/ruff check simulator tests scenes benchmarks
	$(BIN)/ruff format --check simulator tests scenes benchmarks
	$(BIN)/pytest -q
	$(MKDOCS) build --strict --quiet

format: $(STAMP)
	$(BIN)/ruff format simulator tests scenes benchmarks
	$(BIN)/ruff check --fix simulator tests scenes benchmarks

# The user guide (docs/, mkdocs.yml) as a site in site/; `make test` builds it with --strict
# (a broken link, a missing picture or a docstring it cannot read fails the build).
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: $(STAMP)
	$(MKDOCS) build --strict
	@echo "open site/index.html"

clean:
	rm -rf $(VENV) out site .pytest_cache .ruff_cache

# One frame of every preset's pattern, as docs/img/presets/NAME.png (compare with the datasheets).
preset-plots: $(DEMO_STAMP)
	@mkdir -p docs/img/presets
	@for n in $$($(BIN)/python -c "from simulator.config import scanner_presets; print(*scanner_presets())"); do \
		$(BIN)/lidar-sim scanners $$n --plot docs/img/presets/$$n.png; \
	done
