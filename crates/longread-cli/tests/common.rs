//! Helpers for end-to-end tests that run the real `longread` binary.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

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

/// sentence-transformers/all-mpnet-base-v2 where `../shared/models/fetch-all-mpnet-base-v2.sh`
/// installs it (`LONGREAD_MPNET`, else `~/.cache/longread/models/all-mpnet-base-v2`), or `None`
/// with a note saying how to get it (it is not part of ../shared, so CI skips too).
pub fn all_mpnet() -> Option<PathBuf> {
    let dir = match std::env::var_os("LONGREAD_MPNET") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/longread/models/all-mpnet-base-v2"),
    };
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    eprintln!(
        "skipping: {} not found; install it with ../shared/models/fetch-all-mpnet-base-v2.sh (or set LONGREAD_MPNET)",
        dir.display()
    );
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

/// A `longread serve` process; killed when dropped.
pub struct Served {
    pub child: Child,
    pub url: String,
}

impl Served {
    /// Starts `longread serve --port 0 ARGS...` and waits for its ready line.
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_longread"))
            .args(["serve", "--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap_or_else(|| panic!("{line}"));
        Self { url: url.to_owned(), child }
    }

    /// POSTs JSON to `path`.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        post(&self.url, path, body, None).unwrap()
    }

    /// A metric's value from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let text = ureq::get(&format!("{}/metrics", self.url)).call().unwrap().into_string().unwrap();
        let line = text.lines().find(|l| l.split(' ').next() == Some(name)).unwrap_or_else(|| panic!("no {name}"));
        line.split(' ').nth(1).unwrap().parse().unwrap()
    }

    /// Waits until `name` reaches `value`.
    pub fn wait_for(&self, name: &str, value: f64) {
        self.wait_until(name, |v| v == value);
    }

    /// Waits until `name`'s value passes `test`.
    pub fn wait_until(&self, name: &str, test: impl Fn(f64) -> bool) {
        let started = Instant::now();
        while !test(self.metric(name)) {
            assert!(started.elapsed() < Duration::from_secs(60), "{name} never got there");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// POSTs JSON: status and JSON body; `Err` when the request itself failed (e.g. timed out).
pub fn post(url: &str, path: &str, body: &Value, timeout: Option<Duration>) -> Result<(u16, Value), String> {
    let mut request = ureq::post(&format!("{url}{path}"));
    if let Some(t) = timeout {
        request = request.timeout(t);
    }
    match request.send_json(body.clone()) {
        Ok(r) => Ok((r.status(), r.into_json().unwrap())),
        Err(ureq::Error::Status(code, r)) => Ok((code, r.into_json().unwrap())),
        Err(e) => Err(e.to_string()),
    }
}
