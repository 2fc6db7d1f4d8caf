# mqgate: the two commands of the README (S0.3) and their helpers.
#
#   make run     install into .venv and run the broker in the foreground
#   make test    install with the test extra and run the whole suite
#   make bench   run the throughput benchmarks (not part of `make test`)
#   make bench BROKER=rabbitmq,activemq   (or all) compare mqgate with other brokers
#   make fuzz    run the fuzz targets, a million inputs each (not part of `make test`)
#
# Everything goes into .venv; nothing is installed into the system Python.

VENV   ?= .venv
PYTHON ?= python3
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip

# Install in editable mode, *compat* flavour, and not a regular install or the
# default (strict/lenient) editable mode. Why:
# twistd finds `mqgate` through twisted.plugins.__path__, which Twisted extends
# with <entry>/twisted/plugins for every *sys.path entry*.
#  - The default PEP 660 editable install of this flat layout maps the packages
#    with an import-hook finder and adds no sys.path entry, so the checkout's
#    twisted/plugins is never searched: `twistd --help` does not list mqgate.
#  - editable_mode=compat writes a .pth that puts the checkout root on
#    sys.path, so twisted/plugins/mqgate_plugin.py is found from any directory,
#    and the code that runs is the code in the checkout (no stale copy after an
#    edit, unlike a regular install, which copies the plugin and the package
#    into site-packages and also works, but only until the next edit).
EDITABLE_MODE = --config-settings editable_mode=compat

# Stamps: reinstall only when the packaging files change.
INSTALL_STAMP = $(VENV)/.mqgate-install
TEST_STAMP    = $(VENV)/.mqgate-install-test
PACKAGING     = setup.cfg pyproject.toml

.PHONY: venv install install-test postgres-server ldap-server proxy-server browser run test bench node-bench node-mqlight peer-brokers fuzz clean

venv: $(PY)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

install: $(INSTALL_STAMP)

$(INSTALL_STAMP): $(PY) $(PACKAGING)
	$(PIP) install $(EDITABLE_MODE) -e .
	touch $@

# The e2e tests' HTTP proxy and the MQ Light Node client come with the test install
# (proxy-server and node-mqlight, below).
install-test: $(TEST_STAMP) proxy-server node-mqlight

# The test extra is a superset of the plain install, so it satisfies both stamps.
$(TEST_STAMP): $(PY) $(PACKAGING)
	$(PIP) install $(EDITABLE_MODE) -e '.[test]'
	touch $(INSTALL_STAMP) $@

# The pid file goes under var/ so that twistd never writes twistd.pid into the
# checkout root.
run: install
	mkdir -p var
	$(VENV)/bin/twistd --pidfile var/twistd.pid -n mqgate --config etc/mqgate.properties --varhome var

# S3.5: the SQL store's tests run a throw-away PostgreSQL cluster (tests/pgcluster.py)
# from Debian's server binaries, so `make test` installs them when they are missing.
# Debian's postinst would create (and, with an init system, start) a "main" cluster:
# the createcluster.d drop-in stops it from creating one, and any cluster that is
# online after the install is stopped again. Under make test a missing PostgreSQL
# fails its tests (MQGATE_REQUIRE_POSTGRES=1) rather than skipping them; a machine
# without root can run `make test MQGATE_REQUIRE_POSTGRES=0` to skip them instead.
MQGATE_REQUIRE_POSTGRES ?= 1

postgres-server:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null; then \
	  exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing the PostgreSQL server (Debian package postgresql) for the SQL store tests"; \
	  mkdir -p /etc/postgresql-common/createcluster.d && \
	  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/mqgate-tests.conf && \
	  apt-get update && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql && \
	  { pg_lsclusters -h 2>/dev/null | awk '$$4 == "online" {print $$1, $$2}' | \
	    while read version name; do pg_ctlcluster "$$version" "$$name" stop; done; true; }; \
	else \
	  echo "*** PostgreSQL server binaries are missing and cannot be installed here" \
	       "(needs root and apt-get): the PostgreSQL tests will fail." >&2; \
	  echo "*** Install the postgresql package, or run" \
	       "make test MQGATE_REQUIRE_POSTGRES=0 to skip them." >&2; \
	fi

# S4.4: the LDAP repository's tests run a throw-away slapd (tests/ldapserver.py) from
# Debian's slapd package, so `make test` installs it when it is missing (the tests load
# their entries with ldap3, so ldap-utils is not needed). The package's postinst
# configures (and, with an init system, starts) a system slapd on port 389: it is
# stopped and kept from starting at boot; the tests never use it. Under make test a
# missing slapd fails its tests (MQGATE_REQUIRE_SLAPD=1); a machine without root can
# run `make test MQGATE_REQUIRE_SLAPD=0` to skip them instead.
MQGATE_REQUIRE_SLAPD ?= 1

ldap-server:
	@if command -v slapd >/dev/null || [ -x /usr/sbin/slapd ]; then \
	  exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing the LDAP server (Debian package slapd) for the LDAP repository tests"; \
	  apt-get update && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slapd && \
	  { if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then \
	      systemctl disable --now slapd; \
	    else \
	      service slapd stop 2>/dev/null; \
	    fi; true; }; \
	else \
	  echo "*** slapd is missing and cannot be installed here (needs root and apt-get):" \
	       "the LDAP repository tests will fail." >&2; \
	  echo "*** Install the slapd package, or run" \
	       "make test MQGATE_REQUIRE_SLAPD=0 to skip them." >&2; \
	fi

# S10.3: the HTTP tunnel's e2e tests run a throw-away HTTP proxy (tests/e2e/proxy.py)
# from Debian's tinyproxy package, so `make test` installs it when it is missing. Its
# postinst would start a system tinyproxy on port 8888 where an init system runs: it is
# stopped and kept from starting at boot; the tests never use it. Under make test a
# missing tinyproxy fails its tests (MQGATE_REQUIRE_TINYPROXY=1); a machine without
# root can run `make test MQGATE_REQUIRE_TINYPROXY=0` to skip them instead.
MQGATE_REQUIRE_TINYPROXY ?= 1

proxy-server:
	@if command -v tinyproxy >/dev/null || [ -x /usr/bin/tinyproxy ]; then \
	  exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing the HTTP proxy (Debian package tinyproxy) for the HTTP tunnel tests"; \
	  apt-get update && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tinyproxy && \
	  { if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then \
	      systemctl disable --now tinyproxy; \
	    else \
	      service tinyproxy stop 2>/dev/null; \
	    fi; true; }; \
	else \
	  echo "*** tinyproxy is missing and cannot be installed here (needs root and apt-get):" \
	       "the HTTP tunnel proxy tests will fail." >&2; \
	  echo "*** Install the tinyproxy package, or run" \
	       "make test MQGATE_REQUIRE_TINYPROXY=0 to skip them." >&2; \
	fi

# Issue 16: the web console's tests (tests/e2e/test_console.py) drive a headless
# Chromium with Playwright, which cannot download its own browser here: they use
# Debian's chromium package, so `make test` installs it when it is missing. Under make
# test a missing chromium fails those tests (MQGATE_REQUIRE_CHROMIUM=1); a machine
# without root can run `make test MQGATE_REQUIRE_CHROMIUM=0` to skip them instead.
MQGATE_REQUIRE_CHROMIUM ?= 1

browser:
	@if command -v chromium >/dev/null || [ -x /usr/bin/chromium ]; then \
	  exit 0; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing the browser (Debian package chromium) for the web console tests"; \
	  apt-get update && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; \
	else \
	  echo "*** Chromium is missing and cannot be installed here" \
	       "(needs root and apt-get): the web console tests will fail." >&2; \
	  echo "*** Install the chromium package, or run" \
	       "make test MQGATE_REQUIRE_CHROMIUM=0 to skip them." >&2; \
	fi

test: install-test postgres-server ldap-server node-bench browser
	MQGATE_REQUIRE_POSTGRES=$(MQGATE_REQUIRE_POSTGRES) \
	  MQGATE_REQUIRE_CHROMIUM=$(MQGATE_REQUIRE_CHROMIUM) \
	  MQGATE_REQUIRE_SLAPD=$(MQGATE_REQUIRE_SLAPD) \
	  MQGATE_REQUIRE_TINYPROXY=$(MQGATE_REQUIRE_TINYPROXY) \
	  MQGATE_REQUIRE_NODE=$(MQGATE_REQUIRE_NODE) $(PY) -m pytest

# BENCH_ARGS go to bench/run.py, NODE_BENCH_ARGS to bench/run_node.py (e.g. a quick
# run: make bench BENCH_ARGS='--messages 20000' NODE_BENCH_ARGS='--messages 20000 --seconds 3').
# The Node generator's packages come from bench/node/package-lock.json; without node and
# npm its scenarios are skipped with a note.
#
# BROKER (rabbitmq, activemq, a comma-separated list, or all) turns make bench into a
# comparison: only the Node generator's scenarios, run against mqgate and each broker
# named, in turn on the same ports (AMQP 5672, STOMP 61613: nothing else may listen
# there), BENCH_ROUNDS times, then a table of medians and ratios (bench/README.md).
# The brokers are Debian's packages, installed by peer-brokers when missing.
BROKER       ?=
BENCH_ROUNDS ?= 3
PEER_NAMES    = $(if $(filter all,$(BROKER)),rabbitmq activemq,$(subst $(comma),$(space),$(BROKER)))
comma        := ,
empty        :=
space        := $(empty) $(empty)

bench: install-test node-bench $(if $(BROKER),peer-brokers)
ifeq ($(strip $(BROKER)),)
	$(PY) bench/run.py $(BENCH_ARGS)
	@if [ -d bench/node/node_modules ]; then \
		$(PY) bench/run_node.py $(NODE_BENCH_ARGS); \
	else \
		echo "make bench: node and npm not found, skipping the Node generator (bench/node); install Node.js 18+ and npm to run it"; \
	fi
else
	@[ -d bench/node/node_modules ] || { echo "make bench BROKER=$(BROKER): the comparison needs node and npm (Node.js 18+), which are not installed" >&2; exit 1; }
	$(PY) bench/run_node.py --broker mqgate,$(subst $(space),$(comma),$(strip $(PEER_NAMES))) \
	  --rounds $(BENCH_ROUNDS) --summary $(NODE_BENCH_ARGS)
endif

# The other brokers of a comparison, from Debian's packages: rabbitmq-server (3.10 in
# bookworm; its AMQP 1.0 and STOMP plugins ship with it) and activemq (5.17, STOMP; the
# package has no AMQP module). Only make bench BROKER=... asks for them. Their postinst
# would start a system broker on 5672/61613 where an init system runs: it is stopped
# and kept from starting at boot, since bench/run_node.py starts its own, on loopback,
# with its own configuration and data (bench/peers/).
peer-brokers:
	@for name in $(PEER_NAMES); do \
	  case $$name in \
	    rabbitmq) package=rabbitmq-server; present=/usr/lib/rabbitmq/bin/rabbitmq-server ;; \
	    activemq) package=activemq; present=/usr/share/activemq/bin/activemq.jar ;; \
	    *) echo "make bench: unknown BROKER $$name: choose rabbitmq, activemq, or all" >&2; exit 2 ;; \
	  esac; \
	  [ -e $$present ] && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $$name (Debian package $$package) for the comparison"; \
	    { apt-get update && DEBIAN_FRONTEND=noninteractive \
	        apt-get install -y --no-install-recommends $$package; } || exit 1; \
	    if command -v systemctl >/dev/null && systemctl is-system-running >/dev/null 2>&1; then \
	      systemctl disable --now $$package; \
	    else \
	      service $$package stop 2>/dev/null; \
	    fi; true; \
	  else \
	    echo "*** $$name is not installed and cannot be installed here (needs root and" \
	         "apt-get): install the Debian package $$package, or leave it out of BROKER." >&2; \
	    exit 1; \
	  fi; \
	done

# The Node load generator's packages (bench/node/package-lock.json), when node and npm
# are here: make bench runs it, and make test's smoke test runs it with tiny counts.
node-bench:
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		[ bench/node/node_modules/.package-lock.json -nt bench/node/package-lock.json ] || \
		(cd bench/node && npm ci --no-audit --no-fund --loglevel=error); \
	fi

# S8: the real MQ Light client (the mqlight npm package, pinned by
# tests/e2e/mqlight/package-lock.json) that tests/e2e/test_mqlight_client.py drives
# under node, installed with npm when node and npm are here. Under make test a missing
# node or npm fails those tests (MQGATE_REQUIRE_NODE=1) rather than skipping them; a
# machine without them can run `make test MQGATE_REQUIRE_NODE=0` to skip them instead.
MQGATE_REQUIRE_NODE ?= 1

node-mqlight:
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		[ tests/e2e/mqlight/node_modules/.package-lock.json -nt tests/e2e/mqlight/package-lock.json ] || \
		(cd tests/e2e/mqlight && npm ci --no-audit --no-fund --loglevel=error); \
	else \
		echo "*** node or npm is missing: the MQ Light client tests will fail under make test." >&2; \
		echo "*** Install Node.js 18+ and npm, or run" \
		     "make test MQGATE_REQUIRE_NODE=0 to skip them." >&2; \
	fi

# S10.4: mutated client input against the AMQP and STOMP engines, the port mapper and
# the protocol sniffer (tests/fuzz/README.md). FUZZ_RUNS inputs per target, FUZZ_TARGETS
# (comma-separated), FUZZ_JOBS worker processes, FUZZ_SEED; findings go to
# tests/fuzz/results/ and the exit status is 1 when there are any.
FUZZ_RUNS    ?= 1000000
FUZZ_TARGETS ?= amqp,stomp,portmap,sniff
FUZZ_JOBS    ?= 1
FUZZ_SEED    ?= 1

fuzz: install-test
	$(PY) -m tests.fuzz.driver --runs $(FUZZ_RUNS) --targets $(FUZZ_TARGETS) \
	  --jobs $(FUZZ_JOBS) --seed $(FUZZ_SEED)

clean:
	rm -rf $(VENV) build dist *.egg-info _trial_temp .pytest_cache .hypothesis bench/results \
	  tests/fuzz/results bench/node/node_modules tests/e2e/mqlight/node_modules
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
	find . -name dropin.cache -type f -delete
