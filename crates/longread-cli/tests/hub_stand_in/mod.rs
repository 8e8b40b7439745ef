//! A local stand-in for the Hugging Face Hub's file routes, so that the real download code
//! runs in tests without a network: `HF_ENDPOINT=http://127.0.0.1:PORT`.
//!
//! It answers what `hf-hub` asks of huggingface.co: `GET /{repo}/resolve/{revision}/{file}`
//! (with `Range`, as a ranged request for the metadata and for the body), with the headers the
//! Hub sends (`x-repo-commit`, `etag`, `content-range`), and 404 for a file the repository does
//! not have. Each repository is a local directory.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The commit every file of a stand-in repository claims to be at.
pub const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// A running stand-in; it serves until the test process ends.
pub struct HubStandIn {
    /// `http://127.0.0.1:PORT`, for `HF_ENDPOINT`.
    pub endpoint: String,
    requests: Arc<AtomicUsize>,
}

impl HubStandIn {
    /// Serves each `(repo id, directory)` pair.
    pub fn start(repos: &[(&str, PathBuf)]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the Hub stand-in");
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let repos: Arc<BTreeMap<String, PathBuf>> =
            Arc::new(repos.iter().map(|(id, dir)| (id.to_string(), dir.clone())).collect());
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let repos = repos.clone();
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &repos, &counter);
                });
            }
        });
        HubStandIn { endpoint, requests }
    }

    /// How many file requests it has answered (200, 206 or 404).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// One connection: requests until the client closes it.
fn serve(stream: TcpStream, repos: &BTreeMap<String, PathBuf>, counter: &AtomicUsize) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut range = None;
        let mut body_len = 0usize;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header)?;
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            match name.trim().to_ascii_lowercase().as_str() {
                "range" => range = parse_range(value.trim()),
                "content-length" => body_len = value.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
        let mut body = vec![0; body_len];
        reader.read_exact(&mut body)?;
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or("");
        let target = parts.next().unwrap_or("");
        counter.fetch_add(1, Ordering::SeqCst);
        let file = lookup(repos, target);
        let head = method == "HEAD";
        match file.and_then(|path| std::fs::read(path).ok()) {
            None => respond(&mut stream, "404 Not Found", &[], b"Entry not found", head)?,
            Some(bytes) => {
                let etag = format!("\"{:016x}{:08x}\"", fingerprint(&bytes), bytes.len());
                let total = bytes.len();
                let mut headers = vec![
                    ("x-repo-commit".to_string(), COMMIT.to_string()),
                    ("etag".to_string(), etag),
                    ("accept-ranges".to_string(), "bytes".to_string()),
                ];
                match range {
                    Some((start, end)) if start < total => {
                        let end = end.unwrap_or(total - 1).min(total - 1);
                        headers.push(("content-range".to_string(), format!("bytes {start}-{end}/{total}")));
                        respond(&mut stream, "206 Partial Content", &headers, &bytes[start..=end], head)?;
                    }
                    _ => respond(&mut stream, "200 OK", &headers, &bytes, head)?,
                }
            }
        }
    }
}

/// `/{owner}/{name}/resolve/{revision}/{file}` (or `/{name}/resolve/...`) → the local file.
fn lookup(repos: &BTreeMap<String, PathBuf>, target: &str) -> Option<PathBuf> {
    let path = target.split('?').next()?;
    let (repo, rest) = path.trim_start_matches('/').split_once("/resolve/")?;
    let (_revision, file) = rest.split_once('/')?;
    if file.split('/').any(|part| part == ".." || part.is_empty()) {
        return None;
    }
    let local = repos.get(repo)?.join(file);
    local.is_file().then_some(local)
}

/// `bytes=START-[END]`.
fn parse_range(value: &str) -> Option<(usize, Option<usize>)> {
    let (start, end) = value.strip_prefix("bytes=")?.split_once('-')?;
    Some((start.parse().ok()?, end.parse().ok()))
}

/// A content fingerprint for the etag (FNV-1a; the Hub sends a SHA-256 for weights, but any
/// stable tag serves the client's cache).
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    headers: &[(String, String)],
    body: &[u8],
    head: bool,
) -> std::io::Result<()> {
    let mut text = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes())?;
    if !head {
        stream.write_all(body)?;
    }
    stream.flush()
}
