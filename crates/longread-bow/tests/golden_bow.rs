//! longread-bow against scikit-learn (fixture from scripts/make_bow_fixtures.py) — probabilities
//! and each term's contribution to a label — and its
//! model directory: save → load gives the same scores, broken files are named.

use std::path::PathBuf;

use longread_bow::{train, BowModel, BowOptions, Solver, TfidfSettings};

fn fixture() -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/bow/expected.json");
    serde_json::from_slice(&std::fs::read(&path).expect("the bow fixture")).expect("JSON")
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

fn trained(task: &str) -> (BowModel, serde_json::Value) {
    let fx = fixture();
    let texts = strings(&fx["train"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let expected = fx["tasks"][task].clone();
    let labels: Vec<usize> =
        expected["labels"].as_array().unwrap().iter().map(|l| l.as_u64().unwrap() as usize).collect();
    let classes = labels.iter().max().unwrap() + 1;
    let names: Vec<String> = (0..classes).map(|c| format!("c{c}")).collect();
    let char_ngrams = expected["char_ngrams"].as_array().map(|r| [0, 1].map(|i| r[i].as_u64().unwrap() as usize));
    let options = BowOptions {
        tfidf: TfidfSettings { char_ngrams, ..TfidfSettings::default() },
        cs: vec![fx["c"].as_f64().unwrap()],
        solver: Solver { max_iters: 5000, tolerance: 1e-12 },
        ..BowOptions::default()
    };
    (train(&texts, &labels, &names, &options, |_, _| {}).unwrap().model, expected)
}

fn max_diff(model: &BowModel, expected: &serde_json::Value) -> f64 {
    let fx = fixture();
    let mut worst = 0.0f64;
    for (text, probs) in strings(&fx["test"]).iter().zip(expected["probabilities"].as_array().unwrap()) {
        let got = model.scores(text).unwrap().probabilities;
        for (g, e) in got.iter().zip(probs.as_array().unwrap()) {
            worst = worst.max((*g as f64 - e.as_f64().unwrap()).abs());
        }
    }
    worst
}

#[test]
fn binary_tfidf_logistic_regression_matches_scikit_learn() {
    let (model, expected) = trained("binary");
    assert_eq!(model.features() as u64, expected["features"].as_u64().unwrap());
    let diff = max_diff(&model, &expected);
    assert!(diff <= 1e-4, "max abs diff {diff}");
}

/// Each test text's top terms for its predicted label: the terms scikit-learn's coefficients ×
/// TF-IDF values rank first, with the same contributions (ties may come in another order).
fn evidence_matches(task: &str) {
    let (model, expected) = trained(task);
    let fx = fixture();
    let mut checked = 0;
    for (text, want) in strings(&fx["test"]).iter().zip(expected["evidence"].as_array().unwrap()) {
        let label = want["label"].as_u64().unwrap() as usize;
        let got = model.term_evidence(text, label, 50).unwrap();
        let wanted = want["terms"].as_array().unwrap();
        let first = wanted[0][1].as_f64().unwrap();
        assert!((got[0].contribution - first).abs() <= 1e-4, "{task}: {} vs {first}", got[0].contribution);
        for pair in wanted {
            let (term, contribution) = (pair[0].as_str().unwrap(), pair[1].as_f64().unwrap());
            let mine =
                got.iter().find(|t| t.term == term).unwrap_or_else(|| panic!("{task}: {term} not among {got:?}"));
            assert!(
                (mine.contribution - contribution).abs() <= 1e-4,
                "{task} {term}: {} vs {contribution}",
                mine.contribution
            );
            checked += 1;
        }
    }
    assert!(checked >= 50, "{checked}");
}

#[test]
fn each_terms_contribution_matches_scikit_learns_coefficient_times_its_value() {
    evidence_matches("binary");
    evidence_matches("three");
}

#[test]
fn multinomial_tfidf_logistic_regression_matches_scikit_learn() {
    let (model, expected) = trained("three");
    let diff = max_diff(&model, &expected);
    assert!(diff <= 1e-4, "max abs diff {diff}");
}

#[test]
fn word_and_character_ngrams_match_scikit_learns_feature_union() {
    let (model, expected) = trained("binary_chars");
    assert_eq!(model.features() as u64, expected["features"].as_u64().unwrap());
    let diff = max_diff(&model, &expected);
    assert!(diff <= 1e-4, "max abs diff {diff}");
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let loaded = BowModel::load(dir.path()).unwrap();
    assert_eq!(max_diff(&loaded, &expected), diff, "the character block survives save and load");
    assert!(loaded.scores("a ? b").is_ok(), "character n-grams score a text without words");
    assert!(loaded.scores(" \t ").is_err(), "a blank text is refused");
}

#[test]
fn absurd_character_ngram_ranges_are_refused() {
    let fx = fixture();
    let texts = strings(&fx["train"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let labels: Vec<usize> = (0..texts.len()).map(|i| i % 2).collect();
    let names = vec!["a".to_string(), "b".to_string()];
    for range in [[0, 3], [4, 2], [2, 100]] {
        let tfidf = TfidfSettings { char_ngrams: Some(range), ..TfidfSettings::default() };
        let options = BowOptions { tfidf, cs: vec![1.0], ..BowOptions::default() };
        let err = train(&texts, &labels, &names, &options, |_, _| {}).unwrap_err().to_string();
        assert!(err.contains(&format!("character n-grams {}-{}", range[0], range[1])), "{err}");
    }
}

#[test]
fn save_then_load_gives_the_same_scores() {
    let (model, expected) = trained("three");
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    assert!(longread_bow::is_bow_dir(dir.path()));
    let loaded = BowModel::load(dir.path()).unwrap();
    assert_eq!(loaded.labels(), model.labels());
    assert_eq!(max_diff(&loaded, &expected), max_diff(&model, &expected));
    assert!(model.scores("!!! ?").is_err(), "a text without words is refused");
}

#[test]
fn broken_model_files_are_named() {
    let (model, _) = trained("binary");
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), b"not safetensors").unwrap();
    let err = BowModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
    model.save(dir.path()).unwrap();
    std::fs::write(dir.path().join("vocabulary.txt"), "just\nthree\nterms\n").unwrap();
    let err = BowModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("do not fit 3 distinct vocabulary terms"), "{err}");
    std::fs::remove_file(dir.path().join("bow.json")).unwrap();
    let err = BowModel::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("bow.json"), "{err}");
}

#[test]
fn cross_validation_scores_every_c_and_picks_the_best() {
    let fx = fixture();
    let texts = strings(&fx["train"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let labels: Vec<usize> =
        fx["tasks"]["binary"]["labels"].as_array().unwrap().iter().map(|l| l.as_u64().unwrap() as usize).collect();
    let names = vec!["false".to_string(), "true".to_string()];
    let options = BowOptions { cs: vec![0.01, 1.0, 100.0], folds: 3, ..BowOptions::default() };
    let mut fits = Vec::new();
    let trained = train(&texts, &labels, &names, &options, |done, total| fits.push((done, total))).unwrap();
    assert_eq!(trained.cv.len(), 3);
    assert_eq!(fits.last(), Some(&(10, 10)), "3 folds × 3 Cs, then the final fit");
    let best = trained.cv.iter().map(|s| s.macro_f1_mean).fold(f64::MIN, f64::max);
    let chosen = trained.cv.iter().find(|s| s.c == trained.model.c()).unwrap();
    assert_eq!(chosen.macro_f1_mean, best);
    for s in &trained.cv {
        assert!((0.0..=1.0).contains(&s.macro_f1_mean) && s.macro_f1_std >= 0.0, "{s:?}");
    }
    let too_many_folds = BowOptions { folds: 1000, ..options };
    let err = train(&texts, &labels, &names, &too_many_folds, |_, _| {}).unwrap_err().to_string();
    assert!(err.contains("1000-fold"), "{err}");
}

/// One-vs-rest: each label's probability is scikit-learn's
/// `OneVsRestClassifier(LogisticRegression(C=10))`'s, saved and loaded unchanged.
#[test]
fn one_vs_rest_logistic_regression_matches_scikit_learn() {
    let fx = fixture();
    let texts = strings(&fx["train"]);
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let expected = &fx["multilabel"];
    let names = strings(&expected["names"]);
    let labels: Vec<Vec<usize>> = expected["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| strings(l).iter().map(|n| names.iter().position(|x| x == n).unwrap()).collect())
        .collect();
    let options = BowOptions {
        cs: vec![fx["c"].as_f64().unwrap()],
        solver: Solver { max_iters: 5000, tolerance: 1e-12 },
        ..BowOptions::default()
    };
    let model =
        longread_bow::train_multilabel(&texts, &labels, &names, &options, longread_bow::LabelWeights::Equal, |_, _| {})
            .unwrap()
            .model;
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    let loaded = BowModel::load(dir.path()).unwrap();
    assert!(loaded.multi_label());
    let mut worst = 0.0f64;
    for (text, probs) in strings(&fx["test"]).iter().zip(expected["probabilities"].as_array().unwrap()) {
        let (got, again) = (model.scores(text).unwrap(), loaded.scores(text).unwrap());
        assert_eq!(got, again, "saved and loaded");
        for (g, e) in got.probabilities.iter().zip(probs.as_array().unwrap()) {
            worst = worst.max((f64::from(*g) - e.as_f64().unwrap()).abs());
        }
    }
    assert!(worst <= 1e-4, "max abs diff {worst}");
}
