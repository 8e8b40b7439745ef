//! What a request must show before any route runs (otherwise any page open in the operator's
//! browser could drive the server): a Host naming the machine on loopback, the API
//! key when one is set, a JSON body; CORS only for the origin allowed; /info without paths.

mod common;

use std::io::{Read, Write};

use common::{fixture, TestServer};
use longread_server::ServerConfig;

fn config() -> ServerConfig {
    ServerConfig { max_batch_tokens: Some(128), ..ServerConfig::new(fixture("hier/trained-bert-attention")) }
}

/// Sends one raw HTTP/1.1 request; returns the status, the headers (lower-cased) and the body.
fn raw(server: &TestServer, head: &str, body: &str) -> (u16, String, String) {
    let address = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let request = format!("{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (headers, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = headers.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, headers.to_ascii_lowercase(), body.to_owned())
}

#[test]
fn a_loopback_server_answers_only_requests_for_this_machine() {
    let server = TestServer::start(config());
    let (status, _, body) = raw(&server, "GET /info HTTP/1.1\r\nHost: rebound.example.com", "");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("\"error_type\":\"unauthorized\"") && body.contains("rebound.example.com"), "{body}");
    for host in ["localhost:8080", "127.0.0.1", "[::1]:9"] {
        let (status, _, body) = raw(&server, &format!("GET /health HTTP/1.1\r\nHost: {host}"), "");
        assert_eq!(status, 200, "{host}: {body}");
    }
}

#[test]
fn posts_must_be_declared_json() {
    let server = TestServer::start(config());
    let body = r#"{"inputs": "The committee met."}"#;
    for content_type in ["text/plain", "application/x-www-form-urlencoded", ""] {
        let header = if content_type.is_empty() { String::new() } else { format!("\r\nContent-Type: {content_type}") };
        let (status, _, text) = raw(&server, &format!("POST /classify HTTP/1.1\r\nHost: localhost{header}"), body);
        assert_eq!(status, 415, "{content_type}: {text}");
        assert!(text.contains("Content-Type: application/json"), "{text}");
    }
    let (status, _, text) = raw(
        &server,
        "POST /classify HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json; charset=utf-8",
        body,
    );
    assert_eq!(status, 200, "{text}");
}

#[test]
fn an_api_key_guards_every_route_but_health() {
    let server = TestServer::start(ServerConfig { api_key: Some("s3cret".into()), ..config() });
    let post = |auth: &str| {
        raw(
            &server,
            &format!("POST /classify HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json{auth}"),
            r#"{"inputs": "The committee met."}"#,
        )
    };
    let (status, _, body) = post("");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    assert_eq!(post("\r\nAuthorization: Bearer s3cre").0, 401);
    assert_eq!(post("\r\nAuthorization: Bearer s3cret!").0, 401);
    assert_eq!(post("\r\nAuthorization: Bearer s3cret").0, 200);
    assert_eq!(raw(&server, "GET /info HTTP/1.1\r\nHost: localhost", "").0, 401);
    assert_eq!(raw(&server, "GET /health HTTP/1.1\r\nHost: localhost", "").0, 200);
    assert_eq!(raw(&server, "GET /ping HTTP/1.1\r\nHost: localhost", "").0, 200, "SageMaker's health alias");
    // The aliases of the guarded routes are guarded too.
    let root = "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json";
    assert_eq!(raw(&server, root, r#"{"inputs": "The committee met."}"#).0, 401);
}

#[test]
fn cors_headers_go_to_the_allowed_origin_only() {
    let plain = TestServer::start(config());
    let (_, headers, _) = raw(&plain, "GET /health HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.example", "");
    assert!(!headers.contains("access-control-allow-origin"), "{headers}");
    let (status, _, _) =
        raw(&plain, "OPTIONS /classify HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.example", "");
    assert_ne!(status, 204);
    drop(plain);

    let server = TestServer::start(ServerConfig {
        cors_allow_origin: vec!["https://app.example".into(), "http://localhost:3000".into()],
        ..config()
    });
    let preflight = "OPTIONS /classify HTTP/1.1\r\nHost: localhost\r\nOrigin: https://app.example\r\n\
                     Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type";
    let (status, headers, _) = raw(&server, preflight, "");
    assert_eq!(status, 204);
    assert!(headers.contains("access-control-allow-origin: https://app.example"), "{headers}");
    assert!(headers.contains("access-control-allow-headers: content-type"), "{headers}");
    let (status, headers, _) =
        raw(&server, "GET /health HTTP/1.1\r\nHost: localhost\r\nOrigin: https://app.example", "");
    assert_eq!(status, 200);
    assert!(headers.contains("access-control-allow-origin: https://app.example"), "{headers}");
    let (_, headers, _) = raw(&server, "GET /health HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.example", "");
    assert!(!headers.contains("access-control-allow-origin"), "{headers}");
    // The second origin, sent with its host in capitals (origins compare without case).
    let (_, headers, _) = raw(&server, "GET /health HTTP/1.1\r\nHost: localhost\r\nOrigin: http://LOCALHOST:3000", "");
    assert!(headers.contains("access-control-allow-origin: http://localhost:3000"), "{headers}");
    let (_, headers, _) = raw(&server, "GET /health HTTP/1.1\r\nHost: localhost\r\nOrigin: http://localhost:3001", "");
    assert!(!headers.contains("access-control-allow-origin"), "{headers}");
}

#[test]
fn info_shows_model_names_not_paths_unless_asked() {
    let model = fixture("hier/trained-bert-attention");
    let server = TestServer::start(config());
    let (_, info) = server.get("/info");
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["model_dir"], "trained-bert-attention");
    assert_eq!(info["model"]["model_dir"], "trained-bert-attention");
    assert!(!info.to_string().contains(model.parent().unwrap().to_str().unwrap()), "{info}");
    drop(server);
    let server = TestServer::start(ServerConfig { info_paths: true, ..config() });
    let (_, info) = server.get("/info");
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["model_dir"], model.display().to_string());
}

/// Reads until the server closes the connection or `limit` passes; returns what came and
/// whether it closed.
fn read_until_closed(stream: &mut std::net::TcpStream, limit: std::time::Duration) -> (String, bool) {
    stream.set_read_timeout(Some(std::time::Duration::from_millis(100))).unwrap();
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    let mut buffer = [0u8; 4096];
    while started.elapsed() < limit {
        match stream.read(&mut buffer) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&buffer[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), false)
}

/// Without request timeouts and a connection cap, 300 clients sending one byte every 0.5 s were
/// never closed, and with few file descriptors slow clients made normal requests fail.
#[test]
fn slow_and_silent_clients_are_disconnected_and_connections_are_capped() {
    let timeout = std::time::Duration::from_secs(1);
    let server = TestServer::start(ServerConfig { request_timeout: timeout, max_connections: 3, ..config() });
    let address = server.url.trim_start_matches("http://").to_owned();
    // Silent: nothing sent.
    let mut silent = std::net::TcpStream::connect(&address).unwrap();
    // Trickling headers: a byte every 200 ms, never finished.
    let mut trickle = std::net::TcpStream::connect(&address).unwrap();
    let started = std::time::Instant::now();
    let mut cut_off = false;
    for byte in b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
        if trickle.write_all(&[*byte]).is_err() {
            cut_off = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let closed = cut_off || read_until_closed(&mut trickle, std::time::Duration::from_secs(10)).1;
    assert!(closed, "a client trickling its headers is disconnected");
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
    let (_, closed) = read_until_closed(&mut silent, std::time::Duration::from_secs(10));
    assert!(closed, "a silent client is disconnected");

    // A body that stalls is answered 408 in the errors' shape.
    let mut stalled = std::net::TcpStream::connect(&address).unwrap();
    stalled
        .write_all(b"POST /classify HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    let (answer, _) = read_until_closed(&mut stalled, std::time::Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--request-timeout") && answer.contains("\"error_type\""), "{answer}");

    // Three connections held open: a fourth is closed at once; once they go, requests work.
    let held: Vec<_> = (0..3).map(|_| std::net::TcpStream::connect(&address).unwrap()).collect();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut fourth = std::net::TcpStream::connect(&address).unwrap();
    let (answer, closed) = read_until_closed(&mut fourth, std::time::Duration::from_millis(800));
    assert!(closed && answer.is_empty(), "over the cap: closed without an answer ({answer:?})");
    drop(held);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (status, _, body) = raw(&server, "GET /health HTTP/1.1\r\nHost: localhost", "");
    assert_eq!(status, 200, "{body}");
}
