#!/usr/bin/env bash
# Builds the `cuda` longread binary (and, with --tests, the GPU test executables) on a machine
# without a GPU, with the CUDA 13.0 compiler from PyPI (../shared/gpu/README.md, "Building a
# CUDA binary"). Output: target-cuda/release/longread.
#   scripts/build_cuda.sh            # the binary
#   scripts/build_cuda.sh --tests    # also the GPU tests' executables (cuda, cuda_train: gpu_check.sh)
#   scripts/build_cuda.sh --python   # the Python package with `cuda` as a wheel in target-cuda/wheels
#   scripts/build_cuda.sh --check    # `cargo check` of the feature only: workspace, GPU tests, Python package (CI)
# Env: CUDA_VENV (default .venv-cuda) where the compiler is installed; CUDA_COMPUTE_CAP (default
# 90: H100/H200; 80 A100, 86/89 RTX 30xx/40xx; at least 80, the kernels use bf16 tensor cores).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${CUDA_VENV:-.venv-cuda}"
if [ ! -x "$venv/bin/pip" ]; then
  python3 -m venv "$venv"
fi
# Pinned: the GPU driver runs PTX up to ISA 9.0; an unpinned nvidia-nvvm emits a newer PTX.
"$venv/bin/pip" install -q nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88
# CUTLASS 3.5's headers for FlashAttention-2 (vendor/flash-attn): headers only, from PyPI.
"$venv/bin/pip" install -q --no-deps nvidia-cutlass==3.5.1.0
venv=$(cd "$venv" && pwd)
cutlass=$(echo "$venv"/lib/python3*/site-packages/cutlass_library/source/include)
[ -d "$cutlass/cute" ] || { echo "build_cuda: no CUTLASS headers under $cutlass" >&2; exit 1; }
export CUTLASS_INCLUDE_DIR="$cutlass"
# cuDNN's fused attention (vendor/cudnn-attn): the headers of cuDNN 9.19 (the version PyTorch
# 2.11's CUDA 13 wheels load) and of cuDNN's header-only C++ frontend 1.32, from PyPI; headers
# only (cuDNN itself is opened at run time). Unpacked once into $venv/cudnn-headers.
cudnn_headers="$venv/cudnn-headers"
cudnn_pins="nvidia-cudnn-cu13==9.19.0.56 nvidia-cudnn-frontend==1.32.0"
if [ "$(cat "$cudnn_headers/.pins" 2>/dev/null)" != "$cudnn_pins" ]; then
  wheels=$(mktemp -d)
  # shellcheck disable=SC2086 # the pins are two words
  "$venv/bin/pip" download -q --no-deps --only-binary=:all: --python-version 3.11 -d "$wheels" $cudnn_pins
  rm -rf "$cudnn_headers"
  "$venv/bin/python" - "$wheels" "$cudnn_headers" <<'PY'
import pathlib, sys, zipfile
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
# (wheel, folder inside it, where it goes): the frontend's headers include "../include/...".
for pattern, inside, to in [("nvidia_cudnn_cu13-*.whl", "nvidia/cudnn/include/", "cudnn"),
                            ("nvidia_cudnn_frontend-*.whl", "include/", "frontend/include")]:
    for wheel in wheels.glob(pattern):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith(inside) and not name.endswith("/"):
                    target = out / to / name[len(inside):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))
PY
  rm -rf "$wheels"
  echo "$cudnn_pins" > "$cudnn_headers/.pins"
fi
export CUDNN_INCLUDE_DIR="$cudnn_headers/cudnn" CUDNN_FRONTEND_INCLUDE_DIR="$cudnn_headers/frontend/include"
cuda_root=$(echo "$venv"/lib/python3*/site-packages/nvidia/cu13)
if [ ! -x "$cuda_root/bin/nvcc" ]; then
  echo "build_cuda: no nvcc under $cuda_root" >&2
  exit 1
fi
export PATH="$cuda_root/bin:$PATH" CUDA_ROOT="$cuda_root" CUDA_PATH="$cuda_root"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
mode="${1:-}"
case "$mode" in
  --check)
    # Everything behind the feature: the workspace, the GPU test executables (run only on a GPU
    # machine, so nothing else would notice them rot) and the Python package.
    cargo check --workspace --locked --features longread-cli/cuda,longread-cli/host-profile --target-dir target-cuda
    cargo check --locked -p longread-classifier --features cuda --target-dir target-cuda --test cuda
    cargo check --locked -p longread-train --features cuda,clap --target-dir target-cuda --test cuda_train
    exec cargo check --locked --manifest-path python/Cargo.toml --features cuda --target-dir target-cuda ;;
  --python)
    "$venv/bin/pip" install -q "maturin>=1.5,<2"
    exec "$venv/bin/maturin" build --release --features cuda -m python/Cargo.toml --target-dir target-cuda \
      --out target-cuda/wheels ;;
  --tests)
    cargo test --release --locked -p longread-classifier --features cuda --target-dir target-cuda --no-run --test cuda
    cargo test --release --locked -p longread-train --features cuda,clap --target-dir target-cuda --no-run --test cuda_train ;;
  "") ;;
  *) echo "usage: scripts/build_cuda.sh [--tests|--python|--check]" >&2; exit 2 ;;
esac
# With the host's CPU profile (`LONGREAD_HOST_PROFILE=FILE`, gpu_check.sh's train-profile part).
cargo build --release --locked -p longread-cli --features cuda,host-profile --target-dir target-cuda
