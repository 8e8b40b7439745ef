//! Ensembles through the one library API: `build_ensemble` copies members of any kind into a
//! model directory, `Classifier` loads it, and each prediction is the weighted mean of the
//! members' probabilities (matched by label name), with the first member's evidence and what
//! every member said; bad members, weights and files are clear errors that leave nothing behind.

#[path = "../../longread-model/tests/common.rs"]
mod common;

use std::path::{Path, PathBuf};

use common::{fixture, hier_documents as documents, max_diff, scratch_copy};
use longread_classifier::ensemble::{build_ensemble, read_spec, ENSEMBLE_FILE};
use longread_classifier::summary::summarize;
use longread_classifier::{Classifier, ClassifierOptions};
use longread_model::{ModelError, Precision};

fn load(dir: &Path) -> Classifier {
    Classifier::load(dir, ClassifierOptions::default()).unwrap()
}

/// A copy of the HAN fixture whose labels are listed in reverse order (same weights): its
/// output 0, "general" in the fixture, is named "mature".
fn reversed_han() -> tempfile::TempDir {
    let dir = scratch_copy("han");
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let labels = config["labels"].as_array_mut().unwrap();
    labels.reverse();
    std::fs::write(&path, config.to_string()).unwrap();
    dir
}

#[test]
fn an_ensemble_averages_its_members_probabilities_by_label_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ens");
    let reversed = reversed_han();
    let members: Vec<(PathBuf, f64)> =
        vec![(fixture("hier/roberta-attention"), 3.0), (fixture("han"), 0.5), (reversed.path().to_owned(), 0.5)];
    let spec = build_ensemble(&members, &out).unwrap();
    let weights: Vec<f64> = spec.members.iter().map(|m| m.weight).collect();
    assert_eq!(weights, vec![0.75, 0.125, 0.125]);
    assert_eq!(spec.labels, vec!["general", "teen", "mature"]);
    assert_eq!(read_spec(&out).unwrap(), spec);
    for m in &spec.members {
        assert!(out.join(&m.dir).join("model.safetensors").is_file(), "{} copied", m.dir);
    }
    let leftovers = std::fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(leftovers, 1, "only the ensemble directory in its parent");

    let ensemble = load(&out);
    assert_eq!((ensemble.labels(), ensemble.evidence_unit()), (&spec.labels[..], "chunk"));
    let (hier, han, rev) = (load(&members[0].0), load(&members[1].0), load(&members[2].0));
    let docs = documents();
    let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
    let results = ensemble.classify(&texts).unwrap();
    let member_results: Vec<_> = [&hier, &han, &rev].iter().map(|c| c.classify(&texts).unwrap()).collect();
    for (i, result) in results.iter().enumerate() {
        let p = result.as_ref().unwrap();
        let h = member_results[0][i].as_ref().unwrap().probabilities().to_vec();
        let a = member_results[1][i].as_ref().unwrap().probabilities().to_vec();
        let mut r = member_results[2][i].as_ref().unwrap().probabilities().to_vec();
        assert!(max_diff(&r, &a) <= 1e-6, "same weights, same outputs, other names");
        r.reverse(); // its outputs are named mature, teen, general: in the ensemble's order, reversed
        let expected: Vec<f32> = (0..3).map(|k| 0.75 * h[k] + 0.125 * a[k] + 0.125 * r[k]).collect();
        assert!(max_diff(p.probabilities(), &expected) <= 1e-6, "doc {i}: {:?} vs {expected:?}", p.probabilities());
        let logits: Vec<f32> = expected.iter().map(|x| x.ln()).collect();
        assert!(max_diff(&p.logits, &logits) <= 1e-5);
        assert_eq!(p.label, ensemble.labels()[p.label_index()]);
        assert_eq!(p.parts, member_results[0][i].as_ref().unwrap().parts, "evidence of the first member");
        let said = p.members.as_ref().unwrap();
        assert_eq!(said.len(), 3);
        assert_eq!(said[2].scores.probabilities, r, "members' scores in the ensemble's label order");
        assert_eq!(said[0].label, member_results[0][i].as_ref().unwrap().label);
    }
    // The queue's path (prepare, encode units, finish) gives the same prediction (up to the
    // HAN's float rounding alone vs in a batch): the document's units are the encoder
    // member's chunks and one unit per HAN, encoded here in one batch with another
    // document's units, in reverse order.
    let prepared = ensemble.prepare(texts[1]).unwrap();
    let other = ensemble.prepare(texts[0]).unwrap();
    let chunks = hier.prepare(texts[1]).unwrap().units();
    assert_eq!(prepared.units(), chunks + 2, "the hierarchical member's chunks, then one unit per HAN");
    assert_eq!(prepared.tokens(), hier.prepare(texts[1]).unwrap().tokens());
    let mut units: Vec<_> = (0..prepared.units()).map(|u| (&prepared, u)).collect();
    units.extend((0..other.units()).map(|u| (&other, u)));
    units.reverse();
    let mut outputs = ensemble.encode_units(&units).unwrap();
    outputs.drain(..other.units()); // the other document's units came first
    outputs.reverse();
    let queued = ensemble.finish(&prepared, outputs).unwrap().unwrap();
    let batched = results[1].as_ref().unwrap();
    assert!(max_diff(queued.probabilities(), batched.probabilities()) <= 1e-6);
    assert_eq!((&queued.label, &queued.parts), (&batched.label, &batched.parts));
    assert_eq!(queued.members.as_ref().unwrap().len(), 3);
    // Units of another document, or too few, are refused.
    let single: Vec<_> = (0..other.units()).map(|u| (&other, u)).collect();
    let outputs = ensemble.encode_units(&single).unwrap();
    assert!(ensemble.finish(&prepared, outputs).is_err());
    assert!(ensemble.encode_units(&[(&prepared, prepared.units())]).is_err());
    // A unit of a three-member ensemble's document given to a two-member ensemble: an error.
    let two_dir = tmp.path().join("two");
    build_ensemble(&members[..2], &two_dir).unwrap();
    let two = load(&two_dir);
    let last = prepared.units() - 1;
    assert!(two.encode_units(&[(&prepared, last)]).is_err(), "the third member's unit");
}

#[test]
fn a_document_a_member_cannot_read_fails_with_that_members_name() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ens");
    build_ensemble(&[(fixture("hier/roberta-attention"), 1.0), (fixture("han"), 1.0)], &out).unwrap();
    let results = load(&out).classify(&["Rain is expected.", "   "]).unwrap();
    assert!(results[0].is_ok());
    let err = results[1].as_ref().unwrap_err().message.clone();
    assert!(err.starts_with("members/1-roberta-attention: "), "{err}");
}

#[test]
fn precision_applies_to_encoder_members_only() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ens");
    build_ensemble(&[(fixture("hier/roberta-attention"), 1.0), (fixture("han"), 1.0)], &out).unwrap();
    let int8 = ClassifierOptions { precision: Some(Precision::Int8), ..ClassifierOptions::default() };
    let classifier = Classifier::load(&out, int8).unwrap();
    assert!(classifier.classify(&["Rain is expected."]).unwrap()[0].is_ok());
}

#[test]
fn bad_members_weights_and_files_are_clear_errors_that_leave_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ens");
    let hier = fixture("hier/roberta-attention");
    let cases: Vec<(Vec<(PathBuf, f64)>, &str)> = vec![
        (vec![], "at least two member models (got 0)"),
        (vec![(hier.clone(), 1.0)], "at least two member models (got 1)"),
        (vec![(hier.clone(), 1.0), (fixture("han"), 0.0)], "weights must be positive"),
        (vec![(hier.clone(), 1.0), (fixture("han"), f64::NAN)], "weights must be positive"),
        (vec![(hier.clone(), 1.0), (fixture("hier/trained-multitask"), 1.0)], "multi-task"),
        (vec![(hier.clone(), 1.0), (tmp.path().join("missing"), 1.0)], "missing"),
        (vec![(hier.clone(), 1.0), (fixture("tiny-bert"), 1.0)], "longread init"),
    ];
    for (members, needle) in cases {
        let err = build_ensemble(&members, &out).unwrap_err().to_string();
        assert!(err.contains(needle), "{needle}: {err}");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "{needle}: nothing written");
    }
    let other_labels = scratch_copy("han");
    let path = other_labels.path().join("config.json");
    let text = std::fs::read_to_string(&path).unwrap().replace("\"mature\"", "\"adult\"");
    std::fs::write(&path, text).unwrap();
    let err = build_ensemble(&[(hier.clone(), 1.0), (other_labels.path().to_owned(), 1.0)], &out).unwrap_err();
    assert!(err.to_string().contains("the same labels"), "{err}");

    build_ensemble(&[(hier.clone(), 1.0), (fixture("han"), 1.0)], &out).unwrap();
    let err = build_ensemble(&[(hier.clone(), 1.0), (fixture("han"), 1.0)], &out).unwrap_err();
    assert!(matches!(err, ModelError::OutputExists { .. }), "{err}");
    let err = build_ensemble(&[(out.clone(), 1.0), (fixture("han"), 1.0)], &tmp.path().join("nested")).unwrap_err();
    assert!(err.to_string().contains("is an ensemble itself"), "{err}");

    // A damaged ensemble.json: named, never a panic.
    let spec_path = out.join(ENSEMBLE_FILE);
    let good = std::fs::read_to_string(&spec_path).unwrap();
    for (bad, needle) in [
        ("{not json".to_string(), "invalid JSON"),
        (good.replace("members/1-roberta-attention", "../elsewhere"), "relative path inside"),
        (good.replace("\"weight\": 0.5", "\"weight\": -1.0"), "weights must be positive"),
        (good.replace("longread-ensemble", "something-else"), "format"),
        (good.replace("members/2-han", "members/none"), "none"),
    ] {
        std::fs::write(&spec_path, &bad).unwrap();
        let err = Classifier::load(&out, ClassifierOptions::default()).unwrap_err().to_string();
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

/// A bag-of-words model with the fixtures' labels, trained on six short texts.
fn bow(dir: &Path) {
    let texts = ["sunny skies", "bright sunny day", "a school trip", "exam at school", "a brutal war", "war and blood"];
    let labels = ["general", "teen", "mature"].map(String::from);
    let options = longread_bow::BowOptions { cs: vec![10.0], ..Default::default() };
    let trained = longread_bow::train(&texts, &[0, 0, 1, 1, 2, 2], &labels, &options, |_, _| {}).unwrap();
    trained.model.save(dir).unwrap();
}

/// Every reader (the `Classifier`, `inspect`, an ensemble's members) tells kinds apart by
/// `ModelKind::of`: each kind's own files decide, and a directory of none of them is an encoder.
#[test]
fn each_kind_of_model_directory_is_recognised_by_its_files() {
    use longread_classifier::ModelKind;
    let tmp = tempfile::tempdir().unwrap();
    let (out, bow_dir) = (tmp.path().join("ens"), tmp.path().join("bow"));
    bow(&bow_dir);
    build_ensemble(&[(bow_dir.clone(), 1.0), (fixture("han"), 3.0)], &out).unwrap();
    let kinds = [
        (out.clone(), ModelKind::Ensemble),
        (bow_dir, ModelKind::Bow),
        (fixture("han"), ModelKind::Han),
        (fixture("hier/roberta-attention"), ModelKind::Encoder),
        (fixture("tiny-bert"), ModelKind::Encoder),
    ];
    for (dir, kind) in kinds {
        assert_eq!(ModelKind::of(&dir), kind, "{}", dir.display());
        assert_eq!(kind.has_encoder(), matches!(kind, ModelKind::Ensemble | ModelKind::Encoder));
    }
}

#[test]
fn an_ensemble_with_a_bag_of_words_member_shows_the_evidence_of_the_next_and_inspect_lists_all() {
    let tmp = tempfile::tempdir().unwrap();
    let (out, bow_dir) = (tmp.path().join("ens"), tmp.path().join("bow"));
    bow(&bow_dir);
    build_ensemble(&[(bow_dir.clone(), 1.0), (fixture("han"), 3.0)], &out).unwrap();
    let ensemble = load(&out);
    assert_eq!(ensemble.evidence_unit(), "sentence", "the bag of words reads no parts; the HAN does");
    let p = ensemble.classify(&["A brutal war. Blood at school."]).unwrap().remove(0).unwrap();
    assert!(p.parts.sentences().is_some() && p.parts.chunks().is_none());
    assert!((p.probabilities().iter().sum::<f32>() - 1.0).abs() < 1e-5);

    let summary = summarize(&out).unwrap();
    assert_eq!(summary.json["members"].as_array().unwrap().len(), 2);
    assert_eq!(summary.json["members"][1]["weight"], 0.75);
    assert_eq!(summary.json["members"][1]["summary"]["architectures"][0], "LongreadHAN");
    assert_eq!(summary.json["members"][0]["summary"]["format"], "longread-bow");
    assert!(summary.json["members"][0]["summary"]["features"].as_u64().unwrap() > 0);
    let table = &summary.table;
    assert!(
        table.contains("ensemble of 2 models") && table.contains("HAN") && table.contains("bag of words"),
        "{table}"
    );
}

/// A line that could not be read is the line's error, not a member's: the ensemble's members
/// never saw it (older builds named the first member in it). A text a member cannot read
/// names that member.
#[test]
fn an_unreadable_line_is_not_blamed_on_a_member() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ens");
    build_ensemble(&[(fixture("hier/roberta-attention"), 1.0), (fixture("han"), 1.0)], &out).unwrap();
    let ensemble = load(&out);
    let mut unreadable = longread_text::Document::new(1, "");
    unreadable.error = Some("invalid JSON: expected value at line 1 column 10".into());
    let docs = vec![
        longread_text::Document::new(0, documents()[0].as_str()),
        unreadable,
        longread_text::Document::new(2, " "),
    ];
    let mut results = Vec::new();
    ensemble
        .classify_documents(&docs, |_, r| {
            results.push(r);
            Ok::<(), ModelError>(())
        })
        .unwrap();
    let alone = ensemble.classify(&[documents()[0].as_str()]).unwrap().remove(0).unwrap();
    assert_eq!(results[0].as_ref().unwrap().logits, alone.logits);
    assert_eq!(results[1].as_ref().unwrap_err().message, "invalid JSON: expected value at line 1 column 10");
    let empty = &results[2].as_ref().unwrap_err().message;
    assert!(empty.starts_with("members/") && empty.contains("empty or whitespace-only"), "{empty}");
}
