//! `--model ORG/NAME` downloads from the Hugging Face Hub: the real download code runs against
//! a local stand-in for the Hub's file routes (`HF_ENDPOINT`), into a cache of the test's own
//! (`HF_HOME`), and offline mode (`HF_HUB_OFFLINE=1`) reads that cache alone.

mod common;
mod hub_stand_in;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_clean_failure, fixture};
use hub_stand_in::{HubStandIn, COMMIT};

/// Runs `longread ARGS` with the Hub at `endpoint` and the cache under `home`.
fn longread_hub(args: &[&str], endpoint: &str, home: &Path, offline: bool) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_longread"));
    command.args(args).env("HF_ENDPOINT", endpoint).env("HF_HOME", home).env_remove("HF_HUB_CACHE");
    if offline {
        command.env("HF_HUB_OFFLINE", "1");
    } else {
        command.env_remove("HF_HUB_OFFLINE");
    }
    command.output().expect("running longread")
}

fn snapshot(home: &Path, repo: &str) -> PathBuf {
    home.join("hub").join(format!("models--{}", repo.replace('/', "--"))).join("snapshots").join(COMMIT)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_hub_id_is_downloaded_into_the_cache_and_then_read_offline() {
    let hub = HubStandIn::start(&[("test-org/tiny-bert", fixture("tiny-bert"))]);
    let home = tempfile::tempdir().unwrap();
    let out = longread_hub(&["inspect", "--model", "test-org/tiny-bert"], &hub.endpoint, home.path(), false);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("bert"), "{shown}");
    let snapshot = snapshot(home.path(), "test-org/tiny-bert");
    for file in ["config.json", "model.safetensors", "tokenizer.json"] {
        let cached = std::fs::read(snapshot.join(file)).unwrap_or_else(|e| panic!("{file} not cached: {e}"));
        assert_eq!(cached, std::fs::read(fixture("tiny-bert").join(file)).unwrap(), "{file} differs");
    }
    let asked = hub.requests();
    assert!(asked > 0);

    // Offline, with the Hub unreachable: the cache alone serves, and nothing is asked.
    let out = longread_hub(&["inspect", "--model", "test-org/tiny-bert"], "http://127.0.0.1:9", home.path(), true);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(hub.requests(), asked);

    // Online again, the cached files are used as they are (hf-hub's `get`: cache first).
    let out = longread_hub(&["inspect", "--model", "test-org/tiny-bert"], &hub.endpoint, home.path(), false);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_model_trained_on_a_hub_id_predicts() {
    let hub = HubStandIn::start(&[("test-org/tiny-bert", fixture("tiny-bert"))]);
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let model = work.path().join("m");
    let out = longread_hub(
        &[
            "init",
            "--encoder",
            "test-org/tiny-bert",
            "--labels",
            "a,b",
            "--chunk-size",
            "32",
            "--out",
            model.to_str().unwrap(),
        ],
        &hub.endpoint,
        home.path(),
        false,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let input = work.path().join("docs.jsonl");
    std::fs::write(&input, "{\"id\": \"x\", \"text\": \"A short document.\"}\n").unwrap();
    let out = longread_hub(
        &["predict", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()],
        "http://127.0.0.1:9",
        home.path(),
        true,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["id"], "x");
}

#[test]
fn sharded_weights_are_downloaded_shard_by_shard() {
    let hub = HubStandIn::start(&[("test-org/sharded", fixture("tiny-bert-sharded"))]);
    let home = tempfile::tempdir().unwrap();
    let out = longread_hub(&["inspect", "--model", "test-org/sharded"], &hub.endpoint, home.path(), false);
    assert!(out.status.success(), "{}", stderr(&out));
    let snapshot = snapshot(home.path(), "test-org/sharded");
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture("tiny-bert-sharded").join("model.safetensors.index.json")).unwrap(),
    )
    .unwrap();
    for shard in index["weight_map"].as_object().unwrap().values() {
        assert!(snapshot.join(shard.as_str().unwrap()).is_file(), "{shard} not cached");
    }
}

#[test]
fn offline_with_nothing_cached_says_so() {
    let home = tempfile::tempdir().unwrap();
    let out = longread_hub(&["inspect", "--model", "test-org/tiny-bert"], "http://127.0.0.1:9", home.path(), true);
    assert_clean_failure(&out, "HF_HUB_OFFLINE is set and the cache");
    assert_clean_failure(&out, "test-org/tiny-bert");
}

#[test]
fn a_repository_the_hub_does_not_have_is_named() {
    let hub = HubStandIn::start(&[]);
    let home = tempfile::tempdir().unwrap();
    let out = longread_hub(&["inspect", "--model", "nobody/nothing"], &hub.endpoint, home.path(), false);
    assert_clean_failure(&out, "nobody/nothing: not a local directory; downloading it from the Hugging Face Hub: the repository has no config.json");
}

#[test]
fn a_pickle_only_repository_is_refused_with_the_way_out() {
    let repo = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(fixture("tiny-bert").join(file), repo.path().join(file)).unwrap();
    }
    std::fs::write(repo.path().join("pytorch_model.bin"), b"not loaded").unwrap();
    let hub = HubStandIn::start(&[("test-org/pickled", repo.path().to_path_buf())]);
    let home = tempfile::tempdir().unwrap();
    let out = longread_hub(&["inspect", "--model", "test-org/pickled"], &hub.endpoint, home.path(), false);
    assert_clean_failure(&out, "only pytorch_model.bin (pickle)");
}

#[test]
fn an_unreachable_hub_is_a_clean_error() {
    let home = tempfile::tempdir().unwrap();
    let out = longread_hub(&["inspect", "--model", "test-org/tiny-bert"], "http://127.0.0.1:9", home.path(), false);
    assert_clean_failure(
        &out,
        "test-org/tiny-bert: not a local directory; downloading it from the Hugging Face Hub: config.json",
    );
}
