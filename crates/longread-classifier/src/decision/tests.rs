use super::*;

fn labels() -> Vec<String> {
    vec!["neutral".into(), "partisan".into()]
}

fn three() -> Vec<String> {
    vec!["general".into(), "teen".into(), "mature".into()]
}

/// Two-label rows from the second label's probabilities.
fn rows(positive: &[f32]) -> Vec<Vec<f32>> {
    positive.iter().map(|&p| vec![1.0 - p, p]).collect()
}

fn threshold_of(tuned: &Tuned) -> f32 {
    match tuned.rule {
        Rule::Threshold { threshold, .. } => threshold,
        Rule::Biases(_) | Rule::PerLabel { .. } => panic!("two labels take a threshold: {tuned:?}"),
    }
}

fn threshold(positive: &str, threshold: f32) -> Decision {
    Decision { rule: Rule::Threshold { positive: positive.into(), threshold }, chosen_by: String::new() }
}

/// Every positive scores above every negative, but below 0.5: the most probable label
/// is always "neutral" (macro-F1 1/3); a threshold between the groups labels all right.
#[test]
fn the_threshold_separates_documents_the_default_mislabels() {
    let truth = [0, 0, 0, 1, 1];
    let tuned = tune(&labels(), &truth, &rows(&[0.05, 0.1, 0.2, 0.3, 0.4]), |r| r.macro_f1).unwrap();
    assert!((threshold_of(&tuned) - 0.25).abs() < 1e-6, "{tuned:?}");
    assert_eq!(tuned.at_threshold.accuracy, 1.0);
    assert!((tuned.at_default.macro_f1 - 0.375).abs() < 1e-12, "{:?}", tuned.at_default);
}

/// Many distinct probabilities: at most MAX_CANDIDATES thresholds are tried, and the best
/// of them still separates two groups that a gap splits.
#[test]
fn many_documents_are_tuned_over_a_bounded_number_of_candidates() {
    let n = 20_000;
    let positive: Vec<f32> = (0..n).map(|i| 0.1 + 0.3 * i as f32 / n as f32).collect();
    let truth: Vec<usize> = (0..n).map(|i| usize::from(i >= n / 2)).collect();
    let tuned = tune(&labels(), &truth, &rows(&positive), |r| r.accuracy).unwrap();
    assert!(tuned.at_threshold.accuracy > 0.99, "{}", tuned.at_threshold.accuracy);
    assert!((threshold_of(&tuned) - 0.25).abs() < 0.01, "{}", threshold_of(&tuned));
}

/// Where several thresholds score the same, the nearest to 0.5 wins; where 0.5 is already
/// best, it stays.
#[test]
fn ties_keep_the_threshold_near_one_half() {
    let truth = [0, 0, 1, 1];
    let tuned = tune(&labels(), &truth, &rows(&[0.1, 0.2, 0.8, 0.9]), |r| r.accuracy).unwrap();
    assert_eq!(threshold_of(&tuned), 0.5);
    let decision = threshold("partisan", 0.3);
    assert_eq!((decision.label_index(&[0.7, 0.3]), decision.label_index(&[0.71, 0.29])), (1, 0));
}

/// Three labels: "teen" documents all score below "general" (a prior learned from data where
/// teen was rare) but rank above the general documents on P(teen): no threshold applies, and a
/// bias on teen labels every document right; mature, already right, keeps a bias of 0.
#[test]
fn label_biases_fix_a_shifted_label_among_three() {
    let probabilities = [
        [0.80, 0.15, 0.05], // general
        [0.75, 0.20, 0.05], // general
        [0.70, 0.25, 0.05], // general
        [0.55, 0.40, 0.05], // teen
        [0.60, 0.35, 0.05], // teen
        [0.10, 0.10, 0.80], // mature
        [0.20, 0.10, 0.70], // mature
    ];
    let truth = [0, 0, 0, 1, 1, 2, 2];
    let tuned = tune(&three(), &truth, &probabilities, |r| r.macro_f1).unwrap();
    assert!(tuned.at_default.accuracy < 0.75, "{:?}", tuned.at_default);
    assert_eq!(tuned.at_threshold.accuracy, 1.0, "{tuned:?}");
    let Rule::Biases(biases) = &tuned.rule else { panic!("three labels take biases: {tuned:?}") };
    let names: Vec<&str> = biases.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(names, ["general", "teen", "mature"]);
    // Between the teen document that needs the most and the general one that needs the least;
    // general's is 0.
    let (needs, limit) = ((0.60f32 / 0.35).ln(), (0.70f32 / 0.25).ln());
    assert_eq!(biases[0].1, 0.0);
    assert!(biases[1].1 > needs && biases[1].1 < limit, "{biases:?}");
    // The rule, applied as every front applies it, labels the documents as tuning scored.
    let decision = Decision { rule: tuned.rule.clone(), chosen_by: String::new() };
    let labelled: Vec<usize> = probabilities.iter().map(|p| decision.label_index(p)).collect();
    assert_eq!(labelled, truth);
    assert!(decision.describe().starts_with("the label with the highest ln p + bias (general +0, teen +"));
}

/// Three labels already labelled right by the most probable label: every bias stays 0.
#[test]
fn biases_stay_zero_when_the_most_probable_label_is_best() {
    let probabilities = [[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8], [0.6, 0.3, 0.1]];
    let tuned = tune(&three(), &[0, 1, 2, 0], &probabilities, |r| r.macro_f1).unwrap();
    assert_eq!(tuned.rule, Rule::Biases(three().into_iter().map(|l| (l, 0.0)).collect()));
    assert_eq!(tuned.at_default.accuracy, 1.0);
}

/// Every document has the label the model finds less probable (all but one by a wide
/// margin): a rule may give every document that label (candidates beyond the extremes).
#[test]
fn a_rule_may_give_every_document_one_label() {
    let tuned = tune(&labels(), &[1, 1, 1], &rows(&[0.1, 0.2, 0.4]), |r| r.accuracy).unwrap();
    assert!(threshold_of(&tuned) < 0.1 && threshold_of(&tuned) > 0.0, "{tuned:?}");
    assert_eq!(tuned.at_threshold.accuracy, 1.0);
    let probabilities = [[0.6, 0.3, 0.1], [0.5, 0.2, 0.3], [0.2, 0.7, 0.1]];
    let tuned = tune(&three(), &[2, 2, 2], &probabilities, |r| r.accuracy).unwrap();
    assert_eq!(tuned.at_threshold.accuracy, 1.0, "{tuned:?}");
}

/// A rule far from the most probable label, tuned on few documents, is warned of; a
/// moderate one, or one tuned on many, is not.
#[test]
fn extreme_rules_from_few_documents_are_warned_of() {
    assert!(threshold("partisan", 0.007).warning(65).unwrap().contains("tuned on 65 documents"));
    assert!(threshold("partisan", 0.95).warning(65).is_some());
    assert!(threshold("partisan", 0.3).warning(65).is_none());
    assert!(threshold("partisan", 0.007).warning(500).is_none());
    let biases = |b: f32| Decision {
        rule: Rule::Biases(three().into_iter().zip([0.0, b, 0.1]).collect()),
        chosen_by: String::new(),
    };
    assert!(biases(-2.5).warning(50).is_some());
    assert!(biases(1.0).warning(50).is_none());
}

#[test]
fn decisions_that_do_not_fit_the_model_are_refused() {
    assert!(threshold("partisan", 0.3).check(&labels()).is_ok());
    assert!(threshold("neutral", 0.3).check(&labels()).unwrap_err().contains("second label is \"partisan\""));
    assert!(threshold("partisan", 1.0).check(&labels()).unwrap_err().contains("not between 0 and 1"));
    assert!(threshold("b", 0.3).check(&three()).unwrap_err().contains("two labels, not 3"));
    let biases = |names: &[&str]| Decision {
        rule: Rule::Biases(names.iter().map(|n| (n.to_string(), 0.1)).collect()),
        chosen_by: String::new(),
    };
    assert!(biases(&["general", "teen", "mature"]).check(&three()).is_ok());
    let wrong = biases(&["general", "mature", "teen"]).check(&three()).unwrap_err();
    assert!(wrong.contains("the model's labels are") && wrong.contains("in that order"), "{wrong}");
    assert!(biases(&["neutral", "partisan"]).check(&labels()).unwrap_err().contains("two take a threshold"));
    assert!(tune(&["a".to_string()], &[0], &[[1.0]], |r| r.accuracy).is_err());
    assert!(tune(&labels(), &[0], &[[f32::NAN, 0.5]], |r| r.accuracy).is_err());
    // A label index beyond the labels (the sweep's counts would have panicked).
    let out_of_range = tune(&three(), &[3], &[[0.2, 0.3, 0.5]], |r| r.accuracy).unwrap_err().to_string();
    assert!(out_of_range.contains("label index 3 is out of range for 3 labels"), "{out_of_range}");
    assert!(tune(&three(), &[0], &[[0.5, 0.5]], |r| r.accuracy)
        .unwrap_err()
        .to_string()
        .contains("one value per label"));
}

#[test]
fn a_decision_is_saved_loaded_and_cleared() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Decision::load(dir.path(), &labels()).unwrap(), None);
    let decision = Decision { chosen_by: "test".into(), ..threshold("partisan", 0.3) };
    decision.save(dir.path()).unwrap();
    let text = std::fs::read_to_string(dir.path().join(DECISION_FILE)).unwrap();
    assert!(text.contains("\"threshold\": 0.3,"), "shortest decimal: {text}");
    assert_eq!(Decision::load(dir.path(), &labels()).unwrap(), Some(decision));
    let swapped = vec!["partisan".to_string(), "neutral".into()];
    assert!(Decision::load(dir.path(), &swapped).unwrap_err().to_string().contains("decision.json"));
    assert!(Decision::clear(dir.path()).unwrap());
    assert!(!Decision::clear(dir.path()).unwrap());

    let biased = Decision {
        rule: Rule::Biases(vec![("general".into(), 0.0), ("teen".into(), 0.35), ("mature".into(), -0.2)]),
        chosen_by: "test".into(),
    };
    biased.save(dir.path()).unwrap();
    let text = std::fs::read_to_string(dir.path().join(DECISION_FILE)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["biases"], serde_json::json!({"general": 0.0, "teen": 0.35, "mature": -0.2}), "{text}");
    assert_eq!(Decision::load(dir.path(), &three()).unwrap(), Some(biased));
}

#[test]
fn malformed_decision_files_are_refused_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |text: &str| {
        std::fs::write(dir.path().join(DECISION_FILE), text).unwrap();
        Decision::load(dir.path(), &three()).unwrap_err().to_string()
    };
    assert!(refused(r#"{"biases": {"general": 0, "teen": "x", "mature": 0}}"#).contains("the bias of \"teen\""));
    assert!(refused(r#"{"positive": "teen", "threshold": 0.2, "biases": {}}"#).contains("one of them"));
    // Beyond f32's range: infinite once read.
    assert!(refused(r#"{"biases": {"general": 0, "teen": 1e39, "mature": 0}}"#).contains("not a finite (32-bit)"));
    assert!(refused(r#"{"threshold": 0.2}"#).contains("give \"positive\" and \"threshold\""));
    assert!(refused(r#"{"biases": {"general": 0}, "extra": 1}"#).contains("unknown field `extra`"));
}

/// The label-bias sweep (counts moved as the bias rises) finds what classifying every
/// document at every candidate finds, on random five-label problems with ties and zeros.
#[test]
fn the_bias_sweep_matches_classifying_every_document_at_every_candidate() {
    let mut seed = 7u64;
    let mut random = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as f64 / (1u64 << 31) as f64
    };
    let labels: Vec<String> = (0..5).map(|i| format!("l{i}")).collect();
    for problem in 0..20 {
        let n = 40 + problem * 7;
        let truth: Vec<usize> = (0..n).map(|_| (random() * 5.0) as usize % 5).collect();
        let log_p: Vec<Vec<f64>> = truth
            .iter()
            .map(|&t| {
                // Coarse values, so that documents tie; some probabilities exactly 0.
                let raw: Vec<f64> = (0..5).map(|j| (random() * 4.0).floor() + if j == t { 1.0 } else { 0.0 }).collect();
                let sum: f64 = raw.iter().sum::<f64>().max(1.0);
                let p: Vec<f32> = raw.iter().map(|r| (r / sum) as f32).collect();
                log_probabilities(&p)
            })
            .collect();
        let metric = |r: &longread_metrics::Report| r.macro_f1;
        let full = |b: &[f64]| {
            let predicted: Vec<usize> = log_p.iter().map(|lp| biased_argmax(lp, b)).collect();
            metric(&longread_metrics::evaluate(&labels, &truth, &predicted).unwrap())
        };
        let (swept, best) = tune::tune_biases(&log_p, &truth, |cm| {
            Ok(metric(&longread_metrics::evaluate_counts(&labels, cm).unwrap()))
        })
        .unwrap();
        // The score the sweep reports is the one its biases give when every document is
        // classified with them.
        assert_eq!(best, full(&swept), "problem {problem}");
        // The same search, classifying every document at every candidate.
        let mut biases = vec![0.0; 5];
        let mut top = full(&biases);
        for _ in 0..5 {
            let before = top;
            for c in 1..5 {
                let points = log_p
                    .iter()
                    .map(|lp| {
                        (0..5).filter(|&j| j != c).map(|j| lp[j] + biases[j]).fold(f64::NEG_INFINITY, f64::max) - lp[c]
                    })
                    .collect();
                let mut trial = biases.clone();
                for v in tune::candidates(points, |lo, hi| [lo - 2.0, hi + 2.0]) {
                    trial[c] = f64::from(v as f32);
                    let s = full(&trial);
                    if s > top || (s == top && trial[c].abs() < biases[c].abs()) {
                        top = s;
                        biases[c] = trial[c];
                    }
                }
            }
            if top <= before {
                break;
            }
        }
        assert_eq!((swept, best), (biases, top), "problem {problem}");
    }
}

#[test]
fn a_restated_rule_gives_tempered_probabilities_the_labels_it_gave_before() {
    let mut state = 7u64;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as f32 / (1u64 << 31) as f32).max(1e-4)
    };
    let thresholded = threshold("rain", 0.3);
    let biased = Decision {
        rule: Rule::Biases(vec![("general".into(), 0.0), ("teen".into(), 0.8), ("mature".into(), -0.5)]),
        chosen_by: String::new(),
    };
    for t in [0.3, 1.7, 6.0] {
        let calibration = Temperature::single(t, String::new());
        for decision in [&thresholded, &biased] {
            let restated = temperature::restate(decision, t);
            let labels = if matches!(decision.rule, Rule::Threshold { .. }) { 2 } else { 3 };
            for _ in 0..500 {
                let raw: Vec<f32> = (0..labels).map(|_| next()).collect();
                let sum: f32 = raw.iter().sum();
                let p: Vec<f32> = raw.iter().map(|x| x / sum).collect();
                let tempered = calibration.apply(&p);
                // Away from the boundary (f32 rounding may move a document sitting on it).
                let margin = match &decision.rule {
                    Rule::Threshold { threshold, .. } => (p[1] - threshold).abs(),
                    Rule::Biases(_) | Rule::PerLabel { .. } => 1.0,
                };
                if margin > 1e-4 {
                    assert_eq!(decision.label_index(&p), restated.label_index(&tempered), "t {t}, p {p:?}");
                }
            }
        }
        assert!(restated_chosen_by_is_marked_once(&thresholded, t));
    }
}

fn restated_chosen_by_is_marked_once(decision: &Decision, t: f64) -> bool {
    let twice = temperature::restate(&temperature::restate(decision, t), t);
    twice.chosen_by.matches("restated").count() == 1
}

/// Regression: a threshold of 0.99 restated for T = 0.05 rounded to 1.0 in f32, a rule
/// refused at load: calibrating made the model directory unloadable.
#[test]
fn a_restated_threshold_stays_inside_zero_and_one() {
    let labels = vec!["dry".to_string(), "rain".to_string()];
    for (threshold, t) in [(0.99f32, 0.05), (0.01, 0.05), (0.5, 0.05), (0.999_999, 20.0)] {
        let restated = temperature::restate(&self::threshold("rain", threshold), t);
        assert_eq!(restated.check(&labels), Ok(()), "{threshold} at {t}: {restated:?}");
    }
}

fn per_label(rule: &Rule) -> Vec<f32> {
    match rule {
        Rule::PerLabel { thresholds, .. } => thresholds.iter().map(|(_, t)| *t).collect(),
        other => panic!("a multi-label model takes per-label thresholds: {other:?}"),
    }
}

/// Label 0's positives all score above its negatives but one of them below 0.5; label 1 has
/// no positive at all; label 2 is right at 0.5 already.
#[test]
fn per_label_thresholds_maximize_each_labels_f1_and_move_only_as_far_as_needed() {
    let labels = three();
    let probabilities =
        vec![vec![0.9, 0.2, 0.8], vec![0.7, 0.1, 0.3], vec![0.35, 0.3, 0.6], vec![0.3, 0.05, 0.2], vec![0.1, 0.4, 0.1]];
    let truth =
        [[true, false, true], [true, false, false], [true, false, true], [false, false, false], [false, false, false]]
            .map(|row| row.to_vec())
            .to_vec();
    let thresholds = per_label(&tune_per_label(&labels, &truth, &probabilities));
    assert!((thresholds[0] - 0.325).abs() < 1e-6, "{thresholds:?}");
    assert_eq!(thresholds[1], 0.5, "no threshold helps a label with no positives");
    assert_eq!(thresholds[2], 0.5, "0.5 already separates label 2 and ties go to 0.5");
    // Brute force: no threshold on a grid gives label 0 a better F1 than the tuned one.
    let f1 = |t: f32| {
        let tp = (0..5).filter(|&i| probabilities[i][0] >= t && truth[i][0]).count() as f64;
        let fp = (0..5).filter(|&i| probabilities[i][0] >= t && !truth[i][0]).count() as f64;
        2.0 * tp / (2.0 * tp + fp + (3.0 - tp))
    };
    assert!((1..100).all(|k| f1(k as f32 / 100.0) <= f1(thresholds[0])));
}

/// A label whose carriers score low among many documents that do not carry it: its best F1
/// (a threshold near 0, carried by every document) is under the floor, so the threshold goes
/// above its highest probability; a label over the floor keeps its tuned threshold.
#[test]
fn a_label_no_threshold_gives_a_useful_f1_is_not_carried_rather_than_carried_by_every_document() {
    let labels = vec!["rare".to_string(), "common".to_string()];
    let mut probabilities = Vec::new();
    let mut truth = Vec::new();
    for i in 0..100 {
        // "rare": 2 carriers at 0.01 and 0.02, every other document between 0.03 and 0.4.
        let rare = match i {
            0 => 0.01,
            1 => 0.02,
            _ => 0.03 + 0.37 * (i as f32 / 100.0),
        };
        // "common": carriers score 0.3–0.6, the rest 0.1–0.4.
        let common = if i % 2 == 0 { 0.3 + 0.3 * (i as f32 / 100.0) } else { 0.1 + 0.3 * (i as f32 / 100.0) };
        probabilities.push(vec![rare, common]);
        truth.push(vec![i < 2, i % 2 == 0]);
    }
    let thresholds = per_label(&tune_per_label(&labels, &truth, &probabilities));
    // Without the floor the best F1 of "rare" is 2 · 2 / (2 · 2 + 98) ≈ 0.039, at a threshold under 0.01.
    assert!(thresholds[0] >= 0.5 && thresholds[0] < 1.0, "{thresholds:?}");
    assert!(probabilities.iter().all(|p| p[0] < thresholds[0]));
    assert!(thresholds[1] < 0.5 && thresholds[1] > 0.1, "common keeps its tuned threshold: {thresholds:?}");
    // Above 0.5 the floor's threshold sits just over the label's highest probability.
    let high: Vec<Vec<f32>> = probabilities.iter().map(|p| vec![p[0] + 0.55, p[1]]).collect();
    let raised = per_label(&tune_per_label(&labels, &truth, &high));
    let highest = high.iter().map(|p| p[0]).fold(0.0, f32::max);
    assert!(raised[0] > highest && raised[0] - highest < 1e-6, "{raised:?} over {highest}");
}

#[test]
fn per_label_thresholds_decide_each_label_and_fit_only_multi_label_models() {
    let labels = three();
    let decision = Decision { rule: per_label_rule(&[0.3, 0.5, 0.9], Limits::default()), chosen_by: String::new() };
    assert_eq!(decision.check(&labels), Ok(()));
    assert!(decision.check_fits(true).is_ok() && decision.check_fits(false).is_err());
    assert!(threshold("partisan", 0.4).check_fits(true).unwrap_err().contains("threshold per label"));
    let prediction = Prediction {
        label: "mature".into(),
        labels: Some(vec!["mature".into()]),
        scores: crate::prediction::LabelScores { labels: labels.clone(), probabilities: vec![0.35, 0.45, 0.85] },
        logits: vec![0.0; 3],
        parts: crate::prediction::Parts::Whole {},
        tasks: None,
        members: None,
        tokens: None,
    };
    let relabelled = decision.relabel(prediction);
    assert_eq!(relabelled.labels, Some(vec!["general".to_string()]));
    assert_eq!(relabelled.label, "mature", "the most probable label stays");

    let wrong = Decision { rule: per_label_rule(&[0.3, 1.0, 0.9], Limits::default()), chosen_by: String::new() };
    assert!(wrong.check(&labels).unwrap_err().contains("\"teen\", 1, is not between 0 and 1"));
    let dir = tempfile::tempdir().unwrap();
    decision.save(dir.path()).unwrap();
    let text = std::fs::read_to_string(dir.path().join(DECISION_FILE)).unwrap();
    assert!(text.contains("\"thresholds\""), "{text}");
    assert_eq!(Decision::load(dir.path(), &labels).unwrap(), Some(decision));
}

/// A per-label rule over [`three`] with these thresholds and limits.
fn per_label_rule(thresholds: &[f32], limits: Limits) -> Rule {
    Rule::PerLabel { thresholds: three().into_iter().zip(thresholds.iter().copied()).collect(), limits }
}

fn carried_by(limits: Limits, probabilities: &[f32]) -> Vec<String> {
    let decision = Decision { rule: per_label_rule(&[0.5, 0.5, 0.5], limits), chosen_by: String::new() };
    decision.carried(&three(), probabilities).expect("a per-label rule")
}

#[test]
fn label_limits_cap_and_fill_the_carried_labels_by_probability() {
    let none = Limits::default();
    let at_most = |k| Limits { min_labels: 0, top_k: Some(k) };
    let at_least = |m| Limits { min_labels: m, top_k: None };
    // Over 0.5: general and mature; capped at one, the more probable (mature) stays.
    assert_eq!(carried_by(none, &[0.6, 0.2, 0.9]), ["general", "mature"]);
    assert_eq!(carried_by(at_most(1), &[0.6, 0.2, 0.9]), ["mature"]);
    assert_eq!(carried_by(at_most(2), &[0.6, 0.2, 0.9]), ["general", "mature"]);
    // Nothing over 0.5: the floor adds the most probable, in label order in the result.
    assert!(carried_by(none, &[0.1, 0.3, 0.2]).is_empty());
    assert_eq!(carried_by(at_least(1), &[0.1, 0.3, 0.2]), ["teen"]);
    assert_eq!(carried_by(at_least(2), &[0.1, 0.3, 0.2]), ["teen", "mature"]);
    // Exactly k: the k most probable whatever the thresholds; ties go to the label listed first.
    let exactly = Limits { min_labels: 2, top_k: Some(2) };
    assert_eq!(carried_by(exactly, &[0.9, 0.8, 0.95]), ["general", "mature"]);
    assert_eq!(carried_by(exactly, &[0.4, 0.4, 0.4]), ["general", "teen"]);
    assert_eq!(carried_by(Limits { min_labels: 0, top_k: Some(1) }, &[0.7, 0.7, 0.1]), ["general"]);
    // A floor never removes a label over its threshold, and a cap never adds one.
    assert_eq!(carried_by(Limits { min_labels: 1, top_k: Some(3) }, &[0.6, 0.7, 0.8]).len(), 3);
}

#[test]
fn label_limits_are_kept_in_decision_json_and_checked_on_load() {
    let labels = three();
    let limits = Limits { min_labels: 1, top_k: Some(2) };
    let decision = Decision { rule: per_label_rule(&[0.3, 0.5, 0.9], limits), chosen_by: "set by hand".into() };
    assert!(decision.describe().ends_with("; at least 1 and at most 2 labels a document"), "{}", decision.describe());
    let dir = tempfile::tempdir().unwrap();
    decision.save(dir.path()).unwrap();
    let text = std::fs::read_to_string(dir.path().join(DECISION_FILE)).unwrap();
    assert!(text.contains("\"min_labels\": 1") && text.contains("\"top_k\": 2"), "{text}");
    assert_eq!(Decision::load(dir.path(), &labels).unwrap(), Some(decision));
    // Without limits the file has neither key (as before limits existed).
    let plain = Decision { rule: per_label_rule(&[0.3, 0.5, 0.9], Limits::default()), chosen_by: String::new() };
    let text = serde_json::to_string(&plain).unwrap();
    assert!(!text.contains("min_labels") && !text.contains("top_k"), "{text}");

    for (limits, why) in [
        (Limits { min_labels: 0, top_k: Some(0) }, "top_k is 0"),
        (Limits { min_labels: 4, top_k: None }, "min_labels is 4 but the model has 3 labels"),
        (Limits { min_labels: 2, top_k: Some(1) }, "top_k (1) is below min_labels (2)"),
    ] {
        let bad = Decision { rule: per_label_rule(&[0.5, 0.5, 0.5], limits), chosen_by: String::new() };
        let err = bad.check(&labels).unwrap_err();
        assert!(err.contains(why), "{err}");
    }
    let single: std::result::Result<Decision, _> =
        serde_json::from_str(r#"{"positive": "rain", "threshold": 0.4, "top_k": 1}"#);
    assert!(single.unwrap_err().to_string().contains("are for multi-label models"));
}
