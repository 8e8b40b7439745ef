//! `predict` reads its documents as it classifies them: results come out while standard input
//! is still open (a large input was read whole before anything was classified), in the order
//! and with the values of the same input read from a file; an input without documents writes
//! nothing.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{fixture, json_lines, longread};

/// More documents than one group of the route holds (256 chunks), so that a group is
/// classified and written before the input ends.
fn documents(n: usize) -> String {
    (0..n).map(|i| format!("{{\"id\": {i}, \"text\": \"Rain is expected on day {i}, with winds.\"}}\n")).collect()
}

#[test]
fn results_come_out_while_standard_input_is_still_open() {
    let model = fixture("hier/trained-bert-attention");
    let input = documents(600);
    let mut child = Command::new(env!("CARGO_BIN_EXE_longread"))
        .args(["predict", "--model", model.to_str().unwrap(), "--input", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    stdin.flush().unwrap();
    // Standard input stays open: the first line must come before it is closed.
    let (lines_tx, lines) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let first = lines.recv_timeout(Duration::from_secs(120));
    drop(stdin);
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let first = first.expect("no result before standard input was closed: the input was read whole first");
    assert!(status.success());
    let mut streamed: Vec<String> = vec![first];
    streamed.extend(lines.try_iter());
    assert_eq!(streamed.len(), 600);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docs.jsonl");
    std::fs::write(&path, &input).unwrap();
    let from_file = longread(&["predict", "--model", model.to_str().unwrap(), "--input", path.to_str().unwrap()]);
    assert!(from_file.status.success());
    let streamed = json_lines(streamed.join("\n").as_bytes());
    assert_eq!(streamed, json_lines(&from_file.stdout), "same results, in input order");
}

/// Standard input without a document is an error, and the table or CSV writes no header.
#[test]
fn an_input_without_documents_writes_nothing() {
    let model = fixture("hier/trained-bert-attention");
    for format in ["csv", "table", "json"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_longread"))
            .args(["predict", "--model", model.to_str().unwrap(), "--input", "-", "--format", format])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"\n\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{format}");
        assert!(out.stdout.is_empty(), "{format}: {}", String::from_utf8_lossy(&out.stdout));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("<stdin>: no input records"), "{stderr}");
    }
}

/// With --strict, a bad line of a file stops the run before anything is classified or written,
/// though the documents are read as they are classified.
#[test]
fn strict_stops_at_a_files_bad_line_before_writing() {
    let model = fixture("hier/trained-bert-attention");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("docs.jsonl");
    std::fs::write(&path, format!("{}{{oops\n", documents(300))).unwrap();
    let out = longread(&["predict", "--model", model.to_str().unwrap(), "--input", path.to_str().unwrap(), "--strict"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing written before the bad line was found");
    assert!(String::from_utf8_lossy(&out.stderr).contains("docs.jsonl:301: invalid JSON"));
}
