//! Helpers for end-to-end tests that run the real `longread` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/fixtures/NAME`.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

/// `../shared/models/all-MiniLM-L6-v2`, or `None` (with a note) when absent outside CI.
/// Under `CI=true` a missing model fails the test instead of skipping it.
pub fn minilm() -> Option<PathBuf> {
    let dir = repo().join("../shared/models/all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{} is missing: CI must provide ../shared", dir.display());
    }
    eprintln!("skipping: {} not found (set CI=true to make this a failure)", dir.display());
    None
}

/// Runs `longread ARGS...`.
pub fn longread(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_longread")).args(args).output().expect("running longread")
}

/// Runs it with standard input from a file.
pub fn longread_stdin(args: &[&str], stdin: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_longread"))
        .args(args)
        .stdin(std::fs::File::open(stdin).unwrap())
        .output()
        .expect("running longread")
}

/// Asserts a failure with exit code 1, a single `error: ...` line containing `needle`, no panic.
pub fn assert_clean_failure(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "exit code; stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {stderr}");
    assert!(lines[0].starts_with("error: ") && lines[0].contains(needle), "{needle:?} not in {stderr:?}");
}

/// Copies a fixture directory into a fresh temporary directory.
pub fn scratch_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

/// Parses JSON lines.
pub fn json_lines(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8(bytes.to_vec()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
