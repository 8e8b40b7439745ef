//! `train --wide-bow`: a wide-and-deep model trains, saves its bag of words inside its
//! directory, and predicts with `softmax(deep logits + scale · ln p_bow)` everywhere.

mod common;

use common::{assert_clean_failure, fixture, json_lines, longread, Served};
use serde_json::Value;

fn softmax(z: &[f64]) -> Vec<f64> {
    let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|v| (v - max).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// Runs `longread ARGS`, which must succeed.
fn run(args: &[&str]) -> std::process::Output {
    let out = longread(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// A classifier on the tiny BERT fixture, made by `init` in `dir/init`, for the synthetic
/// two-label fixture.
fn init_tiny(dir: &std::path::Path) -> String {
    let out = dir.join("init").to_str().unwrap().to_owned();
    let encoder = fixture("tiny-bert");
    run(&[
        "init",
        "--encoder",
        encoder.to_str().unwrap(),
        "--labels",
        "prices,rain",
        "--out",
        &out,
        "--chunk-size",
        "64",
        "--stride",
        "16",
    ]);
    out
}

#[test]
fn a_wide_and_deep_model_adds_its_bag_of_words_to_the_deep_logits() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).to_str().unwrap().to_owned();
    let (train, test) = (fixture("synthetic/train.jsonl"), fixture("synthetic/test.jsonl"));
    let (t, test) = (train.to_str().unwrap(), test.to_str().unwrap());
    init_tiny(tmp.path());
    let trained = run(&[
        "train",
        "--model",
        &p("init"),
        "--train",
        t,
        "--out",
        &p("wd"),
        "--freeze-base",
        "--epochs",
        "3",
        "--wide-bow",
        "--c-values",
        "0.1,1,10",
    ]);
    let stderr = String::from_utf8_lossy(&trained.stderr);
    assert!(stderr.contains("wide side: bag of words on"), "{stderr}");
    let wd = tmp.path().join("wd");
    let config: Value = serde_json::from_str(&std::fs::read_to_string(wd.join("config.json")).unwrap()).unwrap();
    let scale = config["longread"]["wide"]["scale"].as_f64().unwrap();
    assert!(scale > 0.0, "{config}");
    assert!(wd.join("wide/bow.json").is_file(), "the bag of words lives in the model directory");

    // The deep side alone (the same directory without its wide side) and the bag of words
    // alone, predicted separately, give the wide-and-deep prediction.
    let deep = tmp.path().join("deep");
    std::fs::create_dir(&deep).unwrap();
    for name in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(wd.join(name), deep.join(name)).unwrap();
    }
    let mut plain = config.clone();
    plain["longread"].as_object_mut().unwrap().remove("wide");
    std::fs::write(deep.join("config.json"), plain.to_string()).unwrap();
    let predict = |model: &str| json_lines(&run(&["predict", "--model", model, "--input", test]).stdout);
    let (both, deep_only, bow_only) = (predict(&p("wd")), predict(&p("deep")), predict(&p("wd/wide")));
    assert_eq!(both.len(), 12);
    for ((b, d), w) in both.iter().zip(&deep_only).zip(&bow_only) {
        let wide_logits = numbers(&w["logits"]);
        let deep_logits = numbers(&d["logits"]);
        let lse = |z: &[f64]| softmax(z).iter().map(|p| p.ln()).collect::<Vec<_>>();
        let z: Vec<f64> = deep_logits.iter().zip(lse(&wide_logits)).map(|(a, l)| a + scale * l).collect();
        let expected = softmax(&z);
        let got: Vec<f64> = ["prices", "rain"].iter().map(|l| b["scores"][l].as_f64().unwrap()).collect();
        for (g, e) in got.iter().zip(&expected) {
            assert!((g - e).abs() < 1e-5, "{got:?} vs {expected:?}");
        }
        let members: Vec<&str> =
            b["members"].as_array().unwrap().iter().map(|m| m["model"].as_str().unwrap()).collect();
        assert_eq!(members, ["deep", "wide"]);
        assert!(b["chunks"].is_array(), "the deep side's chunk evidence is shown: {b}");
    }
    // The server gives the same prediction (its batch queue prepares both members).
    let first_text: Value =
        serde_json::from_str(std::fs::read_to_string(test).unwrap().lines().next().unwrap()).unwrap();
    let served = Served::start(&["--model", &p("wd")]);
    let (status, body) = served.post("/predict", &serde_json::json!({ "inputs": first_text["text"] }));
    assert_eq!(status, 200, "{body}");
    for entry in body.as_array().unwrap() {
        let label = entry["label"].as_str().unwrap();
        let (served_p, predicted_p) = (entry["score"].as_f64().unwrap(), both[0]["scores"][label].as_f64().unwrap());
        assert!((served_p - predicted_p).abs() < 1e-6, "{label}: served {served_p}, predict {predicted_p}");
    }
    drop(served);
    let inspected = String::from_utf8(run(&["inspect", "--model", &p("wd")]).stdout).unwrap();
    assert!(inspected.contains("a bag of words in wide/"), "{inspected}");
    let eval: Value =
        serde_json::from_slice(&run(&["eval", "--model", &p("wd"), "--data", test, "--json"]).stdout).unwrap();
    assert!(eval.to_string().contains("accuracy"), "{eval}");

    // A stopped run keeps the bag of words in its checkpoint and resumes with it.
    let resumable = [
        "train",
        "--model",
        &p("init"),
        "--train",
        t,
        "--out",
        &p("wd2"),
        "--freeze-base",
        "--epochs",
        "2",
        "--wide-bow",
        "--c-values",
        "1",
    ];
    run(&[&resumable[..], &["--stop-after-epoch", "1"]].concat());
    assert!(tmp.path().join("wd2/checkpoint-00001/wide/bow.json").is_file(), "the checkpoint is a whole model");
    run(&[&resumable[..], &["--resume", "auto"]].concat());
    let metrics = std::fs::read_to_string(tmp.path().join("wd2/metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 2, "{metrics}");
    assert_eq!(predict(&p("wd2")).len(), 12);

    // Training it again needs its bag of words refitted; the flag needs an encoder model.
    // (-q: the fixture repeats texts, so a note warns that dev documents are training ones.)
    let again = longread(&["train", "-q", "--model", &p("wd"), "--train", t, "--out", &p("again"), "--freeze-base"]);
    assert_clean_failure(&again, "--wide-bow");
    let bow = longread(&["train", "--arch", "bow", "--train", t, "--out", &p("bow"), "--wide-bow"]);
    assert_clean_failure(&bow, "--arch bow is the bag of words alone");
    assert!(!tmp.path().join("again").exists() && !tmp.path().join("bow").exists());
}

/// An ensemble with a wide-and-deep member keeps the member's bag of words (its `wide/`
/// directory) and loads: it was copied without it, and the ensemble failed to load.
#[test]
fn an_ensemble_keeps_a_wide_and_deep_members_bag_of_words() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |name: &str| tmp.path().join(name).to_str().unwrap().to_owned();
    let (train, test) = (fixture("synthetic/train.jsonl"), fixture("synthetic/test.jsonl"));
    let (t, test) = (train.to_str().unwrap(), test.to_str().unwrap());
    init_tiny(tmp.path());
    run(&[
        "train",
        "--model",
        &p("init"),
        "--train",
        t,
        "--out",
        &p("wd"),
        "--freeze-base",
        "--epochs",
        "2",
        "--wide-bow",
    ]);
    run(&["train", "--arch", "bow", "--train", t, "--out", &p("bow")]);
    run(&["ensemble", "--model", &p("wd"), "--model", &p("bow"), "--out", &p("ens")]);
    let members: Vec<std::path::PathBuf> = std::fs::read_dir(tmp.path().join("ens/members"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|path| path.join("wide/bow.json").is_file())
        .collect();
    assert_eq!(members.len(), 1, "the wide-and-deep member's wide/ is in the ensemble");
    let predicted = json_lines(&run(&["predict", "--model", &p("ens"), "--input", test]).stdout);
    assert_eq!(predicted.len(), 12);
    assert!(predicted.iter().all(|line| line.get("error").is_none()), "{predicted:?}");
}
