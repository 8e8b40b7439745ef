//! `predict` reads its documents as it classifies them: results come out while standard input
//! is still open (a large input was read whole before anything was classified), in the order
//! and with the values of the same input read from a file; an input without documents writes
//! nothing. `embed` reads, embeds and writes its input a window at a time.

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

/// `embed` reads, embeds and writes 4,096 texts at a time: an input longer than that keeps its
/// order and ids across the window's edge, and a text gets the vector it gets on its own.
#[test]
fn embed_keeps_order_and_vectors_across_its_windows() {
    let model = fixture("tiny-bert");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("texts.jsonl");
    let text = |i: usize| format!("Report {i}: the committee met {} times.", i % 7);
    let all: String = (0..4100).map(|i| format!("{{\"text\": \"{}\", \"n\": {i}}}\n", text(i))).collect();
    std::fs::write(&input, all).unwrap();
    let out = longread(&["embed", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stdout);
    assert_eq!(lines.len(), 4100);
    assert!(lines.iter().enumerate().all(|(i, l)| l["id"] == i && l["n"] == i), "ids and fields in input order");
    let last = dir.path().join("last.jsonl");
    std::fs::write(&last, (4094..4100).map(|i| format!("{{\"text\": \"{}\"}}\n", text(i))).collect::<String>())
        .unwrap();
    let alone = longread(&["embed", "--model", model.to_str().unwrap(), "--input", last.to_str().unwrap()]);
    for (i, line) in json_lines(&alone.stdout).iter().enumerate() {
        let (a, b) = (line["embedding"].as_array().unwrap(), lines[4094 + i]["embedding"].as_array().unwrap());
        let diff = a.iter().zip(b).map(|(x, y)| (x.as_f64().unwrap() - y.as_f64().unwrap()).abs()).fold(0.0, f64::max);
        assert!(diff < 1e-5, "text {}: {diff}", 4094 + i);
    }
}

/// `embed` takes a directory of `.txt` files (one text each, id = file name), and an empty
/// text is an error naming where it is, with nothing written.
#[test]
fn embed_reads_text_files_and_refuses_an_empty_text() {
    let model = fixture("tiny-bert");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.txt"), "Rain on the coast.").unwrap();
    std::fs::write(dir.path().join("a.txt"), "The committee met.").unwrap();
    let out = longread(&["embed", "--model", model.to_str().unwrap(), "--input", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ids: Vec<_> = json_lines(&out.stdout).iter().map(|l| l["id"].clone()).collect();
    assert_eq!(ids, ["a.txt", "b.txt"]);
    std::fs::write(dir.path().join("c.txt"), " \n").unwrap();
    let out = longread(&["embed", "--model", model.to_str().unwrap(), "--input", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(": c.txt: \"text\" is empty"), "{stderr}");
    // One text is counted as one ("embedded 1 texts" before).
    std::fs::remove_file(dir.path().join("c.txt")).unwrap();
    std::fs::remove_file(dir.path().join("b.txt")).unwrap();
    let out = longread(&["embed", "--model", model.to_str().unwrap(), "--input", dir.path().to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("embedded 1 text ("), "{stderr}");
}
