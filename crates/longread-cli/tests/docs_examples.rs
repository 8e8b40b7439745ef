//! Every command block of README.md and docs/*.md either runs here or says why it cannot
//! (CONTRIBUTING.md, "Examples in the documentation run as tests"): the documentation's
//! examples cannot rot.
//!
//! A file's `sh` blocks run in order with `bash -euo pipefail`, in one scratch directory that
//! holds a copy of `examples/`, with `longread` on `PATH` and a local stand-in for the Hugging
//! Face Hub (`HF_ENDPOINT`) that serves `sentence-transformers/all-MiniLM-L6-v2` from
//! `../shared`, so a block may name the encoder as a user on a connected machine does.

mod common;
mod hub_stand_in;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{minilm, repo};
use hub_stand_in::HubStandIn;

/// One file at a time: the files share port 8080 (the server examples) and two cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The port a `sh background` block's server listens on (serve's default).
const SERVER_PORT: u16 = 8080;

/// What a fence asks of the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// ` ```sh `: run, in order.
    Run,
    /// ` ```sh background `: started, waited for on port 8080, stopped after the file.
    Background,
    /// ` ```sh needs-gpu ` / ` ```sh needs-download `, ` ```python ... `: not run here.
    NotHere,
    /// ` ```text `, ` ```json `, ...: not a command.
    Shown,
}

/// A fenced block: its 1-based opening line, kind and text.
#[derive(Debug)]
struct Block {
    line: usize,
    kind: Kind,
    text: String,
}

/// Splits a Markdown file into its fenced blocks; a fence that does not say what it is, or a
/// shell fence with a tag the harness does not know, is an error naming the line.
fn blocks(path: &Path) -> Result<Vec<Block>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    let mut open: Option<(usize, Kind, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            Some((start, kind, body)) => {
                if trimmed.starts_with("```") && trimmed.trim() == "```" {
                    out.push(Block { line: *start, kind: *kind, text: std::mem::take(body) });
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let kind = fence_kind(info.trim()).map_err(|why| format!("{}:{}: {why}", path.display(), i + 1))?;
                    open = Some((i + 1, kind, String::new()));
                }
            }
        }
    }
    if let Some((start, _, _)) = open {
        return Err(format!("{}:{start}: a fence that is never closed", path.display()));
    }
    Ok(out)
}

/// The kind a fence's info string asks for.
fn fence_kind(info: &str) -> Result<Kind, String> {
    let mut words = info.split_whitespace();
    let language = words.next().unwrap_or("");
    let tags: Vec<&str> = words.collect();
    let not_here = |tags: &[&str]| tags.iter().all(|t| matches!(*t, "needs-gpu" | "needs-download"));
    match language {
        "" => Err("a fence must say what it holds (sh, python, text, json, ...)".into()),
        "bash" | "shell" | "console" | "zsh" => {
            Err(format!("```{language}: commands are ```sh (run by the tests) or ```sh needs-gpu / needs-download"))
        }
        "sh" => match tags.as_slice() {
            [] => Ok(Kind::Run),
            ["background"] => Ok(Kind::Background),
            tags if not_here(tags) => Ok(Kind::NotHere),
            _ => Err(format!("```{info}: the tags of a sh block are background, needs-gpu and needs-download")),
        },
        // Run by python/tests/test_docs_examples.py; only the tags are checked here.
        "python" => match tags.as_slice() {
            [] => Ok(Kind::NotHere),
            tags if not_here(tags) => Ok(Kind::NotHere),
            _ => Err(format!("```{info}: the tags of a python block are needs-gpu and needs-download")),
        },
        _ => Ok(Kind::Shown),
    }
}

/// README.md and every docs/*.md, sorted.
fn documentation_files() -> Vec<PathBuf> {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("reading docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The environment every block runs in.
struct Scratch {
    dir: tempfile::TempDir,
    hub: HubStandIn,
    path: String,
}

impl Scratch {
    fn new(encoder: PathBuf) -> Self {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&repo().join("examples"), &dir.path().join("examples"));
        let hub = HubStandIn::start(&[("sentence-transformers/all-MiniLM-L6-v2", encoder)]);
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_longread"));
        let path = format!("{}:{}", bin.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
        Scratch { dir, hub, path }
    }

    fn command(&self, script: &str) -> Command {
        let mut command = Command::new("bash");
        command
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(self.dir.path())
            .env("PATH", &self.path)
            .env("HF_ENDPOINT", &self.hub.endpoint)
            .env("HF_HOME", self.dir.path().join(".hf-home"))
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("LONGREAD_DEVICE")
            .stdin(Stdio::null());
        command
    }
}

/// Stops a background block's process group when the file is done (or a block failed):
/// SIGTERM, then SIGKILL for whatever is left after a grace period.
struct Background(Vec<Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            signal_group(child.id(), libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            signal_group(child.id(), libc::SIGKILL);
            let _ = child.wait();
        }
    }
}

/// Signals the process group led by `leader` (a group this harness started).
fn signal_group(leader: u32, signal: i32) {
    // SAFETY: kill(2) on a process group id; no memory is touched.
    unsafe {
        libc::kill(-(leader as i32), signal);
    }
}

/// The longest a block may run: a block that hangs (a server it started that never exits, a
/// wait on it) fails with its output instead of stalling the whole test run.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(600);

/// How a block ended, and what it printed.
struct BlockRun {
    success: bool,
    ending: String,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs a block in a process group of its own, its output in files (a process it leaves behind
/// cannot hold a pipe open), for at most [`BLOCK_TIMEOUT`]; then kills whatever of the group
/// is still running, so that no block outlives itself.
fn run_block(scratch: &Scratch, text: &str) -> BlockRun {
    use std::os::unix::process::CommandExt;
    let logs = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (logs.path().join("stdout"), logs.path().join("stderr"));
    let mut child = scratch
        .command(text)
        .process_group(0)
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("running bash");
    let deadline = Instant::now() + BLOCK_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for bash") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    signal_group(child.id(), libc::SIGKILL);
    let _ = child.wait();
    let (success, ending) = match status {
        Some(status) => (status.success(), format!("failed ({status})")),
        None => (false, format!("was stopped after {} s", BLOCK_TIMEOUT.as_secs())),
    };
    BlockRun { success, ending, stdout: std::fs::read(&out_path).unwrap(), stderr: std::fs::read(&err_path).unwrap() }
}

/// Waits until the server's `/health` answers 200 (it answers 503 while its model loads).
fn wait_for_health(port: u16, child: &mut Child, block: &str) {
    let deadline = Instant::now() + Duration::from_secs(180);
    let url = format!("http://127.0.0.1:{port}/health");
    while Instant::now() < deadline {
        if ureq::get(&url).timeout(Duration::from_secs(5)).call().is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the background block ended ({status}) before port {port} answered:\n{block}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{url} did not answer 200 within 180 s after starting:\n{block}");
}

/// Runs one documentation file's blocks; panics naming the first that fails.
fn run_file(name: &str) {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = repo().join(name);
    let blocks = blocks(&path).unwrap_or_else(|e| panic!("{e}"));
    if !blocks.iter().any(|b| matches!(b.kind, Kind::Run | Kind::Background)) {
        return;
    }
    let Some(encoder) = minilm() else { return };
    let scratch = Scratch::new(encoder);
    let mut background = Background(Vec::new());
    for block in &blocks {
        let started = Instant::now();
        match block.kind {
            Kind::Run => {
                let out = run_block(&scratch, &block.text);
                if !out.success {
                    panic!(
                        "{name}:{}: the block {}:\n{}\n--- stdout (end) ---\n{}\n--- stderr (end) ---\n{}",
                        block.line,
                        out.ending,
                        block.text,
                        tail(&out.stdout),
                        tail(&out.stderr)
                    );
                }
            }
            Kind::Background => {
                let mut command =
                    scratch.command(&format!("exec setsid bash -euo pipefail -c {}", shell_quote(&block.text)));
                let mut child = command.stdout(Stdio::null()).stderr(Stdio::inherit()).spawn().expect("starting bash");
                wait_for_health(SERVER_PORT, &mut child, &block.text);
                background.0.push(child);
            }
            Kind::NotHere | Kind::Shown => continue,
        }
        eprintln!("{name}:{}: ok in {:.1} s", block.line, started.elapsed().as_secs_f64());
    }
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Every fence of every documentation file says what it is, and every file with commands to
/// run has a test below.
#[test]
fn every_fence_is_run_or_marked() {
    let tested = TESTED.iter().map(|name| repo().join(name)).collect::<Vec<_>>();
    let mut problems = Vec::new();
    for path in documentation_files() {
        match blocks(&path) {
            Err(e) => problems.push(e),
            Ok(blocks) => {
                let runs = blocks.iter().any(|b| matches!(b.kind, Kind::Run | Kind::Background));
                if runs && !tested.contains(&path) {
                    problems.push(format!("{}: has blocks to run but no test in docs_examples.rs", path.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The files with a test of their own below.
const TESTED: &[&str] = &[
    "README.md",
    "docs/getting-started.md",
    "docs/recipes.md",
    "docs/serving.md",
    "docs/python.md",
    "docs/architecture.md",
    "docs/model-format.md",
    "docs/gpu.md",
    "docs/internals.md",
];

#[test]
fn readme() {
    run_file("README.md");
}

#[test]
fn getting_started() {
    run_file("docs/getting-started.md");
}

#[test]
fn recipes() {
    run_file("docs/recipes.md");
}

#[test]
fn serving() {
    run_file("docs/serving.md");
}

#[test]
fn python() {
    run_file("docs/python.md");
}

#[test]
fn architecture() {
    run_file("docs/architecture.md");
}

#[test]
fn model_format() {
    run_file("docs/model-format.md");
}

#[test]
fn gpu() {
    run_file("docs/gpu.md");
}

#[test]
fn internals() {
    run_file("docs/internals.md");
}

#[test]
fn fences_are_read_as_documented() {
    assert_eq!(fence_kind("sh"), Ok(Kind::Run));
    assert_eq!(fence_kind("sh background"), Ok(Kind::Background));
    assert_eq!(fence_kind("sh needs-gpu"), Ok(Kind::NotHere));
    assert_eq!(fence_kind("sh needs-gpu needs-download"), Ok(Kind::NotHere));
    assert_eq!(fence_kind("text"), Ok(Kind::Shown));
    assert!(fence_kind("").is_err());
    assert!(fence_kind("bash").is_err());
    assert!(fence_kind("sh later").is_err());
    assert!(fence_kind("python sometimes").is_err());
}

/// A block that starts a process and exits (or fails) without stopping it ends when bash
/// does: the leftover cannot hold the block's output open, and it is killed with the block.
#[test]
fn a_process_a_block_leaves_behind_neither_stalls_nor_outlives_it() {
    let scratch = Scratch::new(repo().join("examples"));
    let started = Instant::now();
    let out = run_block(&scratch, "sleep 300 & echo $! > leftover.pid; echo started; false");
    assert!(!out.success, "the block's own failure is reported");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "started");
    assert!(started.elapsed() < Duration::from_secs(60), "the block took {:?}", started.elapsed());
    let pid: i32 = std::fs::read_to_string(scratch.dir.path().join("leftover.pid")).unwrap().trim().parse().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Gone, or a zombie its new parent has yet to reap.
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = state.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'));
    assert!(!running, "the process the block left behind ({pid}) is still running: {state}");
}
