//! The CUDA kernels of `src/layers/cuda/kernels.cu` tested on the CPU: the file is compiled as
//! C++ with `tests/emulated`'s stand-ins for CUDA (every GPU thread a host thread, warp shuffles
//! and barriers between them) and `tests/emulated/harness.cpp` (with `others.hpp`) runs every
//! kernel but `hold_gpu` (a benchmark's, which reads the GPU's clock) on random inputs against
//! double-precision loops. This checks a kernel's arithmetic and indexing where no GPU is at
//! hand (CI, most development machines); the GPU tests
//! (`crates/longread-classifier/tests/cuda.rs`) still decide on a GPU. Needs a C++20 compiler:
//! `c++`, or the one `CXX` names.

use std::path::Path;
use std::process::Command;

#[test]
fn cuda_kernels_compute_what_their_loops_do_under_cpu_emulation() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let emulated = dir.join("tests/emulated");
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernels-emulated");
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let build = Command::new(&compiler)
        .args(["-std=c++20", "-O1", "-pthread", "-DLONGREAD_KERNEL_EMULATION", "-I"])
        .arg(emulated.join("include"))
        .arg(emulated.join("harness.cpp"))
        .arg("-o")
        .arg(&binary)
        .output()
        .unwrap_or_else(|e| panic!("running the C++ compiler {compiler:?} (set CXX to another): {e}"));
    assert!(build.status.success(), "compiling kernels.cu for emulation:\n{}", String::from_utf8_lossy(&build.stderr));
    let run = Command::new(&binary).output().expect("running the emulated kernels");
    let report = String::from_utf8_lossy(&run.stdout);
    println!("{report}");
    assert!(run.status.success(), "emulated kernels disagree with their loops:\n{report}");
    assert!(report.lines().filter(|l| l.ends_with(" ok")).count() >= 160, "fewer cases ran than written:\n{report}");
}
