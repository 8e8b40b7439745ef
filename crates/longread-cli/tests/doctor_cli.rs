//! `longread doctor` against stand-ins for the NVIDIA driver and the CUDA libraries: a small C
//! library named libcuda.so.1 that answers the driver calls doctor makes for one card, and
//! empty libraries under the CUDA libraries' names, found through LD_LIBRARY_PATH as the real
//! ones would be.

mod common;

use std::path::Path;
use std::process::Command;

use common::assert_clean_failure;
use serde_json::Value;

/// The driver stand-in: one card named "Stand-in GPU" of compute capability MAJOR.MINOR with
/// 16 GiB, CUDA 13.0.
const DRIVER: &str = r#"
#include <string.h>
#include <stddef.h>
int cuInit(unsigned int flags) { return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetName(char *name, int len, int d) { strncpy(name, "Stand-in GPU", len); return 0; }
int cuDeviceGetAttribute(int *v, int attribute, int d) {
    *v = attribute == 75 ? MAJOR : attribute == 76 ? MINOR : 0; return 0;
}
int cuDeviceTotalMem_v2(size_t *bytes, int d) { *bytes = (size_t)16 << 30; return 0; }
"#;

/// Compiles `source` into the shared library `dir/name` with the C compiler; `None` (with a
/// note) where there is none, which CI does not accept.
fn compile(dir: &Path, name: &str, source: &str, defines: &[&str]) -> Option<()> {
    let file = dir.join(format!("{name}.c"));
    std::fs::write(&file, source).unwrap();
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut command = Command::new(&compiler);
    command.args(["-shared", "-fPIC", "-o"]).arg(dir.join(name)).arg(&file).args(defines);
    match command.output() {
        Ok(out) if out.status.success() => Some(()),
        Ok(out) => panic!("{compiler} failed: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("skipped: no C compiler ({compiler}: {e}) to build the driver stand-in");
            None
        }
        Err(e) => panic!("no C compiler ({compiler}: {e}): CI installs one (.ci/run)"),
    }
}

/// `longread doctor --json` with the stand-ins of `dir` on the loader's path.
fn doctor(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_longread"));
    command.arg("doctor").args(extra).env("LD_LIBRARY_PATH", dir);
    command.output().unwrap()
}

/// A directory with the driver stand-in for a card of `capability` and, with `libraries`,
/// the CUDA libraries' stand-ins.
fn machine(capability: (u32, u32), libraries: bool) -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir().unwrap();
    let defines = [format!("-DMAJOR={}", capability.0), format!("-DMINOR={}", capability.1)];
    let defines: Vec<&str> = defines.iter().map(String::as_str).collect();
    compile(dir.path(), "libcuda.so.1", DRIVER, &defines)?;
    if libraries {
        for name in ["libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10"] {
            compile(dir.path(), name, "int longread_stand_in;\n", &[])?;
        }
    }
    Some(dir)
}

#[test]
fn a_card_and_the_libraries_are_found_and_what_is_missing_is_named() {
    let Some(dir) = machine((9, 0), true) else { return };
    let out = doctor(dir.path(), &["--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let gpu = &report["gpu"];
    assert_eq!(gpu["driver"], "13.0", "{report}");
    assert_eq!(gpu["devices"][0]["name"], "Stand-in GPU");
    assert_eq!(gpu["devices"][0]["capability"], "9.0");
    assert_eq!(gpu["devices"][0]["memory_bytes"], 16u64 << 30);
    assert_eq!(gpu["devices"][0]["supported"], true);
    let found: Vec<(&str, bool)> = gpu["libraries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["found"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        found,
        [("libcublas.so.13", true), ("libcublasLt.so.13", true), ("libcurand.so.10", true), ("libcudnn.so.9", false)]
    );
    let missing: Vec<&str> = gpu["missing"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    if cfg!(feature = "cuda") {
        assert!(missing.is_empty(), "{missing:?}");
    } else {
        // A CPU build: the machine has everything but the binary.
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(missing[0].contains("built without CUDA"), "{missing:?}");
        assert_clean_failure(&doctor(dir.path(), &["--device", "cuda"]), "--device cuda:0: not usable here");
    }
    assert_clean_failure(&doctor(dir.path(), &["--device", "cuda:3"]), "cuda:3");
    let text = doctor(dir.path(), &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("cuda:0: Stand-in GPU, compute capability 9.0, 16.0 GiB"), "{text}");
    assert!(text.contains("--device cpu: ready"), "{text}");
}

#[test]
fn a_card_older_than_ampere_and_missing_libraries_are_each_named() {
    let Some(dir) = machine((7, 5), false) else { return };
    let out = doctor(dir.path(), &["--json"]);
    assert!(
        out.status.success(),
        "without --device cuda doctor only reports: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["gpu"]["devices"][0]["supported"], false, "{report}");
    let missing: Vec<&str> = report["gpu"]["missing"].as_array().unwrap().iter().map(|m| m.as_str().unwrap()).collect();
    assert!(missing.iter().any(|m| m.contains("compute capability 7.5") && m.contains("8.0 (Ampere)")), "{missing:?}");
    for library in ["libcublas.so.13", "libcublasLt.so.13", "libcurand.so.10"] {
        assert!(missing.iter().any(|m| m.starts_with(library) && m.contains("LD_LIBRARY_PATH")), "{missing:?}");
    }
    assert!(!missing.iter().any(|m| m.contains("libcudnn")), "cuDNN is optional: {missing:?}");
    assert_clean_failure(&doctor(dir.path(), &["--device", "cuda"]), "not usable here");
}

#[test]
fn without_a_driver_doctor_says_so_and_the_cpu_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let out = doctor(dir.path(), &[]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    if !Path::new("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists() {
        assert!(text.contains("libcuda.so.1 not found"), "{text}");
    }
    assert!(text.contains("kernels: f32 ") && text.contains("--device cpu: ready"), "{text}");
}
