# One entry point for people and CI. Everything a fresh machine needs is installed from here.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# `make test` on two workers (pytest-xdist), one per core: most of the suite waits on real processes (hubs,
# the control plane, kernels), so two files at a time keep both cores busy; each worker has its own dev
# cluster, and a file stays on one worker (its module-scoped hub, the ship tier's real nodes, at most one at a
# time). PYTEST_WORKERS=0 runs it in one process, as before.
PYTEST_WORKERS ?= 2

.PHONY: install labextension test-deps plan binaries node-deps test test-binaries test-installs dev-binaries unit lint dev bench matrix-venv images image-deps
# The product, then the development distribution (devcluster/: the dev cluster, `gpuhub dev` / `gpuhub cluster`,
# the suite's fixtures), both editable; --no-deps: its one dependency is the product just installed.
$(VENV)/.installed: setup.cfg pyproject.toml devcluster/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps -e ./devcluster
	touch $@

# configurable-http-proxy (JupyterHub's proxy) and axe-core (the accessibility tests' checker) from npm,
# pinned by package-lock.json.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The JupyterLab extension (labextension/): its own npm tree, pinned by its package-lock.json,
# compiled with tsc and bundled by @jupyterlab/builder against the venv's JupyterLab, then linked into the
# venv (an editable install has no data_files) with the config (jupyter-config/) that enables the server routes
# it calls (jupyterhub_gpu/singleuser/server.py).
# A wheel or image build ships the same files as data_files (setup.cfg); build this first.
LAB := labextension
LAB_OUT := $(LAB)/build/jupyterhub-gpu-labextension
LAB_CORE = $$($(abspath $(PY)) -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')
$(LAB)/node_modules/.installed: $(LAB)/package.json $(LAB)/package-lock.json
	cd $(LAB) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(LAB_OUT)/package.json: $(VENV)/.installed $(LAB)/node_modules/.installed $(wildcard $(LAB)/src/*.ts) $(LAB)/style/index.css $(LAB)/tsconfig.json
	cd $(LAB) && node_modules/.bin/tsc && node_modules/.bin/build-labextension --core-path "$(LAB_CORE)" .
	rm -rf $(VENV)/share/jupyter/labextensions/jupyterhub-gpu-labextension
	mkdir -p $(VENV)/share/jupyter/labextensions $(VENV)/etc/jupyter/jupyter_server_config.d
	ln -s $(abspath $(LAB_OUT)) $(VENV)/share/jupyter/labextensions/jupyterhub-gpu-labextension
	cp jupyter-config/jupyter_server_config.d/jupyterhub_gpu.json $(VENV)/etc/jupyter/jupyter_server_config.d/
	touch $@

# JupyterLab's news prompt and update check off for the dev hub's servers too, as in the singleuser image.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
$(LAB_OVERRIDES): images/singleuser/overrides.json $(VENV)/.installed
	mkdir -p $(dir $@)
	cp $< $@

labextension: $(LAB_OUT)/package.json $(LAB_OVERRIDES)

# What only the tests (and benchmarks) need, so `make dev` does not install it: Debian's Chromium for the
# browser tests (Playwright drives it; it never downloads a browser), and Debian's Prometheus for the culler
# tests (tests/culler scrape a DCGM-format exporter with it).
test-deps:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@command -v prometheus >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus; }

# What the dev hub and the pure tier need: the venv, the proxy from npm, the JupyterLab extension.
install: $(VENV)/.installed node_modules/.installed labextension

# kube-apiserver, scheduler, controller-manager, etcd, kwok, kueue: built once from Go modules into
# ~/.cache/jupyterhub-gpu (a cold build takes a while on 2 cores; later runs reuse it).
# `plan` first, before the installs: what a first run builds and about how long (silent once built).
plan:
	@python3 devcluster/jupyterhub_gpu_dev/binaries.py plan $(BINARIES_ARGS)

binaries: plan install
	GPUHUB_BUILD_PLAN_SAID=1 $(PY) devcluster/jupyterhub_gpu_dev/binaries.py build $(BINARIES_ARGS)

# `make test` builds what real nodes add too (`gpuhub dev --z2jh`, the ship tier): kubelet, kube-proxy, containerd 2
# with its runc shim and ctr, CoreDNS, the pod sandbox and the simulated GPU device plugin
# (devcluster/jupyterhub_gpu_dev/go/); the CNI plugins, iptables and runc come from Debian.
node-deps:
	@command -v iptables >/dev/null && command -v nsenter >/dev/null && [ -x /usr/lib/cni/bridge ] && command -v runc >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins iptables util-linux runc; }

# The images (images/*/Dockerfile, unchanged but for their bases) built here with Debian's buildah; where no
# registry base can be pulled, stand-in bases from Debian packages (mmdebstrap) and, for the hub, the z2jh hub
# image's pins (images/README.md). Cached by their inputs in ~/.cache/jupyterhub-gpu/images: warm, seconds.
image-deps:
	@command -v buildah >/dev/null && command -v podman >/dev/null && command -v mmdebstrap >/dev/null && command -v runc >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah podman mmdebstrap runc; }
images: image-deps
	Z2JH="$(Z2JH)" python3 devcluster/jupyterhub_gpu_dev/images.py build

# The test matrix's second JupyterHub: the pins of the zero-to-jupyterhub 4.4.0 hub image (JupyterHub 5.5.0,
# KubeSpawner 7.0.0, ...; its requirements.txt in the z2jh folder beside the checkout) with this package on
# top, as images/hub/Dockerfile installs it (which upgrades jupyterhub-idle-culler to the 2.x the GPU culler
# is built on). tests/ship run the chart's hub config under both. Without the z2jh folder: skipped.
Z2JH ?= $(dir $(CURDIR))shared/z2jh
JH55_VENV := .venv-jh55
$(JH55_VENV)/.installed: setup.cfg pyproject.toml devcluster/pyproject.toml
	@if [ -f "$(Z2JH)/images/hub/requirements.txt" ]; then \
	  python3 -m venv $(JH55_VENV) && \
	  grep -v -e '^jupyterhub-idle-culler==' -e '^ *#' "$(Z2JH)/images/hub/requirements.txt" > $(JH55_VENV)/constraints.txt && \
	  $(JH55_VENV)/bin/pip install -q --upgrade pip && \
	  $(JH55_VENV)/bin/pip install -q -c $(JH55_VENV)/constraints.txt -e '.[test]' && \
	  $(JH55_VENV)/bin/pip install -q --no-deps -e ./devcluster && touch $@; \
	else echo "matrix-venv: no z2jh hub image pins at $(Z2JH) (set Z2JH=...): the JupyterHub 5.5 tests skip"; fi
matrix-venv: $(JH55_VENV)/.installed

# The whole suite: unit tests and the tiers that run against the real dev cluster; then the test matrix's
# JupyterHub 5.5 run of the tiers docs/compatibility.md names (tests/ship's chart config runs under both within
# the first run already). The images are built first (`make images`: seconds when cached), for the ship tier.
JH55_TIERS := tests/unit tests/e2e/test_hub.py
test: BINARIES_ARGS := --with-nodes
test: plan
	$(MAKE) --no-print-directory -j2 test-binaries test-installs
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
	@if [ -f $(JH55_VENV)/.installed ]; then echo "== the same tiers on JupyterHub 5.5 (the z2jh 4.4.0 hub's pins) =="; \
	  $(JH55_VENV)/bin/python -m pytest -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadfile $(JH55_TIERS) $(PYTEST_ARGS); fi

# A cold `make test` spends most of its time compiling Go, on every core, while the installs and the image
# builds mostly wait on the registries and the disk: so the two run side by side (`-j2` above), the Go build
# with the system python3 (binaries.py is standard library only) and the rest one after another (apt-get
# allows one at a time). Warm, both are seconds.
test-binaries:
	GPUHUB_BUILD_PLAN_SAID=1 python3 devcluster/jupyterhub_gpu_dev/binaries.py build --with-nodes
test-installs:
	$(MAKE) --no-print-directory -j1 lint install node-deps test-deps matrix-venv images

# The pure tier, wherever its tests live: no cluster, no hub or Prometheus process, no kernel, no browser
# (tiers are pytest markers; tests/conftest.py sets them from the fixtures a test uses).
UNIT_TIER := not (cluster or services or kernel or browser or ship)
unit: install
	$(PY) -m pytest -m "$(UNIT_TIER)" $(PYTEST_ARGS)

# ruff (pyproject.toml): pyflakes, pycodestyle and import order over the whole tree, in seconds; first in `make test`.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

# As `make test`: the Go build (system python3) beside the installs the dev hub needs, then the hub.
dev: plan
	$(MAKE) --no-print-directory -j2 dev-binaries install
	$(VENV)/bin/gpuhub dev
dev-binaries:
	GPUHUB_BUILD_PLAN_SAID=1 python3 devcluster/jupyterhub_gpu_dev/binaries.py build

# Every benchmark with its defaults, one after another (each starts and stops what it needs); figures
# go to bench/results/ and, by hand with the command, to docs/benchmarks.md. Tens of minutes on 2 cores.
bench: binaries test-deps
	$(PY) bench/picker_render.py --churn --sizes 1000/20000,5000/100000
	$(PY) bench/cluster_nodes.py
	$(PY) bench/spawn_bound.py
	$(PY) bench/jobs_submit.py
	$(PY) bench/jobs_scale.py --jobs 500,10000
	$(PY) bench/cull_cycle.py --page-size 200 --out bench/results/cull_cycle.json
	$(PY) bench/cull_cycle.py --page-size 200 --gpu-policy --out bench/results/cull_cycle_gpu.json
	$(PY) bench/cull_cycle.py --servers 5000 --culls 100 --page-size 200 --out bench/results/cull_cycle_5000.json
	$(PY) bench/day_replay.py --speed 120
