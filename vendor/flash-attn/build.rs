//! Compiles `kernels/longread_flash.cu` (FlashAttention-2's forward and backward kernels for
//! heads of 32 and 64, bf16) with nvcc into a static library, and links it with the static CUDA runtime (no
//! libcudart.so is needed at run time; the runtime finds the driver as cudarc does).
//! Needs: nvcc (CUDA_ROOT / CUDA_PATH, else PATH), CUTLASS 3.5's headers (CUTLASS_INCLUDE_DIR:
//! `scripts/build_cuda.sh` installs them from PyPI's nvidia-cutlass), CUDA_COMPUTE_CAP (default
//! 90; at least 80, the kernel uses sm80 instructions).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=kernels");
    for var in ["CUDA_COMPUTE_CAP", "CUTLASS_INCLUDE_DIR", "CUDA_ROOT", "CUDA_PATH"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let root = env::var_os("CUDA_ROOT").or_else(|| env::var_os("CUDA_PATH")).map(PathBuf::from);
    let nvcc = root.as_ref().map(|r| r.join("bin").join("nvcc")).filter(|p| p.exists()).unwrap_or("nvcc".into());
    let cutlass = env::var_os("CUTLASS_INCLUDE_DIR").map(PathBuf::from).filter(|p| p.join("cute").is_dir());
    let Some(cutlass) = cutlass else {
        panic!(
            "longread-flash-attn needs CUTLASS 3.5's headers: set CUTLASS_INCLUDE_DIR to a folder holding \
             cute/ and cutlass/ (scripts/build_cuda.sh installs them from PyPI's nvidia-cutlass==3.5.1.0)"
        );
    };
    let cap: u32 = env::var("CUDA_COMPUTE_CAP").ok().and_then(|c| c.parse().ok()).unwrap_or(90);
    assert!(cap >= 80, "FlashAttention-2 needs compute capability 8.0 or newer; CUDA_COMPUTE_CAP={cap}");
    // The kernels are machine code for this capability alone (no PTX): lib.rs tells callers
    // which GPUs can run them.
    println!("cargo::rustc-env=LONGREAD_FLASH_COMPUTE_CAP={cap}");
    let object = out_dir.join("longread_flash.o");
    let mut cmd = Command::new(&nvcc);
    cmd.args(["-c", "kernels/longread_flash.cu"]);
    cmd.arg(format!("-I{}", cutlass.display())).args(["-Ikernels", "-Ikernels/shim"]);
    if let Some(root) = &root {
        cmd.arg(format!("-I{}", root.join("include").display()));
    }
    cmd.arg(format!("-gencode=arch=compute_{cap},code=sm_{cap}"));
    cmd.args([
        "-std=c++17",
        "-O3",
        "-U__CUDA_NO_HALF_OPERATORS__",
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "--expt-relaxed-constexpr",
        "--expt-extended-lambda",
        "--use_fast_math",
        // CUTLASS 3.5 names the driver's tensor-map entry points as CUDA 12 did; CUDA 13 versions them.
        "-DPFN_cuTensorMapEncodeTiled=PFN_cuTensorMapEncodeTiled_v12000",
        "-DPFN_cuTensorMapEncodeIm2col=PFN_cuTensorMapEncodeIm2col_v12000",
        "-Xcompiler",
        "-fPIC",
        "-w",
    ]);
    // The object depends only on the sources and the command: built once per target folder and
    // reused by the other builds there (`cargo check` and `cargo build`, both profiles, other
    // feature sets, the Python package), which would each spend ~80 s on it.
    let key = fnv(format!("{cmd:?}").as_bytes(), fnv_dir(Path::new("kernels"), 0xcbf2_9ce4_8422_2325));
    cmd.arg("-o").arg(&object);
    // OUT_DIR is <target>/<profile>/build/<crate>-<hash>/out: the cache sits in <target>.
    let cache = out_dir.ancestors().nth(4).map(|target| target.join(format!("longread-flash-{key:016x}.o")));
    if let Some(cached) = cache.as_ref().filter(|c| c.exists()) {
        std::fs::copy(cached, &object).expect("copying the cached FlashAttention object");
    } else {
        let status = cmd.status().unwrap_or_else(|e| {
            panic!("running {} (the CUDA compiler; see scripts/build_cuda.sh): {e}", nvcc.display())
        });
        assert!(status.success(), "nvcc failed on kernels/longread_flash.cu ({status})");
        if let Some(cache) = &cache {
            // Written under another name, then renamed: a concurrent build never reads half a file.
            let partial = cache.with_extension(format!("{}.part", std::process::id()));
            if std::fs::copy(&object, &partial).is_ok() {
                let _ = std::fs::rename(&partial, cache);
            }
        }
    }
    let library = out_dir.join("liblongread_flash.a");
    let _ = std::fs::remove_file(&library);
    let status = Command::new("ar").arg("crs").arg(&library).arg(&object).status().expect("running ar");
    assert!(status.success(), "ar failed on {}", object.display());
    println!("cargo::rustc-link-search=native={}", out_dir.display());
    println!("cargo::rustc-link-lib=static=longread_flash");
    if let Some(root) = &root {
        println!("cargo::rustc-link-search=native={}", root.join("lib").display());
        println!("cargo::rustc-link-search=native={}", root.join("lib64").display());
    }
    println!("cargo::rustc-link-lib=static=cudart_static");
    for lib in ["stdc++", "dl", "rt", "pthread"] {
        println!("cargo::rustc-link-lib=dylib={lib}");
    }
}

/// FNV-1a of `bytes`, continuing from `hash`.
fn fnv(bytes: &[u8], mut hash: u64) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// FNV-1a of every file under `dir` (names and contents, in sorted order).
fn fnv_dir(dir: &Path, mut hash: u64) -> u64 {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("reading kernels/").map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        hash = fnv(path.to_string_lossy().as_bytes(), hash);
        hash = if path.is_dir() { fnv_dir(&path, hash) } else { fnv(&std::fs::read(&path).unwrap(), hash) };
    }
    hash
}
