#!/usr/bin/env bash
# The GPU kit: every GPU check in one command on a GPU machine that has no Debian packages
# (only the NVIDIA driver, CUDA 13 with cuBLAS, CMake and Python), prepared here.
#
# On the build machine (Debian, nvcc, the packages of tools/setup.sh):
#   tools/gpu_kit.sh                 build + pack + selftest (the three steps below)
#   tools/gpu_kit.sh build [DIR]     configure and build the kit's binaries in DIR (default
#                                    build-kit): CUDA for sm_90, libxmc shared, host code
#                                    for x86-64-v3 (AVX2/FMA: every H100/H200 host has it)
#   tools/gpu_kit.sh pack [DIR]      strip the binaries, gather every shared library they
#                                    load except glibc, the NVIDIA driver and the CUDA
#                                    runtime / cuBLAS, into .gpu-kit/xmc-gpu-kit.tar.xz
#                                    (git-ignored; at most 40 MiB, so that it travels with
#                                    the source tree in the device tool's 64 MiB)
#   tools/gpu_kit.sh selftest        proof without a GPU that the unpacked kit needs nothing
#                                    from the dev packages: in a chroot holding only glibc,
#                                    the CUDA runtime + cuBLAS and the kit, every binary
#                                    starts and reaches its "no GPU" exit (the test binaries'
#                                    GPU-only cases: 77), the test bodies' CPU side passes,
#                                    and a CPU training runs (needs root for unshare/chroot;
#                                    CI runs it)
# On the GPU machine, from the repository root, with .gpu-kit carried along:
#   tools/gpu_kit.sh run             unpack and run tools/gpu_check.sh --bin on the kit:
#                                    parity of all six backends, both benches, CPU-vs-CUDA
#                                    trainings, compute-sanitizer memcheck and racecheck;
#                                    results to $OUT (docs/gpu.md says how to read them)
set -euo pipefail
cd "$(dirname "$0")/.."

kit_dir=.gpu-kit
kit_file=$kit_dir/xmc-gpu-kit.tar.xz
kit_max_bytes=$((40 * 1024 * 1024))
binaries=(app/xmctrain tests/cuda/test_parity tests/cuda/bench_dense_cuda
  tests/cuda/bench_sparse_cuda tests/ops/test_ops)
# Libraries the GPU machine provides: glibc, the NVIDIA driver, the CUDA runtime and cuBLAS.
provided='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libcuda\.so|libnvidia-|libcudart\.so|libcublas\.so|libcublasLt\.so)'
glibc='^(ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so)'

# "name path" of every library the given binaries load (ldd resolves the whole tree), once
# each; fails naming what ldd cannot resolve.
loaded_libraries() {
  local out
  out=$(for b in "$@"; do ldd "$b"; done)
  if grep -q "not found" <<<"$out"; then
    echo "gpu_kit: unresolved libraries: $(grep "not found" <<<"$out" | sort -u)" >&2
    return 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<<"$out" | sort -u
}

# Open MPI's runtime, for GPU ranks under mpirun on the GPU machine (gpu_check.sh "dist:"):
# mpirun (orterun), orted, the component plugins that need nothing beyond the kit (not the
# UCX, OFI, verbs, PSM, netlink or OpenSHMEM ones: one node's shared memory and TCP
# suffice), the help texts and PMIx's plugins, laid out under kit/mpi as Debian lays them
# out under /usr, so that OPAL_PREFIX relocates them (mpi_env).
ompi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix_plugins=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
ompi_skip='ucx|ofi|openib|psm|oshmem|atomic_|memheap|scoll|spml|sshmem|netlink'
pack_mpi() {
  local m=$1/mpi f
  mkdir -p "$m/bin" "$m/lib/x86_64-linux-gnu/openmpi/lib/openmpi3" "$m/share/openmpi" \
    "$m/pmix2/lib/pmix"
  cp -L "$(command -v orterun)" "$m/bin/mpirun"
  cp -L "$(command -v orted)" "$m/bin/orted"
  for f in "$ompi_plugins"/*.so; do
    [[ $(basename "$f") =~ $ompi_skip ]] || cp "$f" "$m/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/"
  done
  cp /usr/share/openmpi/*.txt "$m/share/openmpi/"
  cp "$pmix_plugins"/*.so "$m/pmix2/lib/pmix/"
}
# The environment in which the kit's mpirun, unpacked at PREFIX/kit/mpi, finds itself:
# one node, no ssh (plm isolated); root allowed (the GPU machine's user may be root).
mpi_env() {
  local m=$1/kit/mpi
  echo "PATH=$m/bin:${2:-/usr/bin:/bin} OPAL_PREFIX=$m PMIX_MCA_mca_base_component_path=$m/pmix2/lib/pmix" \
    "OMPI_MCA_plm=isolated OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
}

cuda_lib_dir() {
  local nvcc_path
  nvcc_path=$(command -v nvcc || true)
  [ -z "$nvcc_path" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc_path=/usr/local/cuda/bin/nvcc
  [ -n "$nvcc_path" ] || { echo "gpu_kit: nvcc not found" >&2; return 1; }
  local root
  root=$(cd "$(dirname "$(readlink -f "$nvcc_path")")/.." && pwd)
  for d in "$root/lib64" "$root/lib" "$root/targets/x86_64-linux/lib"; do
    [ -e "$d/libcudart.so" ] || ls "$d"/libcudart.so.* >/dev/null 2>&1 && { echo "$d"; return 0; }
  done
  echo "gpu_kit: no libcudart under $root" >&2
  return 1
}

cmd_build() {
  local dir=${1:-build-kit}
  # With MPI: the kit carries Open MPI's runtime (pack_mpi), so that GPU ranks run under
  # mpirun on the GPU machine (two processes sharing its one GPU).
  bash tools/build.sh "$dir" -DXMC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DXMC_SHARED_LIB=ON \
    -DXMC_MARCH=x86-64-v3 -DXMC_BUILD_TESTS=ON -DXMC_MPI=ON
  # The kit's binaries (the test suite's other targets are built by tools/build.sh too).
  cmake --build "$dir" -j "$(nproc)" --target xmctrain test_parity bench_dense_cuda \
    bench_sparse_cuda test_ops
}

cmd_pack() {
  local dir=${1:-build-kit}
  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  mkdir -p "$stage/kit/bin" "$stage/kit/lib" "$kit_dir"
  local b libs=()
  for b in "${binaries[@]}"; do
    [ -x "$dir/$b" ] || { echo "gpu_kit: $dir/$b missing: run tools/gpu_kit.sh build $dir" >&2; return 1; }
    cp "$dir/$b" "$stage/kit/bin/"
  done
  pack_mpi "$stage/kit"
  # Every library the binaries and Open MPI's runtime load, less what the GPU machine
  # provides.
  local listing
  listing=$(loaded_libraries "${binaries[@]/#/$dir/}" "$stage"/kit/mpi/bin/* \
    "$stage"/kit/mpi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$stage"/kit/mpi/pmix2/lib/pmix/*.so)
  while read -r name path; do
    [[ "$name" =~ $provided ]] && continue
    cp -L "$path" "$stage/kit/lib/$name"
    libs+=("$name")
  done <<<"$listing"
  strip --strip-unneeded "$stage"/kit/bin/* "$stage"/kit/lib/*
  {
    echo "xmctrain GPU kit"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(nvcc --version 2>/dev/null | tail -1 || true)"
    echo "flags: CUDA sm_90, libxmc shared, -march=x86-64-v3, Release"
    echo "expects from the GPU machine: glibc, the NVIDIA driver, the CUDA 13 runtime and cuBLAS"
    echo "bin:"
    (cd "$stage/kit/bin" && sha256sum ./*)
    echo "lib:"
    (cd "$stage/kit/lib" && sha256sum ./*)
  } >"$stage/kit/MANIFEST"
  tar -C "$stage" -cf - kit | xz -T0 -6 >"$kit_file.tmp"
  mv "$kit_file.tmp" "$kit_file"
  local size
  size=$(stat -c %s "$kit_file")
  echo "gpu_kit: $kit_file: $((size / 1024)) KiB (${#binaries[@]} binaries, ${#libs[@]} libraries: ${libs[*]})"
  if [ "$size" -gt "$kit_max_bytes" ]; then
    echo "gpu_kit: the kit is larger than $((kit_max_bytes / 1024 / 1024)) MiB" >&2
    return 1
  fi
}

# The chroot: glibc from this machine, the CUDA runtime + cuBLAS bound in (what the GPU
# machine provides), the kit, an empty /tmp, /proc and /dev. Nothing from the Debian dev
# packages (libstdc++, libgomp, OpenBLAS, HDF5, yaml-cpp, fmt, spdlog...) is visible.
cmd_selftest() {
  [ -f "$kit_file" ] || { echo "gpu_kit: $kit_file missing: run tools/gpu_kit.sh pack" >&2; return 1; }
  [ "$(id -u)" -eq 0 ] || { echo "gpu_kit: selftest needs root (unshare -m, chroot)" >&2; return 1; }
  local root cudalib
  cudalib=$(cuda_lib_dir)
  root=$(mktemp -d /tmp/xmc-kit-root.XXXXXX)
  trap 'rm -rf "$root"' RETURN
  mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64" "$root/cuda" "$root/tmp" "$root/proc" \
    "$root/dev" "$root/sys"
  xz -dc "$kit_file" | tar -C "$root" -xf -
  # glibc: the files the kit's binaries load from this machine's glibc.
  local name path listing
  listing=$(LD_LIBRARY_PATH="$root/kit/lib:$cudalib" loaded_libraries "$root"/kit/bin/* \
    "$root"/kit/mpi/bin/* "$root"/kit/mpi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so)
  while read -r name path; do
    cp -L "$path" "$root/lib/x86_64-linux-gnu/$name"
  done < <(grep -E "$glibc" <<<"$listing")
  cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
  local binds=()
  for name in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    [ -e "$cudalib/$name" ] || { echo "gpu_kit: $cudalib/$name missing" >&2; return 1; }
    touch "$root/cuda/$name"
    binds+=("$(readlink -f "$cudalib/$name")" "$root/cuda/$name")
  done
  cat >"$root/tmp/tiny.yaml" <<'EOF'
name: kit-selftest
seed: 1
data:
  train: {features: /tmp/d/trn_X.npy, labels: /tmp/d/trn_X_Y.txt}
  test: {features: /tmp/d/tst_X.npy, labels: /tmp/d/tst_X_Y.txt}
  synth: {enabled: true, format: dense, train: 600, test: 100, labels: 50, features: 16, clusters: 5}
model:
  encoder: [{type: linear, out: 16, activation: relu}]
  output: {type: dense, loss: bce}
train: {epochs: 1, batch_size: 64}
eval: {k: 3}
threads: 2
EOF
  # Inside a private mount namespace: bind the CUDA libraries, mount /proc and /dev, then
  # run each case under chroot with LD_LIBRARY_PATH=/kit/lib:/cuda.
  unshare -m bash -s "$root" "$(mpi_env "")" "${binds[@]}" <<'INNER'
set -uo pipefail
root=$1
read -r -a mpi <<<"$2"
shift 2
chroot_bin=$(command -v chroot)
while [ $# -gt 0 ]; do mount --bind "$1" "$2"; shift 2; done
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"  # hwloc (Open MPI) reads the topology there
fails=0
run_env=()
run() {  # run WANT_RC NAME -- COMMAND...: the command's exit code must be WANT_RC
  local want=$1 name=$2
  shift 3
  local out rc
  # </dev/null: this script is bash's stdin, which mpirun would otherwise read away.
  out=$(env -i LD_LIBRARY_PATH=/kit/lib:/cuda HOME=/tmp "${run_env[@]}" "$chroot_bin" "$root" \
    "$@" 2>&1 </dev/null)
  rc=$?
  if [ "$rc" -eq "$want" ]; then
    printf '  %-44s ok (exit %d)\n' "$name" "$rc"
  else
    printf '  %-44s FAILED (exit %d, expected %d)\n' "$name" "$rc" "$want"
    echo "$out" | tail -5 | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}
echo "gpu_kit selftest: chroot with glibc + CUDA runtime/cuBLAS + the kit only"
for b in "$root"/kit/bin/*; do
  n=$(basename "$b")
  # The chroot's own loader lists what the binary would load there.
  out=$(env -i LD_LIBRARY_PATH=/kit/lib:/cuda "$chroot_bin" "$root" /lib64/ld-linux-x86-64.so.2 \
    --list "/kit/bin/$n" 2>&1)
  # (here-strings: with pipefail, `echo | grep -q` fails when grep stops reading early)
  if grep -q "not found" <<<"$out" || ! grep -q "=> /kit/lib/libxmc.so" <<<"$out"; then
    printf '  %-44s FAILED\n' "$n: libraries resolve in the chroot"
    echo "$out" | grep -v "=> /kit/lib\|=> /cuda\|=> /lib/x86_64-linux-gnu" | sed 's/^/      /'
    fails=$((fails + 1))
  else
    printf '  %-44s ok\n' "$n: libraries resolve in the chroot"
  fi
done
for n in bench_dense_cuda bench_sparse_cuda; do
  run 77 "$n: no GPU -> exit 77" -- "/kit/bin/$n"
done
# The test binaries: their GPU-only cases ([cuda]) skip without a GPU (77), fail with
# XMC_TEST_REQUIRE_CUDA (as gpu_check.sh runs them); their CPU cases pass.
for n in test_parity test_ops; do
  run 77 "$n [cuda]: no GPU -> exit 77" -- "/kit/bin/$n" "[cuda]"
done
run_env=(XMC_TEST_REQUIRE_CUDA=1)
run 1 "test_parity [cuda], GPU required: exit 1" -- /kit/bin/test_parity "[cuda]"
run_env=()
run 0 "test_ops: the op bodies on the CPU" -- /kit/bin/test_ops
run 0 "test_parity: the layer bodies on the CPU" -- /kit/bin/test_parity "~[cuda]~[training]"
run 0 "xmctrain --help" -- /kit/bin/xmctrain --help
run 2 "xmctrain train --device cuda: no GPU -> exit 2" -- /kit/bin/xmctrain train /tmp/tiny.yaml \
  --device cuda --out /tmp/run_cuda
run 0 "xmctrain train (cpu: BLAS, OpenMP, HDF5, YAML)" -- /kit/bin/xmctrain train /tmp/tiny.yaml \
  --device cpu --out /tmp/run_cpu
run 0 "xmctrain eval --checkpoint (HDF5 read)" -- /kit/bin/xmctrain eval \
  --checkpoint /tmp/run_cpu/checkpoint.h5
run_env=("${mpi[@]}")
run 0 "mpirun -np 2 xmctrain train (kit's Open MPI)" -- /kit/mpi/bin/mpirun -np 2 \
  --oversubscribe /kit/bin/xmctrain train /tmp/tiny.yaml --device cpu --out /tmp/run_mpi
run 0 "mpirun -np 2 xmctrain eval of the shard set" -- /kit/mpi/bin/mpirun -np 2 \
  --oversubscribe /kit/bin/xmctrain eval --checkpoint /tmp/run_mpi/checkpoint.h5
run_env=()
echo "gpu_kit selftest: $([ "$fails" -eq 0 ] && echo PASSED || echo "FAILED ($fails)")"
exit $((fails > 0 ? 1 : 0))
INNER
}

cmd_run() {
  [ -f "$kit_file" ] || { echo "gpu_kit: $kit_file missing (carry .gpu-kit)" >&2; return 1; }
  local dest=${XMC_KIT_DIR:-/tmp/xmc-gpu-kit}
  rm -rf "$dest"
  mkdir -p "$dest"
  if command -v xz >/dev/null; then
    xz -dc "$kit_file" | tar -C "$dest" -xf -
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$kit_file" "$dest"
  fi
  head -3 "$dest/kit/MANIFEST"
  local cudalib
  cudalib=$(cuda_lib_dir)
  export LD_LIBRARY_PATH="$dest/kit/lib:$cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The kit's Open MPI (mpirun for gpu_check.sh's GPU ranks).
  local v
  for v in $(mpi_env "$dest" "$PATH"); do export "${v?}"; done
  exec bash tools/gpu_check.sh --bin "$dest/kit/bin"
}

case "${1:-all}" in
  build) cmd_build "${2:-}" ;;
  pack) cmd_pack "${2:-}" ;;
  selftest) cmd_selftest ;;
  run) cmd_run ;;
  all)
    cmd_build build-kit
    cmd_pack build-kit
    cmd_selftest
    ;;
  -h | --help) sed -n '2,27p' "$0" ;;
  *)
    echo "usage: tools/gpu_kit.sh [build [DIR] | pack [DIR] | selftest | run]" >&2
    exit 2
    ;;
esac
