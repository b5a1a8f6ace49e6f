#!/usr/bin/env bash
# Installs what fabflow needs from Debian packages (when missing) and builds the release tree.
# The experiment plots use Debian's python3-matplotlib (/usr/bin/python3); the Python package's
# tests and examples python3-venv (`pip install ./python` into a venv), python3-pytest and
# python3-numpy. libpmix-dev and libpmi2-0-dev let ranks started by mpirun or srun bootstrap
# with no FABFLOW_* variable; Open MPI's mpirun and a one-node Slurm (scripts/slurm-local.sh)
# are there for the tests that check it.
#   scripts/setup.sh            install + release build into build/ (CLI and libraries)
#   scripts/setup.sh --deps     install only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build pkg-config libfabric-dev libfabric-bin
          libgtest-dev libcli11-dev nlohmann-json3-dev libssl-dev iproute2 valgrind
          python3 python3-matplotlib clang-format dpkg-dev file memcached libmemcached-dev
          libxxhash-dev clang pybind11-dev python3-dev python3-venv python3-pytest python3-numpy
          libpmix-dev libpmi2-0-dev openmpi-bin slurm-wlm munge iptables)
missing=()
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
ver=$(pkg-config --modversion libfabric)
if ! printf '1.17\n%s\n' "$ver" | sort -V -C; then
  echo "setup: libfabric $ver is older than 1.17" >&2; exit 1
fi
[ "${1:-}" = "--deps" ] && exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
# The CLI and both libraries: what `cmake --install build` and `cpack` take (docs/install.md).
ninja -C build fabflow_installable
echo "setup: built build/fabflow and the libraries (cmake --install build --prefix PREFIX installs them)"
