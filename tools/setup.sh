#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the tools need.
# Idempotent: does nothing when all are present. Needs root (or sudo) for apt-get.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev
  libhdf5-dev zlib1g-dev libhnswlib-dev catch2 libopenblas-openmp-dev libomp-dev
  python3 python3-numpy python3-h5py python3-matplotlib
  wordnet-base python3-scipy python3-sklearn python3-venv
  dict-gcide  # tools/build_gcide.py's source (it pulls in dictd, which the builder does not use)
  clang libclang-rt-14-dev   # libFuzzer for tools/fuzz.sh (tests/fuzz)
  openmpi-bin libopenmpi-dev  # the multi-process path (mpirun; CMake XMC_MPI)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
