#!/usr/bin/env bash
# The test command: installs dependencies, then builds and runs every test in three trees:
# release, ASan+UBSan, and TSan (the concurrent parts: bootstrap, launcher, progress engine).
set -euo pipefail
cd "$(dirname "$0")/.."

# libfabric 1.17's verbs provider reads /proc/kallsyms to its end, twice, in every process that
# first calls into libfabric (it looks for the kernel's peer-memory and dma-buf symbols), with or
# without a verbs device: 5 MB of kernel symbols, 0.3 s of CPU per process on the CI machine and
# about a third of the time of the multi-process tests on tcp and shm. No test uses either
# feature, so where the command runs as root it re-runs itself in a private mount namespace in
# which /proc/kallsyms reads as empty; the builds, the product and the machine are untouched.
# FABFLOW_TEST_KALLSYMS=keep runs without it (docs/install.md, "Start-up time").
if [ -z "${FABFLOW_TEST_NAMESPACE:-}" ] && [ "${FABFLOW_TEST_KALLSYMS:-mask}" = mask ] &&
  [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
  unshare -m --propagation private mount --bind /dev/null /proc/kallsyms 2>/dev/null; then
  echo "test.sh: /proc/kallsyms masked for the tests (a private mount namespace)"
  export FABFLOW_TEST_NAMESPACE=1
  exec unshare -m --propagation private \
    sh -c 'mount --bind /dev/null /proc/kallsyms && exec "$@"' sh bash "$PWD/scripts/test.sh" "$@"
fi

scripts/setup.sh --deps

# The layout of every C++ file, before anything builds (fails fast).
scripts/check_format.sh

jobs=$(nproc)
# Each stage's heading carries the minutes and seconds since the command started (bash's
# SECONDS), so a slow run shows where its time went.
stage() { printf '== %s  [%dm%02ds]\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }
build_tree() {  # name, cmake args...   (TARGETS: what to build)
  local dir=$1; shift
  stage "$dir: build"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  # shellcheck disable=SC2086
  ninja -C "$dir" -j "$jobs" ${TARGETS:-fabflow_tests fabflow_cli}
}
run_tree() {  # name, cmake args..., -- ctest args...   (TARGETS: what to build)
  local dir=$1; shift
  local cmake_args=()
  while (($#)) && [ "$1" != "--" ]; do cmake_args+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  build_tree "$dir" "${cmake_args[@]}"
  stage "$dir: test"
  (cd "$dir" && ctest --output-on-failure -j 2 "$@")
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

# fabflow as a user gets it, from the tree scripts/setup.sh leaves (the CLI and the libraries,
# nothing else built yet): installed into a temporary prefix, every header compiled alone, the
# examples built against it (find_package and pkg-config) and run, the Debian package built and
# inspected: every command of docs/install.md.
stage "setup.sh's tree: install, examples, package"
scripts/setup.sh
scripts/check_install.sh build

# The flow conformance streams (10^5 items per design point and transport), the active
# consumer streams and the separate-notify-endpoint streams (3000 items per point) run one at a
# time: each is two or three busy-polling threads, and two of them at once on a 2-core machine
# take ten times as long as both in turn. The CleanCli tests run there too: each leaves the
# /dev/shm regions of two killed ranks and checks them before removing them, and any shm start
# or `fabflow clean` running beside it sweeps them first (CI lost that race once).
# So do the KilledPeerByHand trials: two busy-polling ranks each, timed against their bound.
# So do NodeChurn (a server and 50 client processes, departures timed against their bound) and
# the TCP rto_min test: the kernel's retransmission timer follows the RTT's jitter, and beside
# other busy tests that jitter alone lifts it past the bound the test holds the floor to.
serial='NodeChurn\.|LatRtoMinCli.TheSetFloorBounds|FlowConformance.(FifoExactly|ActiveConsumer)|FlowSeparateNotify.FifoExactly|CleanCli\.|KilledPeerByHand|KilledShmProducerCli'
# The 10^7-item flow streams (FlowStress) skip themselves unless FABFLOW_FLOW_STRESS is set
# (scripts/stress.sh): the test command does not start their 132 processes only to skip.
stress='FlowStress\.'
# The release tree also builds the measurement aids that docs/measurements/ cites (scripts/perf/).
# With pybind11 there (setup.sh installs it) it builds the Python module too (build/python).
TARGETS="fabflow_tests fabflow_cli fabflow_perf_aids fabflow_python" \
  run_tree build -DCMAKE_BUILD_TYPE=Release -- -E "$serial|$stress"
stage "build: flow conformance streams, one at a time"
(cd build && ctest --output-on-failure -j 1 -R "$serial")
# A slice of the fault campaign (scripts/chaos.sh 10m by hand): bench runs whose ranks are
# paused, stopped or killed at random moments must complete verified or fail within their
# timeout in one line, leaving no process or shared-memory region behind.
stage "chaos: a 60 s slice of the fault campaign"
scripts/chaos.sh 60s
# The Python tests under pytest, in a virtual environment of Debian's python3 (its
# python3-matplotlib, python3-numpy and python3-pytest seen through --system-site-packages):
# the fabflow package installed there by `pip install ./python` (scikit-build-core and pybind11
# from PyPI), linked with the release tree's library through an install prefix so that the
# library is not compiled twice (FABFLOW_PREFIX, python/CMakeLists.txt); the tests import the
# installed package (FABFLOW_PYTHON_INSTALLED) and the plotting module's tests run beside them.
# On the 2-core VM under load: pip install 3 s with ccache warm, 88 s cold; pytest 40 s.
# Then every runnable experiment of the catalogue in quick mode on local: each must write its
# JSONL, PNG, SVG and page, and `fabflow report` the index of them all. Every bench family's CLI tests run
# it on shm and tcp as well; the whole catalogue on shm (2-3 minutes more) is left out of the
# CI budget: `build/fabflow experiment run all --quick -p shm -o DIR` runs it by hand.
stage "python: pip install ./python into a venv, then fabflow_plot's and the package's tests"
rm -rf build/python-prefix build/python-venv
cmake --install build --prefix build/python-prefix >/dev/null
/usr/bin/python3 -m venv --system-site-packages build/python-venv
build/python-venv/bin/pip install -q scikit-build-core pybind11
pip_flags=(--config-settings=cmake.define.FABFLOW_PREFIX="$PWD/build/python-prefix")
if command -v ccache >/dev/null; then
  pip_flags+=(--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
pip_start=$SECONDS
build/python-venv/bin/pip install -q --no-build-isolation ./python "${pip_flags[@]}"
echo "pip install ./python: $((SECONDS - pip_start)) s"
FABFLOW_PYTHON_INSTALLED=1 FABFLOW_CLI=$PWD/build/fabflow build/python-venv/bin/python -m pytest \
  -q -p no:cacheprovider python/tests
stage "experiments, quick, on local"
out=build/experiments-quick-local
rm -rf "$out"
FABFLOW_PYTHON=/usr/bin/python3 build/fabflow experiment run all --quick -p local -o "$out"
FABFLOW_PYTHON=/usr/bin/python3 build/fabflow report "$out"
build/fabflow experiment list --json | /usr/bin/python3 scripts/check_experiments.py "$out"
# fabflow.results.load (the installed package) reads every experiment's JSON lines, and bench
# xfer's rows, the one family the catalogue does not run.
build/fabflow bench xfer -p local -S 64K --bytes 1M --json >build/xfer-rows.jsonl
build/python-venv/bin/python scripts/check_results_load.py "$out" build/xfer-rows.jsonl
# Under the sanitizers every flow design point and request-response combination still runs,
# with fewer items / requests each.
export FABFLOW_FLOW_ITEMS=300 FABFLOW_FLOW_PRESET_ITEMS=60 FABFLOW_RR_REQUESTS=60
# The sanitizer trees build the library at -O1 with line tables (-g1): ASan's own advice,
# and about 2.4x faster to compile than -O2 -g, which is most of a sanitizer tree's time (the
# ASan tree builds the flow design-point instantiations at -O0: CMakeLists.txt says why).
sanitized=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
# The numeric-flag table (every flag's range, one CLI process per value) checks parsing only:
# the release tree runs it. Of the tests that run the CLI as a process, the sanitizer tree runs
# those that feed it hostile or failing input (bad flags and files, malformed or misbehaving
# peers, peers that die, limits too small); the release tree runs them all. Everything else
# (the library's tests) runs under ASan in full.
# Under ASan the flow designs run every check on local (fabflow's own transport: both ends'
# loads and stores are in view) and their FIFO stream on tcp_rdm, shm_rdm and tcp_msg
# (libfabric's paths); the separate-notify stream runs on local and tcp_rdm, the
# one-notification stream and the no-allocation check on local only (fabflow's code paths are
# the same on every transport); the bulk protocols run on local, tcp_rdm and tcp_msg; the
# close-after-closed points on local (the push2-on-tcp stream not at all).
# The release tree runs everything on all four.
hostile='Cli.*(BadInput|Bad|PeerDeath|Death|Secret|Memlock|Userfaultfd)|CliPeerDeath|CliBadInput|CliDeath|SecretFileCli|Misbehaving'
asan_fewer='FlowConformance\.(FullEmptyAndEndOfStream|ActiveConsumer|BatchingAndDataMover|BatchedCalls)/.*_(shm_rdm|tcp_msg|tcp_rdm)$|FlowSeparateNotify\.FifoExactlyOnceWithContents/.*_(shm_rdm|tcp_msg)$|FlowOneNotificationInFlightAll\..*_shm_rdm$|FlowNoAlloc\..*_shm_rdm$|BulkProtocol\..*/shm_rdm_|FlowCloseAfterClosed\..*_(shm_rdm|tcp_msg|tcp_rdm)$|FlowRxDepth\.Push2OnTcp'
# Under ASan a process costs about 0.14 s before its first test and after its last (start-up,
# and LeakSanitizer's scan of the binary's globals): the tree's tests run grouped by suite, up to
# 40 per process (scripts/run_grouped.py; a failing group is rerun a test per process), which
# took the stage from 3m35 to 2m03 on a 2-core Xeon VM.
TARGETS="fabflow_tests fabflow_cli" build_tree build-asan "${sanitized[@]}" -DFABFLOW_SANITIZE=address
stage "build-asan: test"
/usr/bin/python3 scripts/run_grouped.py build-asan/fabflow_tests --jobs 2 \
  -E "^NumericFlags\.|Cli|Misbehaving|$stress|$asan_fewer"
stage "build-asan: the CLI's hostile-input tests"
/usr/bin/python3 scripts/run_grouped.py build-asan/fabflow_tests --jobs 2 -R "$hostile" \
  -E '^NumericFlags\.'

# TSan covers the concurrent parts; the CLI death tests' time bounds are for unsanitized builds.
# Request-response: the dispatcher's hand-over between worker and dispatcher threads (on shm,
# whose data lands inside libfabric, outside TSan's view). Flow queues: every design point on
# local, where both ends' loads and stores (and the data-mover thread) are fabflow's own.
# Request-response on local with SEND frames: frames read in place in the ring while the other
# end writes the next ones.
# Sequencer: the server's worker threads sharing one counter, every design on local.
# Registration cache: its userfaultfd monitor thread against the threads that map and unmap.
# Its filter runs no test of the CLI: the tree builds neither the CLI nor those tests.
# Grouped as under ASan: a TSan process costs about 0.1 s to start.
TARGETS=fabflow_tests build_tree build-tsan "${sanitized[@]}" -DFABFLOW_SANITIZE=thread \
  -DFABFLOW_CLI_TESTS=OFF
stage "build-tsan: test"
/usr/bin/python3 scripts/run_grouped.py build-tsan/fabflow_tests --jobs 2 \
  -R 'Bootstrap|Launcher|Progress|RegCache|LocalTransport|LocalConcurrent|SeqConformance.*local|RrConformance.*dispatcher_.*_shm|RrConformance.*Send.*_private_.*_local|RrInPlace|FlowConformance.*local_rdm|FlowProbedBatches.*local_rdm|FlowSeparateNotify.*local_rdm'
stage "fuzz targets (clang, ASan + UBSan), ${FABFLOW_FUZZ_SECONDS:-3} s each"
scripts/fuzz.sh all "${FABFLOW_FUZZ_SECONDS:-3}"
stage "all test trees passed"
