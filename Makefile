# linectl — the two commands a newcomer needs are `make run` and `make test`.
# Both create .venv and install the project on first use; nothing else is needed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test bench soak ha-drill lint install clean vendor test-tools

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "linectl needs Python 3.11 or newer")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# uv installs the same pinned set as pip, about 8 s against pip's 45 s on a new
	@# machine (uv fetches in parallel); pip is the fallback where uv cannot (no wheel
	@# for the platform, or an index only pip's own configuration names).
	$(BIN)/python -m pip install --quiet uv \
	  && $(BIN)/python -m uv pip install --quiet --python $(BIN)/python --compile-bytecode -e ".[test]" \
	  || { $(BIN)/python -m pip install --quiet --upgrade pip && $(BIN)/python -m pip install --quiet -e ".[test]"; }
	@# An editable install does not ship the .pth that registers pgsql:// (a wheel does).
	cp linectl-pgsql.pth "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
	@touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/linectl up

# The suite in parallel shards (tests/run_suite.py says why and how); a single
# test: $(BIN)/python -m pytest tests/…::name
# compileall first: the suite starts a few hundred Python processes (gateways, stacks,
# simulators), and where PYTHONDONTWRITEBYTECODE is set each would compile the
# project's modules again (0.1 CPU-s a start); tests too: its support modules run
# in processes of their own (simulators, PLCs, gateway zygotes).
test: $(STAMP)
	$(BIN)/python -m compileall -q -x node_modules services shared gateway migrations tests
	$(BIN)/python -m tests.run_suite $(PYTEST_ARGS)

bench: $(STAMP)
	@set -e; for script in tests/bench/bench_*.py; do \
	  [ -e "$$script" ] || { echo "no benchmarks yet"; break; }; \
	  echo "== $$script"; $(BIN)/python "$$script"; \
	done

# ≥ 20 random kills (line_controller, hardware, PostgreSQL) during a running order;
# not part of `make test` nor `make bench`. SOAK_ARGS="--kills 40 --seed 7" to vary;
# SOAK_ARGS=--plant: a plant of three lines, one of them hit (tests/bench/soak_plant.py).
soak: $(STAMP)
	$(BIN)/python tests/bench/soak_crash.py $(SOAK_ARGS)

# The failover drill: etcd and two Patroni nodes (Debian's etcd-server, patroni,
# postgresql-15) in a temporary directory, linectl on both, a failover mid-order
# and one back; not part of `make test` (docs/operations.md, "Database failover").
ha-drill: $(STAMP)
	$(BIN)/python tests/bench/ha_drill.py $(DRILL_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check services shared gateway tests migrations

# The page's third-party browser code (Chart.js), from the exact versions in
# gateway/static/package-lock.json, copied into gateway/static/vendor/ (committed
# and shipped in the wheel: the plant network has no internet, the page no CDN).
# Only needed to change a version; node_modules/ is removed afterwards.
STATIC := gateway/static
vendor:
	cd $(STATIC) && npm ci --no-audit --no-fund
	mkdir -p $(STATIC)/vendor
	@# The source map is not shipped: drop the comment that would ask for it.
	sed '/^\/\/# sourceMappingURL=/d' $(STATIC)/node_modules/chart.js/dist/chart.umd.min.js > $(STATIC)/vendor/chart.umd.min.js
	cp $(STATIC)/node_modules/chart.js/LICENSE.md $(STATIC)/vendor/chart.js-LICENSE.md
	@# Chart.js's UMD build bundles @kurkle/color: its licence ships too.
	cp $(STATIC)/node_modules/@kurkle/color/LICENSE.md $(STATIC)/vendor/kurkle-color-LICENSE.md
	rm -rf $(STATIC)/node_modules

# What only the tests use from npm (axe-core for the page's accessibility test),
# exactly as tests/gateway/test-tools/package-lock.json pins it; .ci/run does this.
test-tools:
	cd tests/gateway/test-tools && npm ci --no-audit --no-fund
	cd tests/opcua-tools && npm ci --no-audit --no-fund

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
