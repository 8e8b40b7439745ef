//! Tuning a [`Rule`] on labelled documents: the threshold (two labels) or the label biases
//! (three or more) that maximize a metric there.

use longread_metrics::{ConfusionMatrix, Report};
use longread_model::error::{ModelError, Result};

use super::{biased_argmax, label_at, log_probabilities, Rule};

/// The most values [`tune`] tries for a threshold, or for one label's bias in a round.
pub const MAX_CANDIDATES: usize = 1000;

/// The most rounds of label-by-label bias search (each round tries every label but the
/// first; it stops early when a round finds nothing better).
const MAX_ROUNDS: usize = 5;

/// What [`tune`] found.
#[derive(Debug, Clone)]
pub struct Tuned {
    /// The rule (its labels are the model's).
    pub rule: Rule,
    /// The metrics with the most probable label (for two labels, the threshold 0.5).
    pub at_default: Report,
    /// The metrics with `rule`.
    pub at_threshold: Report,
}

/// The rule that maximizes `metric` on these documents (document i has label index
/// `truth[i]` and the label probabilities `probabilities[i]`): with two labels, the threshold
/// on the second label's probability; with more, a bias per label added to ln(probability)
/// (the first label's stays 0), found label by label over a few rounds. The candidates lie
/// halfway between the values at which a document's label changes (at most
/// [`MAX_CANDIDATES`], evenly spaced among them, so that a large set costs seconds); ties go
/// to the threshold nearest 0.5 or the bias nearest 0, so that a rule moves only as far as
/// the data asks.
pub fn tune<R: AsRef<[f32]>>(
    labels: &[String],
    truth: &[usize],
    probabilities: &[R],
    metric: impl Fn(&Report) -> f64,
) -> Result<Tuned> {
    let invalid = |m: String| ModelError::InvalidInput(m);
    if labels.len() < 2 {
        return Err(invalid(format!("a decision rule needs a model with two or more labels, not {}", labels.len())));
    }
    if truth.len() != probabilities.len() || truth.is_empty() {
        return Err(invalid(format!("{} labels for {} probability rows", truth.len(), probabilities.len())));
    }
    let rows: Vec<&[f32]> = probabilities.iter().map(AsRef::as_ref).collect();
    if rows.iter().any(|r| r.len() != labels.len()) {
        return Err(invalid(format!("a probability row does not have one value per label ({})", labels.len())));
    }
    if let Some(&t) = truth.iter().find(|&&t| t >= labels.len()) {
        return Err(invalid(format!("label index {t} is out of range for {} labels", labels.len())));
    }
    if rows.iter().flat_map(|r| r.iter()).any(|p| !p.is_finite()) {
        return Err(invalid("a probability is not a finite number".into()));
    }
    let report_of = |predicted: &[usize]| longread_metrics::evaluate(labels, truth, predicted).map_err(invalid);
    if labels.len() == 2 {
        let positive: Vec<f32> = rows.iter().map(|r| r[1]).collect();
        let report_at = |t: f32| report_of(&positive.iter().map(|&p| label_at(p, t)).collect::<Vec<_>>());
        let threshold = tune_threshold(&positive, |t| Ok(metric(&report_at(t)?)))?;
        return Ok(Tuned {
            rule: Rule::Threshold { positive: labels[1].clone(), threshold },
            at_default: report_at(0.5)?,
            at_threshold: report_at(threshold)?,
        });
    }
    let log_p: Vec<Vec<f64>> = rows.iter().map(|r| log_probabilities(r)).collect();
    let report_at = |b: &[f64]| report_of(&log_p.iter().map(|lp| biased_argmax(lp, b)).collect::<Vec<_>>());
    let (biases, _) =
        tune_biases(&log_p, truth, |cm| Ok(metric(&longread_metrics::evaluate_counts(labels, cm).map_err(invalid)?)))?;
    Ok(Tuned {
        rule: Rule::Biases(labels.iter().cloned().zip(biases.iter().map(|&b| b as f32)).collect()),
        at_default: report_at(&vec![0.0; labels.len()])?,
        at_threshold: report_at(&biases)?,
    })
}

/// At most [`MAX_CANDIDATES`] of the midpoints between consecutive distinct `values` and the
/// bounds `outside` (a value below all and one above all, so that a rule may give every
/// document one label), evenly spaced.
pub(super) fn candidates(mut values: Vec<f64>, outside: impl Fn(f64, f64) -> [f64; 2]) -> Vec<f64> {
    values.retain(|v| v.is_finite());
    let lowest = values.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if lowest.is_finite() {
        values.extend(outside(lowest, highest));
    }
    values.sort_by(f64::total_cmp);
    values.dedup();
    let midpoints: Vec<f64> = values.windows(2).map(|w| w[0] + (w[1] - w[0]) / 2.0).collect();
    let step = midpoints.len().div_ceil(MAX_CANDIDATES).max(1);
    midpoints.into_iter().step_by(step).collect()
}

/// The threshold on `positive` that scores best (`score`), nearest 0.5 among equals.
fn tune_threshold(positive: &[f32], score: impl Fn(f32) -> Result<f64>) -> Result<f32> {
    let values = positive.iter().map(|&p| f64::from(p)).collect();
    let mut best = (0.5f32, score(0.5)?);
    // Probabilities lie in [0, 1]: bounded by 0 and 1.
    let values = candidates(values, |_, _| [0.0, 1.0]);
    for t in values.into_iter().map(|t| t as f32).filter(|&t| t > 0.0 && t < 1.0) {
        let s = score(t)?;
        if s > best.1 || (s == best.1 && (t - 0.5).abs() < (best.0 - 0.5).abs()) {
            best = (t, s);
        }
    }
    Ok(best.0)
}

/// Label biases (the first 0) that score best (`score`, of the confusion matrix of the labels
/// they give) on documents with these ln(probabilities) and `truth` labels, and that score:
/// coordinate ascent, one label's bias at a time over the values at which a document would
/// change label, for at most [`MAX_ROUNDS`] rounds. Values are rounded to f32 as they are
/// tried, so the kept biases label the documents as they were scored. Each label's sweep
/// finds, per document, the first candidate at which it takes the label (a binary search: the
/// test is monotone in the bias), then moves documents between the counts as the candidates
/// rise: O(n log K + K L²) per label instead of classifying every document K times (which took
/// 28 s for 20,000 documents and 10 labels).
pub(super) fn tune_biases(
    log_p: &[Vec<f64>],
    truth: &[usize],
    score: impl Fn(ConfusionMatrix) -> Result<f64>,
) -> Result<(Vec<f64>, f64)> {
    let labels = log_p[0].len();
    let counts_of = |predicted: &mut dyn Iterator<Item = usize>| {
        let mut counts = vec![vec![0usize; labels]; labels];
        for (&t, p) in truth.iter().zip(predicted) {
            counts[t][p] += 1;
        }
        counts
    };
    let mut biases = vec![0.0; labels];
    let start = counts_of(&mut log_p.iter().map(|lp| biased_argmax(lp, &biases)));
    let mut best = score(ConfusionMatrix { counts: start })?;
    for _ in 0..MAX_ROUNDS {
        let before = best;
        for c in 1..labels {
            // Each document's label while c does not win — the first of the others with the
            // highest ln p + bias — and that sum.
            let others: Vec<(usize, f64)> = log_p
                .iter()
                .map(|lp| {
                    let mut top = 0;
                    for j in 1..labels {
                        if j != c && lp[j] + biases[j] > lp[top] + biases[top] {
                            top = j;
                        }
                    }
                    (top, lp[top] + biases[top])
                })
                .collect();
            // Document d takes label c once its bias passes the best of the others (a tie goes
            // to the lower index, as `biased_argmax` gives it).
            let wins = |d: usize, v: f64| {
                let (top, other) = others[d];
                let mine = log_p[d][c] + v;
                mine > other || (mine == other && c < top)
            };
            let switch_points = others.iter().zip(log_p).map(|((_, other), lp)| other - lp[c]).collect();
            let tried: Vec<f64> = candidates(switch_points, |lowest, highest| [lowest - 2.0, highest + 2.0])
                .into_iter()
                .map(|v| f64::from(v as f32))
                .collect();
            let mut switch_at: Vec<Vec<usize>> = vec![Vec::new(); tried.len() + 1];
            for d in 0..log_p.len() {
                switch_at[tried.partition_point(|&v| !wins(d, v))].push(d);
            }
            let mut counts = counts_of(&mut others.iter().map(|&(top, _)| top));
            let mut chosen = biases[c];
            for (i, &v) in tried.iter().enumerate() {
                for &d in &switch_at[i] {
                    counts[truth[d]][others[d].0] -= 1;
                    counts[truth[d]][c] += 1;
                }
                let s = score(ConfusionMatrix { counts: counts.clone() })?;
                if s > best || (s == best && v.abs() < chosen.abs()) {
                    best = s;
                    chosen = v;
                }
            }
            biases[c] = chosen;
        }
        if best <= before {
            break;
        }
    }
    Ok((biases, best))
}

/// The least F1 a label's tuned threshold must reach on the tuning documents to be kept: below
/// it, the label's threshold is raised above every probability it has there, so that it is
/// carried only by documents the model is surer of than of any it saw (Yang 2001's SCutFBR,
/// with the fbr = 0.1 of Lewis et al. 2004 on RCV1). Without it a rare label whose few
/// carriers score low takes a threshold near 0 for an F1 of a few hundredths, and is then
/// carried by nearly every document.
pub const F1_FLOOR: f64 = 0.1;

/// Multi-label: for each label, the threshold that maximizes that label's F1 on these
/// documents (document i carries label l when `truth[i][l]`; its probabilities are
/// `probabilities[i]`), which also maximizes macro-F1. Candidates lie halfway between
/// consecutive distinct probabilities of the label (every one of them: a sweep over the
/// documents sorted by probability); ties go to the threshold nearest 0.5, and a label no
/// threshold helps keeps 0.5: one that none of the documents carries, or (see [`F1_FLOOR`])
/// one whose best F1 stays under the floor, whose threshold instead goes above its highest
/// probability (never below 0.5).
pub fn tune_per_label<R: AsRef<[f32]>>(labels: &[String], truth: &[Vec<bool>], probabilities: &[R]) -> Rule {
    let thresholds = labels
        .iter()
        .enumerate()
        .map(|(l, name)| {
            let mut scored: Vec<(f32, bool)> =
                probabilities.iter().zip(truth).map(|(p, t)| (p.as_ref()[l], t[l])).collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            let positives = scored.iter().filter(|(_, t)| *t).count();
            let f1 = |tp: usize, fp: usize| match tp {
                0 => 0.0,
                _ => 2.0 * tp as f64 / (2 * tp + fp + (positives - tp)) as f64,
            };
            let at_half = scored.iter().filter(|(p, _)| *p >= super::MULTI_LABEL_DEFAULT);
            let (tp, fp) = at_half.fold((0, 0), |(tp, fp), (_, t)| if *t { (tp + 1, fp) } else { (tp, fp + 1) });
            let mut best = (super::MULTI_LABEL_DEFAULT, f1(tp, fp));
            let (mut tp, mut fp) = (0, 0);
            for (i, &(p, carries)) in scored.iter().enumerate() {
                if carries {
                    tp += 1;
                } else {
                    fp += 1;
                }
                let next = scored.get(i + 1).map_or(0.0, |s| s.0);
                let t = (p + next) / 2.0;
                // Between this document and the next (a midpoint that rounds onto either is no cut).
                if !(t > next && t <= p && t > 0.0 && t < 1.0) {
                    continue;
                }
                let score = f1(tp, fp);
                if score > best.1 || (score == best.1 && (t - 0.5).abs() < (best.0 - 0.5).abs()) {
                    best = (t, score);
                }
            }
            if positives > 0 && best.1 < F1_FLOOR {
                // Just above the highest probability (kept under 1), and never below 0.5.
                let highest = scored.first().map_or(0.0, |s| s.0);
                let above = f32::from_bits(highest.to_bits() + 1).min(1.0 - f32::EPSILON / 2.0);
                return (name.clone(), above.max(super::MULTI_LABEL_DEFAULT));
            }
            (name.clone(), best.0)
        })
        .collect();
    Rule::PerLabel { thresholds, limits: super::Limits::default() }
}
