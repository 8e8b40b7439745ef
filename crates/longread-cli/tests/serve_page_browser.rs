//! The server's page in a real browser: Debian's chromium (headless) loads `/?text=...`, the
//! page posts the text to /report and shows the report; the label that /classify gives must
//! appear in the page's DOM. Without chromium the test is skipped with a note, unless
//! `CI=true` (CI installs chromium: see .ci/run).

mod common;

use std::process::{Command, Stdio};

use common::{fixture, Served};

/// Chromium's command, if installed.
fn chromium() -> Option<String> {
    let found = ["chromium", "chromium-browser", "google-chrome"].into_iter().find(|name| {
        Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if found.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("chromium is not installed: CI must install it (apt-get install chromium; see .ci/run)");
        }
        eprintln!("skipping: chromium is not installed (apt-get install chromium; CI=true makes this a failure)");
    }
    found.map(str::to_owned)
}

/// Percent-encodes a query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn the_page_classifies_a_document_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let model = fixture("hier/trained-bert-attention");
    let server = Served::start(&["--model", model.to_str().unwrap()]);
    let url = server.url.clone();

    let text = "Rain is expected over the weekend, with strong winds along the coast and more.";
    let classified: serde_json::Value = ureq::post(&format!("{url}/classify"))
        .send_json(serde_json::json!({ "inputs": text }))
        .unwrap()
        .into_json()
        .unwrap();
    let label = classified["label"].as_str().unwrap().to_owned();

    let profile = tempfile::tempdir().unwrap();
    let page = Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.path().display()),
            "--virtual-time-budget=20000",
            "--dump-dom",
            &format!("{url}/?text={}", encode(text)),
        ])
        .output()
        .unwrap();
    drop(server);
    let dom = String::from_utf8_lossy(&page.stdout);
    assert!(page.status.success(), "chromium failed: {}", String::from_utf8_lossy(&page.stderr));
    let shown = dom.split("id=\"result\"").nth(1).unwrap_or_else(|| panic!("no result element in\n{dom}"));
    assert!(shown.contains(&format!("class=\"label\">{label}<")), "the label {label} is not shown:\n{dom}");
    assert!(shown.contains("Rain is expected"), "the shaded text is not shown:\n{dom}");
}
