# The two entry points a newcomer needs: `make demo` (the demo experiment on the
# built-in local cluster) and `make test` (the whole test suite). Both create the
# environment and build (or reuse) the cluster binaries on their first run.
PY ?= python3
VENV := .venv
PYTHON := $(VENV)/bin/python
# Katib's Python SDK (kubeflow-katib, protobuf<5) beside the project's environment (protobuf 7): requirements-katib.txt
KATIB_VENV := .venv-katib

# Debian packages of the real node (devcluster/realnode.py) and of its images (devcluster/images.py), and the
# browser the dashboard's browser test drives (chromium: tests/unit/test_dashboard_browser.py, through Playwright).
NODE_PACKAGES := runc containernetworking-plugins conntrack iptables iproute2 buildah mmdebstrap gcc libc6-dev chromium

.PHONY: venv katib-sdk binaries host-packages node test unit demo docs clean

venv: $(VENV)/.installed $(VENV)/.checkout-path

$(VENV)/.installed: requirements-dev.txt trainable-runtime/pyproject.toml operator/pyproject.toml
	$(PY) -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -r requirements-dev.txt
	$(PYTHON) -m pip install -q --no-deps -e trainable-runtime -e operator
	touch $@

# The checkout on the venv's import path (a .pth file): `python -m devcluster` and the examples
# import from any directory.
$(VENV)/.checkout-path: $(VENV)/.installed
	$(PYTHON) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_path("purelib"), "kubetune-checkout.pth").write_text("$(CURDIR)\n")'
	touch $@

katib-sdk: $(KATIB_VENV)/.installed

$(KATIB_VENV)/.installed: requirements-katib.txt
	$(PY) -m venv $(KATIB_VENV)
	$(KATIB_VENV)/bin/python -m pip install -q --upgrade pip
	$(KATIB_VENV)/bin/python -m pip install -q -r requirements-katib.txt
	touch $@

binaries: venv
	$(PYTHON) -m devcluster build

# Installs the real node's Debian packages that are missing (as root; otherwise says which to install).
host-packages:
	@missing=$$(for p in $(NODE_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; \
		else echo "the real node needs these Debian packages (install them as root): $$missing" >&2; exit 1; fi; \
	fi

# The real node's binaries and the images it runs (kubelet, containerd, CoreDNS; Dockerfile targets), and Kueue
# (for tests/integration/test_kueue.py).
# Both at once: Go compiles while buildah mostly waits on the package index (images take pause last).
node: binaries host-packages
	$(PYTHON) -m devcluster build --node --kueue & build=$$!; \
	$(PYTHON) -m devcluster images; images=$$?; wait $$build && exit $$images

# Two runs, one cluster each: the process-kubelet suite, then the real node's (pytest -m realnode).
test: node katib-sdk
	$(PYTHON) -m pytest -m "not realnode"
	$(PYTHON) -m pytest -m realnode

unit: venv katib-sdk
	$(PYTHON) -m pytest tests/unit

demo: binaries
	$(PYTHON) -m examples.digits.demo

# After a CRD change: the chart's copies of the CRDs (tests/unit/test_helm_chart.py fails while they differ) and
# docs/api-reference.md from them (tests/unit/test_docs.py fails while it is stale)
docs: venv
	cp crds/*.yaml helm/kubetune/crds/
	cp crds/kubeflow.org/*.yaml helm/kubetune/files/katib/
	$(PYTHON) docs/api_reference.py

clean:
	rm -rf $(VENV) $(KATIB_VENV) .pytest_cache
