//! Shared helpers for the integration tests of the model crate and the classifier crate (which
//! includes this file by path).
#![allow(dead_code)]

use std::path::PathBuf;

use candle_core::{Device, Tensor};

/// `tests/fixtures/NAME` at the repository root.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

/// Largest absolute difference between two tensors of one shape.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

/// The expected tensors a fixture script stored.
pub fn expected(name: &str) -> std::collections::HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture(name).join("expected.safetensors"), &Device::Cpu).unwrap()
}

/// Copies a fixture's files into a temporary directory that a test may damage.
pub fn scratch_copy(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
    }
    dir
}

/// The repository root: `LONGREAD_REPO` when set (test executables built on one machine and
/// run from a copy of the repository on another, as scripts/gpu_check.sh does), else the
/// checkout the tests were built in.
pub fn repo() -> PathBuf {
    match std::env::var_os("LONGREAD_REPO") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."),
    }
}

/// The texts of `tests/fixtures/hier/documents.jsonl`.
pub fn hier_documents() -> Vec<String> {
    std::fs::read_to_string(fixture("hier/documents.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["text"].as_str().unwrap().to_owned())
        .collect()
}

/// Largest absolute difference of two equally long lists.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
