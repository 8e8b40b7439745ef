//! A real server on 127.0.0.1 (port 0) in the test process, and a real HTTP client.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use longread_server::{Server, ServerConfig};

/// `tests/fixtures/NAME` at the repository root.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// `../shared/models/all-MiniLM-L6-v2`, or `None` (with a note) when absent outside CI;
/// under `CI=true` a missing model fails the test.
pub fn minilm() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/models/all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{} is missing: CI must provide ../shared", dir.display());
    }
    eprintln!("skipping: {} not found (set CI=true to make this a failure)", dir.display());
    None
}

/// The fixture documents' texts.
pub fn documents() -> Vec<String> {
    std::fs::read_to_string(fixture("hier/documents.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["text"].as_str().unwrap().to_owned())
        .collect()
}

/// A running server; stopped (gracefully) when dropped.
pub struct TestServer {
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), longread_server::ServerError>>>,
}

impl TestServer {
    /// Starts a server with `config` (its port replaced by 0) and waits until it is ready.
    pub fn start(mut config: ServerConfig) -> Self {
        config.port = 0;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async move {
                let server = Server::bind(config).await?;
                let shutdown = async move {
                    let _ = stop_rx.await;
                };
                server.serve(shutdown, move |address| ready_tx.send(address).unwrap()).await
            })
        });
        let address = ready_rx.recv_timeout(Duration::from_secs(60)).expect("the server did not get ready");
        Self { url: format!("http://{address}"), stop: Some(stop_tx), thread: Some(thread) }
    }

    /// Stops it and returns how serving ended.
    pub fn stop(mut self) -> Result<(), longread_server::ServerError> {
        self.stop.take().map(|s| s.send(()));
        self.thread.take().unwrap().join().unwrap()
    }

    /// POSTs `body` to `path`: status and body.
    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        response(ureq::post(&format!("{}{path}", self.url)).set("Content-Type", "application/json").send_string(body))
    }

    /// POSTs a JSON value.
    pub fn post_json(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let (status, text) = self.post(path, &body.to_string());
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}")))
    }

    /// GETs `path`: status and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        response(ureq::get(&format!("{}{path}", self.url)).call())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn response(r: Result<ureq::Response, ureq::Error>) -> (u16, String) {
    match r {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("request failed: {e}"),
    }
}

/// Largest absolute difference of two equally long lists.
pub fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// The numbers of a JSON list.
pub fn numbers(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}
