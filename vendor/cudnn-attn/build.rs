//! Compiles `shim/longread_cudnn.cpp` (longread's two entry points into cuDNN's fused attention)
//! with the C++ compiler (CXX, else `c++`) into a static library. Nothing of cuDNN or of the CUDA
//! runtime is linked: cuDNN's frontend opens both at run time (its dynamic loading).
//! Needs the headers of cuDNN 9 (CUDNN_INCLUDE_DIR: cudnn.h), of cuDNN's C++ frontend 1.x
//! (CUDNN_FRONTEND_INCLUDE_DIR: cudnn_frontend.h) and of CUDA 13 (CUDA_ROOT / CUDA_PATH: include/
//! with cuda_runtime.h and nvrtc.h); `scripts/build_cuda.sh` installs all three from PyPI.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../object_cache.rs"]
mod object_cache;
use object_cache::{cached_object, fnv_dir, link_static, FNV_START};

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=shim");
    println!("cargo::rerun-if-changed=../object_cache.rs");
    for var in ["CUDNN_INCLUDE_DIR", "CUDNN_FRONTEND_INCLUDE_DIR", "CUDA_ROOT", "CUDA_PATH", "CXX"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let folder = |var: &str, file: &str, what: &str| {
        env::var_os(var).map(PathBuf::from).filter(|p| p.join(file).is_file()).unwrap_or_else(|| {
            panic!(
                "longread-cudnn-attn needs {what}: set {var} to a folder holding {file} \
                 (scripts/build_cuda.sh installs it from PyPI)"
            )
        })
    };
    let cudnn = folder("CUDNN_INCLUDE_DIR", "cudnn.h", "cuDNN 9's headers");
    let frontend = folder("CUDNN_FRONTEND_INCLUDE_DIR", "cudnn_frontend.h", "cuDNN's C++ frontend (headers)");
    let cuda = env::var_os("CUDA_ROOT").or_else(|| env::var_os("CUDA_PATH")).map(|r| PathBuf::from(r).join("include"));
    let cuda =
        cuda.filter(|p| p.join("cuda_runtime.h").is_file() && p.join("nvrtc.h").is_file()).unwrap_or_else(|| {
            panic!(
                "longread-cudnn-attn needs CUDA 13's headers (cuda_runtime.h, nvrtc.h) under $CUDA_ROOT/include \
             (scripts/build_cuda.sh installs them from PyPI)"
            )
        });
    let cxx = env::var_os("CXX").unwrap_or_else(|| "c++".into());
    let object = out_dir.join("longread_cudnn.o");
    let mut cmd = Command::new(&cxx);
    cmd.args(["-c", "shim/longread_cudnn.cpp", "-std=c++17", "-O2", "-fPIC", "-w"]);
    // cuDNN and the CUDA runtime are opened by the frontend at run time; its JSON support
    // (plan serialisation) is not used.
    cmd.args(["-DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING", "-DCUDNN_FRONTEND_SKIP_JSON_LIB"]);
    for include in [&frontend, &cudnn, &cuda] {
        cmd.arg(format!("-I{}", include.display()));
    }
    // Built once per target folder (../object_cache.rs); the headers are pinned by version in
    // scripts/build_cuda.sh, so the source and the command are what the object depends on.
    let what = format!("{} (the C++ compiler) on shim/longread_cudnn.cpp", Path::new(&cxx).display());
    cached_object(cmd, fnv_dir(Path::new("shim"), FNV_START), &object, &out_dir, "longread-cudnn", &what);
    link_static(&[&object], &out_dir, "longread_cudnn");
    for lib in ["stdc++", "dl", "pthread"] {
        println!("cargo::rustc-link-lib=dylib={lib}");
    }
}
