# Sourced by the scripts that run on a GPU machine (gpu_check.sh, gpu_quick_cudnn.sh,
# gpu_varied_shapes.sh): what each needs there before it starts.
export PYTHONUNBUFFERED=1

# Folders holding the shared library files matching NAME under /usr and /opt (PyTorch's wheels
# bring CUDA 13's cuBLAS, cuBLASLt and cuRAND, which candle loads at run time, and cuDNN 9),
# as an LD_LIBRARY_PATH prefix ending in ':' (empty when none).
gpu_library_dirs() { find /usr /opt -name "$1" -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':'; }

# unxz FILE.xz OUT: decompresses with Python's lzma (the GPU machine has no xz tool).
unxz() { ${PYTHON:-python3} -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
