// longread's vendored candle-kernels 0.11.1: builds the PTX modules only. Upstream also
// compiles the GGUF/MoE kernels into a static library (libmoe.a, ~12 minutes on 2 cores) and
// links libcudart and libstdc++ for it; longread uses none of them (see src/ffi.rs and
// vendor/README.md), so nothing of CUDA is needed at link time.
use cudaforge::{KernelBuilder, Result};
use std::env;
use std::path::PathBuf;

fn main() -> Result<()> {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=src/compatibility.cuh");
    println!("cargo::rerun-if-changed=src/cuda_utils.cuh");
    println!("cargo::rerun-if-changed=src/binary_op_macros.cuh");

    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let ptx_path = out_dir.join("ptx.rs");
    let bindings = KernelBuilder::new()
        .source_dir("src")
        .arg("--expt-relaxed-constexpr")
        .arg("-std=c++17")
        .arg("-O3")
        .build_ptx()?;
    bindings.write(&ptx_path)?;
    Ok(())
}
