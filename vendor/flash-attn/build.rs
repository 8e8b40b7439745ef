//! Compiles `kernels/longread_flash.cu` (FlashAttention-2's forward and backward kernels for
//! heads of 32 and 64, bf16) and `gemm/longread_gemm.cu` (longread's CUTLASS product with bias
//! and exact GELU in its epilogue, Hopper only) with nvcc into one static library, and links it
//! with the static CUDA runtime (no libcudart.so is needed at run time; the runtime finds the
//! driver as cudarc does; one library, so that the runtime is linked once).
//! Needs: nvcc (CUDA_ROOT / CUDA_PATH, else PATH), CUTLASS 3.5's headers (CUTLASS_INCLUDE_DIR:
//! `scripts/build_cuda.sh` installs them from PyPI's nvidia-cutlass), CUDA_COMPUTE_CAP (default
//! 90; at least 80, the kernel uses sm80 instructions).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../object_cache.rs"]
mod object_cache;
use object_cache::{cached_object, fnv_dir, link_static, FNV_START};

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=kernels");
    println!("cargo::rerun-if-changed=gemm");
    println!("cargo::rerun-if-changed=../object_cache.rs");
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
    let nvcc = Nvcc { path: nvcc, root, cutlass };
    let gemm = out_dir.join("longread_gemm.o");
    compile_gemm(&nvcc, cap, &gemm, &out_dir);
    let object = out_dir.join("longread_flash.o");
    let mut cmd = nvcc.command("kernels/longread_flash.cu");
    cmd.args(["-Ikernels", "-Ikernels/shim"]);
    cmd.arg(format!("-gencode=arch=compute_{cap},code=sm_{cap}"));
    cmd.args([
        "-U__CUDA_NO_HALF_OPERATORS__",
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "--use_fast_math",
    ]);
    // Built once per target folder (../object_cache.rs): ~80 s of nvcc otherwise in every build.
    nvcc.compile(cmd, "kernels", "longread-flash", &object, &out_dir);
    link_static(&[&object, &gemm], &out_dir, "longread_flash");
    if let Some(root) = &nvcc.root {
        println!("cargo::rustc-link-search=native={}", root.join("lib").display());
        println!("cargo::rustc-link-search=native={}", root.join("lib64").display());
    }
    println!("cargo::rustc-link-lib=static=cudart_static");
    for lib in ["stdc++", "dl", "rt", "pthread"] {
        println!("cargo::rustc-link-lib=dylib={lib}");
    }
}

/// nvcc with what both objects need: CUTLASS's and CUDA's headers.
struct Nvcc {
    path: PathBuf,
    root: Option<PathBuf>,
    cutlass: PathBuf,
}

impl Nvcc {
    /// A command compiling `source` (`-c`, no `-o` yet) with the flags both objects share.
    fn command(&self, source: &str) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.args(["-c", source]);
        cmd.arg(format!("-I{}", self.cutlass.display()));
        if let Some(root) = &self.root {
            cmd.arg(format!("-I{}", root.join("include").display()));
        }
        cmd.args([
            "-std=c++17",
            "-O3",
            "--expt-relaxed-constexpr",
            "--expt-extended-lambda",
            // CUTLASS 3.5 names the driver's tensor-map entry points as CUDA 12 did; CUDA 13 versions them.
            "-DPFN_cuTensorMapEncodeTiled=PFN_cuTensorMapEncodeTiled_v12000",
            "-DPFN_cuTensorMapEncodeIm2col=PFN_cuTensorMapEncodeIm2col_v12000",
            "-Xcompiler",
            "-fPIC",
            "-w",
        ]);
        cmd
    }

    /// Runs `cmd` into `object`, or takes it from the target folder's cache (keyed by the files
    /// under `dir` and the command; `name` names the cached file).
    fn compile(&self, cmd: Command, dir: &str, name: &str, object: &Path, out_dir: &Path) {
        let what = format!("{} (the CUDA compiler; see scripts/build_cuda.sh) on {dir}/", self.path.display());
        cached_object(cmd, fnv_dir(Path::new(dir), FNV_START), object, out_dir, name, &what);
    }
}

/// Compiles `gemm/longread_gemm.cu` into `object`: CUTLASS's sm90 TMA warp-specialised kernels
/// need sm90a machine code (Hopper's wgmma), so with `CUDA_COMPUTE_CAP=90` the file is compiled
/// for `sm_90a` with its kernel (`LONGREAD_GEMM_SM90A`); for any other capability it holds only
/// the entry point, which answers "not built for this GPU". Needs CUTLASS's `tools/util`
/// headers beside its `include` (PyPI's nvidia-cutlass ships both).
fn compile_gemm(nvcc: &Nvcc, cap: u32, object: &Path, out_dir: &Path) {
    let mut cmd = nvcc.command("gemm/longread_gemm.cu");
    if let Some(util) = nvcc.cutlass.parent().map(|p| p.join("tools").join("util").join("include")) {
        cmd.arg(format!("-I{}", util.display()));
    }
    if cap == 90 {
        cmd.args(["-gencode=arch=compute_90a,code=sm_90a", "-DLONGREAD_GEMM_SM90A"]);
    } else {
        cmd.arg(format!("-gencode=arch=compute_{cap},code=sm_{cap}"));
    }
    // Without it CUTLASS's device asserts are calls, and ptxas serialises the wgmma pipeline
    // across them (warning C7510).
    cmd.arg("-DNDEBUG");
    nvcc.compile(cmd, "gemm", "longread-gemm", object, out_dir);
}
