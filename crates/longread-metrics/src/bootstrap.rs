//! Bootstrap confidence intervals of a metric and paired bootstrap tests between two models
//! scored on the same documents (Efron & Tibshirani 1993; Berg-Kirkpatrick et al. 2012): the
//! documents are resampled with replacement, `resamples` times, with a seeded generator.

use std::ops::RangeInclusive;

use serde::Serialize;

use crate::{evaluate, Report};

/// A metric of a [`Report`], e.g. `|r| r.macro_f1`.
pub type Metric = fn(&Report) -> f64;

/// A percentile interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

/// Resampling settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bootstrap {
    /// Number of resamples (1,000 is usual).
    pub resamples: usize,
    /// Seed of the resampling (the same seed gives the same intervals).
    pub seed: u64,
    /// Coverage of the intervals (0.95).
    pub level: f64,
}

impl Default for Bootstrap {
    fn default() -> Self {
        Self { resamples: 1000, seed: 0, level: 0.95 }
    }
}

/// The numbers of resamples a comparison accepts: with fewer, the tails of a 95% interval rest
/// on two or three resamples; more cost minutes on a large test set for no visible change.
pub const RESAMPLES: RangeInclusive<usize> = 100..=100_000;

impl Bootstrap {
    /// 95% intervals from `resamples` resamples (within [`RESAMPLES`]) drawn with `seed`.
    pub fn new(resamples: usize, seed: u64) -> Result<Self, String> {
        let settings = Self { resamples, seed, ..Self::default() };
        settings.check()?;
        Ok(settings)
    }

    /// Checks the settings: `resamples` within [`RESAMPLES`], `level` strictly between 0 and 1.
    pub fn check(&self) -> Result<(), String> {
        if !RESAMPLES.contains(&self.resamples) {
            return Err(format!(
                "bootstrap must be between {} and {} resamples, not {}",
                RESAMPLES.start(),
                RESAMPLES.end(),
                self.resamples
            ));
        }
        if !(self.level > 0.0 && self.level < 1.0) {
            return Err(format!("the bootstrap's interval level must be between 0 and 1, not {}", self.level));
        }
        Ok(())
    }

    /// The resamples: each a list of `n` document indices drawn with replacement.
    fn samples(&self, n: usize) -> impl Iterator<Item = Vec<usize>> + '_ {
        let mut rng = SplitMix64(self.seed);
        (0..self.resamples).map(move |_| (0..n).map(|_| (rng.next_u64() % n as u64) as usize).collect())
    }

    /// The percentile interval of `metric` over resamples of the documents (`truth` and
    /// `predicted` are label indices into `labels`).
    pub fn interval(&self, labels: &[String], truth: &[usize], predicted: &[usize], metric: Metric) -> Interval {
        self.interval_of(truth.len(), |idx| score_on(labels, truth, predicted, idx, metric))
    }

    /// The percentile interval of `score` over resamples of `n` documents: `score` takes a
    /// resample's document indices (they may repeat) and gives `None` where it is undefined
    /// (such resamples are left out). For metrics a [`Report`] does not hold, such as ROC-AUC.
    pub fn interval_of(&self, n: usize, score: impl Fn(&[usize]) -> Option<f64>) -> Interval {
        let mut values: Vec<f64> = self.samples(n).filter_map(|idx| score(&idx)).collect();
        percentile_interval(&mut values, self.level)
    }

    /// Two-sided p-value of the difference in `metric` between models `a` and `b` on the same
    /// documents: twice the share of paired resamples on which the difference has the other
    /// sign than, or is zero instead of, the one observed (capped at 1). Small values say the
    /// difference is unlikely to be a fluke of which documents were drawn.
    pub fn paired_p_value(&self, labels: &[String], truth: &[usize], a: &[usize], b: &[usize], metric: Metric) -> f64 {
        let score = |pred: &[usize], idx: &[usize]| score_on(labels, truth, pred, idx, metric);
        self.paired_p_value_of(truth.len(), |idx| score(a, idx), |idx| score(b, idx))
    }

    /// [`Self::paired_p_value`] of two scores of resamples of the same `n` documents (see
    /// [`Self::interval_of`]).
    pub fn paired_p_value_of(
        &self,
        n: usize,
        score_a: impl Fn(&[usize]) -> Option<f64>,
        score_b: impl Fn(&[usize]) -> Option<f64>,
    ) -> f64 {
        let all: Vec<usize> = (0..n).collect();
        let (Some(sa), Some(sb)) = (score_a(&all), score_b(&all)) else { return 1.0 };
        let observed = sb - sa;
        let (mut against, mut total) = (0usize, 0usize);
        for idx in self.samples(n) {
            if let (Some(x), Some(y)) = (score_a(&idx), score_b(&idx)) {
                let delta = y - x;
                total += 1;
                if observed == 0.0 || delta * observed.signum() <= 0.0 {
                    against += 1;
                }
            }
        }
        if total == 0 {
            return 1.0;
        }
        (2.0 * against as f64 / total as f64).min(1.0)
    }
}

/// `metric` on the documents `idx` (a resample: indices may repeat), or `None` when there is
/// nothing to score.
fn score_on(labels: &[String], truth: &[usize], predicted: &[usize], idx: &[usize], metric: Metric) -> Option<f64> {
    let (t, p): (Vec<usize>, Vec<usize>) = idx.iter().map(|&i| (truth[i], predicted[i])).unzip();
    evaluate(labels, &t, &p).ok().map(|r| metric(&r))
}

/// The central `level` interval of `values` (sorted in place), by nearest-rank percentiles.
fn percentile_interval(values: &mut [f64], level: f64) -> Interval {
    if values.is_empty() {
        return Interval { low: f64::NAN, high: f64::NAN };
    }
    values.sort_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    let at = |q: f64| values[((q * values.len() as f64).floor() as usize).min(values.len() - 1)];
    Interval { low: at(tail), high: at(1.0 - tail) }
}

/// A tiny, well-known generator (SplitMix64) for reproducible resamples and folds without a
/// dependency.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, (self.next_u64() % (i as u64 + 1)) as usize);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn settings_outside_the_accepted_range_are_refused_with_the_range() {
        assert_eq!(Bootstrap::new(1000, 7), Ok(Bootstrap { resamples: 1000, seed: 7, level: 0.95 }));
        assert!(Bootstrap::new(*RESAMPLES.start(), 0).is_ok() && Bootstrap::new(*RESAMPLES.end(), 0).is_ok());
        for resamples in [0, 99, 100_001] {
            let error = Bootstrap::new(resamples, 0).unwrap_err();
            assert!(error.contains("between 100 and 100000") && error.contains(&resamples.to_string()), "{error}");
        }
        for level in [0.0, 1.0, f64::NAN] {
            let error = Bootstrap { level, ..Bootstrap::default() }.check().unwrap_err();
            assert!(error.contains("level"), "{error}");
        }
    }

    #[test]
    fn the_interval_holds_the_observed_accuracy_and_narrows_with_more_documents() {
        let boot = Bootstrap::default();
        let width = |n: usize| {
            let truth: Vec<usize> = (0..n).map(|i| i % 2).collect();
            // 80% right.
            let pred: Vec<usize> = (0..n).map(|i| if i % 5 == 0 { 1 - truth[i] } else { truth[i] }).collect();
            let ci = boot.interval(&labels(), &truth, &pred, |r| r.accuracy);
            assert!(ci.low <= 0.8 && 0.8 <= ci.high, "{ci:?}");
            ci.high - ci.low
        };
        let (small, large) = (width(50), width(2000));
        assert!(large < small / 3.0, "{small} vs {large}");
        // Binomial standard error at n = 2000: sqrt(0.8·0.2/2000) ≈ 0.0089, so the 95% width ≈ 0.035.
        assert!((large - 0.035).abs() < 0.01, "width {large}");
    }

    #[test]
    fn paired_p_values_separate_a_real_gap_from_none() {
        let boot = Bootstrap::default();
        let n = 400;
        let truth: Vec<usize> = (0..n).map(|i| i % 2).collect();
        let good: Vec<usize> = (0..n).map(|i| if i % 10 == 0 { 1 - truth[i] } else { truth[i] }).collect();
        let poor: Vec<usize> = (0..n).map(|i| if i % 3 == 0 { 1 - truth[i] } else { truth[i] }).collect();
        let p = boot.paired_p_value(&labels(), &truth, &poor, &good, |r| r.accuracy);
        assert!(p < 0.01, "90% vs 67% right on 400 documents: p = {p}");
        assert_eq!(boot.paired_p_value(&labels(), &truth, &good, &good, |r| r.accuracy), 1.0);
        // The same seed gives the same answer.
        assert_eq!(p, boot.paired_p_value(&labels(), &truth, &poor, &good, |r| r.accuracy));
    }
}
