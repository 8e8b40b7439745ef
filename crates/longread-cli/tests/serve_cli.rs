//! `longread serve` as a user runs it: the real binary on 127.0.0.1 (port 0), real HTTP
//! clients. 32 concurrent clients get what `longread predict` writes; over
//! --max-concurrent-requests the server answers 429 and goes on; SIGTERM lets the request in
//! flight finish; a client that goes away cancels its document's remaining chunks.

mod common;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{fixture, json_lines, longread, post, Served};
use serde_json::{json, Value};

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// A classifier on the tiny encoder that reads up to 100,000 chunks of 16 tokens: long
/// documents take it seconds (with one chunk per batch).
fn slow_model(dir: &std::path::Path) -> String {
    let out = dir.join("slow");
    let tiny = fixture("tiny-bert");
    let made = longread(&[
        "init",
        "--encoder",
        tiny.to_str().unwrap(),
        "--labels",
        "a,b",
        "--out",
        out.to_str().unwrap(),
        "--max-chunks",
        "100000",
        "--chunk-size",
        "16",
        "--stride",
        "0",
    ]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    out.to_str().unwrap().to_owned()
}

/// A document of `words` words.
fn long_text(words: usize) -> String {
    (0..words).map(|i| format!("word{}", i % 50)).collect::<Vec<_>>().join(" ")
}

#[test]
fn thirty_two_concurrent_clients_get_what_predict_writes() {
    let model = fixture("hier/trained-bert-attention");
    let documents = fixture("hier/documents.jsonl");
    let predicted = longread(&["predict", "--model", model.to_str().unwrap(), "--input", documents.to_str().unwrap()]);
    assert!(predicted.status.success());
    let expected = json_lines(&predicted.stdout);
    let texts: Vec<String> = json_lines(&std::fs::read(&documents).unwrap())
        .iter()
        .map(|d| d["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(expected.len(), texts.len());
    let served = Served::start(&["--model", model.to_str().unwrap(), "--max-batch-tokens", "64"]);
    let clients: Vec<_> = (0..32)
        .map(|c| {
            let (url, text) = (served.url.clone(), texts[c % texts.len()].clone());
            std::thread::spawn(move || (c, post(&url, "/classify", &json!({ "inputs": text }), None).unwrap()))
        })
        .collect();
    for client in clients {
        let (c, (status, got)) = client.join().unwrap();
        assert_eq!(status, 200, "{got}");
        let want = &expected[c % texts.len()];
        assert_eq!(got["label"], want["label"]);
        assert!(max_diff(&numbers(&got["logits"]), &numbers(&want["logits"])) <= 1e-6);
        let (got_chunks, want_chunks) = (got["chunks"].as_array().unwrap(), want["chunks"].as_array().unwrap());
        assert_eq!(got_chunks.len(), want_chunks.len());
        for (g, w) in got_chunks.iter().zip(want_chunks) {
            assert_eq!((&g["start"], &g["end"], &g["index"]), (&w["start"], &w["end"], &w["index"]));
            assert!((g["attention"].as_f64().unwrap() - w["attention"].as_f64().unwrap()).abs() <= 1e-6);
        }
        for (label, p) in want["scores"].as_object().unwrap() {
            assert!((got["scores"][label].as_f64().unwrap() - p.as_f64().unwrap()).abs() <= 1e-6);
        }
    }
}

#[test]
fn over_the_limit_is_429_and_the_server_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let model = slow_model(tmp.path());
    let served = Served::start(&["--model", &model, "--max-batch-tokens", "16", "--max-concurrent-requests", "1"]);
    let url = served.url.clone();
    let slow = std::thread::spawn(move || post(&url, "/predict", &json!({ "inputs": long_text(40_000) }), None));
    served.wait_for("longread_requests_in_flight", 1.0);
    let (status, body) = served.post("/predict", &json!({ "inputs": "short" }));
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error_type"], "overloaded");
    let (status, _) = slow.join().unwrap().unwrap();
    assert_eq!(status, 200);
    let (status, _) = served.post("/predict", &json!({ "inputs": "short" }));
    assert_eq!(status, 200);
}

#[test]
fn sigterm_lets_the_request_in_flight_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let model = slow_model(tmp.path());
    let mut served = Served::start(&["--model", &model, "--max-batch-tokens", "16"]);
    let url = served.url.clone();
    let slow = std::thread::spawn(move || post(&url, "/predict", &json!({ "inputs": long_text(40_000) }), None));
    served.wait_for("longread_requests_in_flight", 1.0);
    let killed = Command::new("kill").args(["-TERM", &served.child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let (status, body) = slow.join().unwrap().unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.as_array().unwrap().len(), 2);
    let started = Instant::now();
    let exit = loop {
        if let Some(status) = served.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the server did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
}

/// Without a deadline, SIGTERM drained for 43 s. With --shutdown-timeout 1 a request
/// that would take much longer is dropped and the server exits soon after the signal.
#[test]
fn sigterm_drains_for_at_most_the_shutdown_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let model = slow_model(tmp.path());
    let flags =
        ["--model", &model, "--max-batch-tokens", "16", "--shutdown-timeout", "1", "--max-input-chars", "20000000"];
    let mut served = Served::start(&flags);
    let url = served.url.clone();
    // The model's cap of 100,000 chunks, one per batch: seconds of work even on a fast CPU (the
    // 14,000 chunks of 200,000 words took under the 1 s deadline on an AMD Zen 5).
    let slow = std::thread::spawn(move || post(&url, "/predict", &json!({ "inputs": long_text(2_000_000) }), None));
    served.wait_until("longread_queue_units", |units| units > 0.0);
    let signalled = Instant::now();
    let killed = Command::new("kill").args(["-TERM", &served.child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let exit = loop {
        if let Some(status) = served.child.try_wait().unwrap() {
            break status;
        }
        assert!(signalled.elapsed() < Duration::from_secs(20), "the server did not exit within its deadline");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "{exit:?}");
    assert!(slow.join().unwrap().is_err(), "the dropped request gets no answer");
}

#[test]
fn a_client_that_goes_away_cancels_its_remaining_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let model = slow_model(tmp.path());
    let served = Served::start(&["--model", &model, "--max-batch-tokens", "16"]);
    // 200,000 tokens: about 14,000 chunks, seconds of work. The client sends the request by
    // hand and hangs up as soon as its chunks are queued: no timing assumption.
    let body = json!({ "inputs": long_text(200_000) }).to_string();
    let address = served.url.trim_start_matches("http://").to_owned();
    let mut client = std::net::TcpStream::connect(&address).unwrap();
    let head = format!(
        "POST /predict HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).unwrap();
    client.write_all(body.as_bytes()).unwrap();
    served.wait_until("longread_queue_units", |units| units > 0.0);
    drop(client);
    served.wait_for("longread_queue_documents", 0.0);
    let encoded = served.metric("longread_batch_units_sum");
    assert!(encoded < 12_000.0, "{encoded} chunks encoded for a cancelled document");
    assert_eq!(served.metric("longread_documents_total"), 0.0);
    // Aborted requests are counted in the metrics.
    served.wait_until("longread_requests_cancelled_total{route=\"/predict\"}", |n| n == 1.0);
    assert_eq!(served.metric("longread_requests_total{route=\"/predict\",status=\"499\"}"), 1.0);
    let (status, _) = served.post("/predict", &json!({ "inputs": "still serving" }));
    assert_eq!(status, 200);
}

/// Without a budget, memory grows with the text of every request in flight (16 concurrent
/// 2M-character requests: 4 GB). Over --max-inflight-text-bytes a request is answered 429 (with
/// Retry-After) while a long one is in flight; alone, a request is served whatever its size.
#[test]
fn text_over_the_in_flight_budget_is_429_and_a_lone_request_is_served() {
    let tmp = tempfile::tempdir().unwrap();
    let model = slow_model(tmp.path());
    let served = Served::start(&["--model", &model, "--max-batch-tokens", "16", "--max-inflight-text-bytes", "200000"]);
    let url = served.url.clone();
    // ~1.6 MB of text: over the budget, admitted because it is alone, and in flight for a
    // second or more even on a fast CPU (under the default 2,000,000 characters per input).
    let slow = std::thread::spawn(move || post(&url, "/predict", &json!({ "inputs": long_text(240_000) }), None));
    served.wait_for("longread_requests_in_flight", 1.0);
    let refused = ureq::post(&format!("{}/predict", served.url)).send_json(json!({ "inputs": "short" }));
    let Err(ureq::Error::Status(429, response)) = refused else { panic!("expected 429: {refused:?}") };
    assert_eq!(response.header("retry-after"), Some("1"));
    let body: Value = response.into_json().unwrap();
    assert_eq!(body["error_type"], "overloaded");
    assert!(body["error"].as_str().unwrap().contains("--max-inflight-text-bytes"), "{body}");
    let (status, _) = slow.join().unwrap().unwrap();
    assert_eq!(status, 200);
    let (status, _) = served.post("/predict", &json!({ "inputs": "short" }));
    assert_eq!(status, 200, "the budget is free again");
    let info: Value = ureq::get(&format!("{}/info", served.url)).call().unwrap().into_json().unwrap();
    assert_eq!(info["limits"]["max_inflight_text_bytes"], 200000);
}

/// Without a deadline under overload, 48 of 51 long documents ran past their clients'
/// timeouts, their chunks encoded for nobody. Past --max-queue-time a request is answered 503,
/// its remaining chunks leave the queue, and the metrics count it.
#[test]
fn a_request_past_the_max_queue_time_is_503_and_its_work_is_cancelled() {
    let tmp = tempfile::tempdir().unwrap();
    let model = slow_model(tmp.path());
    let served = Served::start(&["--model", &model, "--max-batch-tokens", "16", "--max-queue-time", "0.5"]);
    // ~14,000 chunks, one per batch: far more than half a second of work.
    let started = Instant::now();
    let (status, body) = served.post("/predict", &json!({ "inputs": long_text(200_000) }));
    assert_eq!(status, 503, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--max-queue-time"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(20), "answered at the deadline, not after the work");
    served.wait_for("longread_queue_documents", 0.0);
    assert!(served.metric("longread_batch_units_sum") < 12_000.0, "the rest of its chunks were not encoded");
    assert_eq!(served.metric("longread_requests_deadline_expired_total"), 1.0);
    assert_eq!(served.metric("longread_requests_total{route=\"/predict\",status=\"503\"}"), 1.0);
    let (status, _) = served.post("/predict", &json!({ "inputs": "still serving" }));
    assert_eq!(status, 200);
}

/// `serve --vector-cache DIR`: the first request fills the cache with its documents' chunk
/// vectors, the same documents asked again get the same answers from it, and a request one
/// of whose texts cannot be tokenized is refused before any of its documents is queued (the
/// cache gains nothing from it).
#[test]
fn serve_with_a_vector_cache_fills_it_once_and_answers_from_it() {
    let model = fixture("hier/trained-bert-attention");
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("vectors");
    let served = Served::start(&["--model", model.to_str().unwrap(), "--vector-cache", cache.to_str().unwrap()]);
    let files = || walk(&cache);
    let texts = json!(["The committee met on Tuesday to discuss the budget.", "A second, different document."]);
    let (status, first) = post(&served.url, "/classify", &json!({ "inputs": texts }), None).unwrap();
    assert_eq!(status, 200, "{first}");
    let filled = files();
    assert!(!filled.is_empty(), "the first request kept nothing in {}", cache.display());
    let (status, again) = post(&served.url, "/classify", &json!({ "inputs": texts }), None).unwrap();
    assert_eq!(status, 200, "{again}");
    assert_eq!(again, first, "answers from the cache differ from the encoder's");
    assert_eq!(files(), filled, "asking again wrote to the cache");

    let refused = json!(["A third document, never seen before.", "   "]);
    let (status, body) = post(&served.url, "/classify", &json!({ "inputs": refused }), None).unwrap();
    assert_eq!(status, 422, "{body}");
    assert!(body["error"].as_str().unwrap().contains("`inputs[1]`"), "{body}");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(files(), filled, "a refused request's readable document was encoded and kept");
}

/// Every file under `dir`, sorted.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Waits until /metrics counts one reload that ended `result` (the series appears with it).
fn reloaded(served: &Served, result: &str) {
    let line = format!("longread_reloads_total{{result=\"{result}\"}} 1");
    let started = Instant::now();
    loop {
        let text = ureq::get(&format!("{}/metrics", served.url)).call().unwrap().into_string().unwrap();
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no `{line}` in:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGHUP reloads the model directory (a calibration or decision rule changed): new requests
/// get the new probabilities, a request in flight finishes, and a reload that fails keeps the
/// models already loaded. (SIGHUP stopped the server before.)
#[test]
fn sighup_reloads_the_models_and_a_failed_reload_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let model = slow_model(tmp.path());
    let served = Served::start(&["--model", &model, "--max-batch-tokens", "16"]);
    let scores = |body: &Value| vec![body["scores"]["a"].as_f64().unwrap(), body["scores"]["b"].as_f64().unwrap()];
    let (status, before) = served.post("/classify", &json!({ "inputs": "a short text" }));
    assert_eq!(status, 200, "{before}");
    let before = scores(&before);

    let url = served.url.clone();
    let slow = std::thread::spawn(move || post(&url, "/predict", &json!({ "inputs": long_text(20_000) }), None));
    served.wait_for("longread_requests_in_flight", 1.0);
    std::fs::write(std::path::Path::new(&model).join("calibration.json"), r#"{"temperature": 2.0}"#).unwrap();
    let hangup = |pid: u32| assert!(Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap().success());
    hangup(served.child.id());
    reloaded(&served, "ok");
    let (status, slow) = slow.join().unwrap().unwrap();
    assert_eq!(status, 200, "the request in flight finishes: {slow}");

    let (_, after) = served.post("/classify", &json!({ "inputs": "a short text" }));
    let halved: Vec<f64> = before.iter().map(|p| (p.ln() / 2.0).exp()).collect();
    let sum: f64 = halved.iter().sum();
    let want: Vec<f64> = halved.iter().map(|p| p / sum).collect();
    assert!(max_diff(&scores(&after), &want) < 1e-5, "{after} vs {want:?}");
    let info = ureq::get(&format!("{}/info", served.url)).call().unwrap().into_json::<Value>().unwrap();
    assert_eq!(info["model"]["calibration"]["temperature"], 2.0, "{info}");

    // A broken file: the reload fails and the models loaded before keep serving.
    std::fs::write(std::path::Path::new(&model).join("calibration.json"), "{").unwrap();
    hangup(served.child.id());
    reloaded(&served, "failed");
    let (status, still) = served.post("/classify", &json!({ "inputs": "a short text" }));
    assert_eq!(status, 200, "{still}");
    assert!(max_diff(&scores(&still), &want) < 1e-6, "{still}");
}
