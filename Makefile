# The two commands a new user needs:
#   make test    install what is missing, configure, build, run every test
#   make drill   the main job: replay the origin's incident on embedded SQLite
PRESET ?= debug

.PHONY: all deps configure build test bench drill drill-pg drill-pg-ha fuzz docs format clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET)

test: build
	@scripts/run-tests.sh $(PRESET)

# The main job: replay the origin's incident on embedded SQLite, every strategy side by side.
# Builds only the command-line tool, optimized. Reports land in drill-out/.
drill: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target holdfast
	@build/release/apps/holdfast/holdfast drill --out drill-out $(DRILL_ARGS)

# The scale-out drill: a throwaway PostgreSQL primary + hot standby (and a PgBouncer), each
# strategy as 3 panel processes, fifteen real faults (silence too: hang, blackhole,
# standby-hang, pooler-pause; a slow standby: standby-slow; failover last); about 5 minutes. Reports land in drill-pg-out/; the cluster
# is removed afterwards. DRILL_ARGS="--faults hang,blackhole" runs a few.
drill-pg: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target holdfast
	@build/release/apps/holdfast/holdfast drill --engine postgres --out drill-pg-out $(DRILL_ARGS)

# The HA drill: one etcd and three PostgreSQL nodes under Patroni (Debian's patroni 3.0.2,
# etcd 3.4), holdfast's panels on the nodes' multi-host URL, five faults (patroni-kill,
# patroni-freeze, patroni-switchover, dcs-down, dcs-down-failsafe); about 3 minutes.
# PATRONI_DCS=etcd runs Patroni's etcd v2 client instead of v3 (docs/scale-out.md, "Patroni").
# Reports land in drill-pg-ha-out/; the cluster is removed afterwards.
PATRONI_DCS ?= etcd3
drill-pg-ha: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release --target holdfast
	@build/release/apps/holdfast/holdfast drill --engine postgres --ha patroni \
	  --patroni-dcs $(PATRONI_DCS) --out drill-pg-ha-out $(DRILL_ARGS)

# Benchmarks always build optimized; each prints bare and holdfast side by side. Then the
# panel's schedule page beside nginx serving the same bytes (wrk; scripts/bench-http.sh).
bench: deps
	@HOLDFAST_EXTRA_PACKAGES="wrk nginx-light" scripts/install-deps.sh
	@cmake --preset release >/dev/null
	@cmake --build --preset release
	@for b in build/release/bench/bench_*; do echo "== $$b"; $$b --benchmark_min_time=0.2; done
	@echo "== scripts/bench-http.sh"; scripts/bench-http.sh build/release/apps/holdfast/holdfast
	@echo "== ENGINE=postgres scripts/bench-http.sh"; ENGINE=postgres scripts/bench-http.sh build/release/apps/holdfast/holdfast

# Fuzzing with libFuzzer (clang): each target for FUZZ_SECONDS, new inputs kept in
# build/fuzz/corpus/<name> (copy the interesting ones to fuzz/corpus/<name>).
FUZZ_SECONDS ?= 30
FUZZ_TARGETS = pg_sql sqlite_judge redact_url http_request http_body panel_form console_line
fuzz: deps
	@HOLDFAST_EXTRA_PACKAGES="clang libclang-rt-14-dev" scripts/install-deps.sh
	@cmake --preset fuzz >/dev/null
	@cmake --build --preset fuzz --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do mkdir -p build/fuzz/corpus/$$t; \
	  echo "== fuzz_$$t ($(FUZZ_SECONDS) s)"; \
	  build/fuzz/fuzz/fuzz_$$t -artifact_prefix=build/fuzz/ -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    build/fuzz/corpus/$$t fuzz/corpus/$$t > build/fuzz/$$t.log 2>&1; rc=$$?; \
	  tail -n 6 build/fuzz/$$t.log; [ $$rc -eq 0 ] || exit $$rc; done

# The API reference with the README and docs/ as its pages (Doxygen, installed if missing):
# build/docs/html/index.html. Any Doxygen warning (an undocumented public name, a broken
# comment or link) fails it.
docs: deps
	@HOLDFAST_EXTRA_PACKAGES="doxygen" scripts/install-deps.sh
	@mkdir -p build/docs
	@doxygen docs/Doxyfile
	@echo "docs: build/docs/html/index.html"

format:
	@git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	@rm -rf build
