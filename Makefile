# The two commands a new user needs:
#   make test    install what is missing, configure, build, run every test
#   make drill   the main job: replay the origin's incident on embedded SQLite
PRESET ?= debug

.PHONY: all deps configure build test bench drill format clean

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

# Benchmarks always build optimized; each prints bare and holdfast side by side.
bench: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release
	@for b in build/release/bench/bench_*; do echo "== $$b"; $$b --benchmark_min_time=0.2; done

format:
	@git ls-files '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	@rm -rf build
