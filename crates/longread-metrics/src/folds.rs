//! Stratified K-fold splits: every fold holds about 1/K of each class, seeded.

use crate::bootstrap::SplitMix64;

/// The held-out document indices of each of `k` folds of `labels` (class ids): each class's
/// documents shuffled with `seed` and dealt round-robin, so fold sizes differ by at most one
/// per class.
pub fn stratified_folds(labels: &[usize], k: usize, seed: u64) -> Vec<Vec<usize>> {
    let classes = labels.iter().max().map_or(0, |m| m + 1);
    let mut rng = SplitMix64(seed);
    let mut folds = vec![Vec::new(); k];
    let mut next = 0;
    for class in 0..classes {
        let mut members: Vec<usize> = (0..labels.len()).filter(|&i| labels[i] == class).collect();
        rng.shuffle(&mut members);
        for i in members {
            folds[next % k].push(i);
            next += 1;
        }
    }
    for fold in &mut folds {
        fold.sort_unstable();
    }
    folds
}

/// Mean and (population) standard deviation of per-fold scores.
pub fn mean_std(scores: &[f64]) -> (f64, f64) {
    let n = scores.len().max(1) as f64;
    let mean = scores.iter().sum::<f64>() / n;
    (mean, (scores.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_partition_the_documents_and_keep_the_class_balance() {
        let labels: Vec<usize> = (0..100).map(|i| usize::from(i % 4 == 0)).collect();
        let folds = stratified_folds(&labels, 5, 7);
        let mut all: Vec<usize> = folds.concat();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        for fold in &folds {
            assert_eq!(fold.len(), 20);
            assert_eq!(fold.iter().filter(|&&i| labels[i] == 1).count(), 5);
        }
        assert_eq!(folds, stratified_folds(&labels, 5, 7));
        assert_ne!(folds, stratified_folds(&labels, 5, 8));
    }

    #[test]
    fn mean_and_population_standard_deviation() {
        let (mean, std) = mean_std(&[0.5, 0.7]);
        assert!((mean - 0.6).abs() < 1e-12 && (std - 0.1).abs() < 1e-12, "{mean} ± {std}");
        assert_eq!(mean_std(&[]), (0.0, 0.0));
    }
}
