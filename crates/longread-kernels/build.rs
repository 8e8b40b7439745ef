//! With the `cuda` feature, compiles `src/layers/cuda/kernels.cu` to PTX with nvcc (found under
//! CUDA_ROOT / CUDA_PATH, else on PATH) for compute capability CUDA_COMPUTE_CAP (default 80:
//! the PTX is JIT-compiled by the driver for any newer GPU). Without the feature: nothing.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src/layers/cuda/kernels.cu");
    println!("cargo::rerun-if-env-changed=CUDA_COMPUTE_CAP");
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("longread_kernels.ptx");
    let root = env::var_os("CUDA_ROOT").or_else(|| env::var_os("CUDA_PATH")).map(PathBuf::from);
    let nvcc = root.as_ref().map(|r| r.join("bin").join("nvcc")).filter(|p| p.exists()).unwrap_or("nvcc".into());
    let cap = env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "80".into());
    let mut cmd = Command::new(&nvcc);
    cmd.args(["--ptx", "-O3", "-std=c++17", &format!("-arch=sm_{cap}")]);
    if let Some(root) = &root {
        cmd.arg(format!("-I{}", root.join("include").display()));
    }
    cmd.arg("src/layers/cuda/kernels.cu").arg("-o").arg(&out);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("running {} (the CUDA compiler; see scripts/build_cuda.sh): {e}", nvcc.display()));
    assert!(status.success(), "nvcc failed on src/layers/cuda/kernels.cu ({status})");
}
