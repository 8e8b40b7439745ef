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

/// The held-out document indices of each of `k` folds of multi-label documents (`labels[d]`:
/// the label ids document `d` carries, possibly none), by iterative stratification (Sechidis,
/// Tsoumakas and Vlahavas, "On the Stratification of Multi-Label Data", ECML PKDD 2011): the
/// rarest label's documents are dealt first, each to the fold that most lacks that label (ties:
/// the fold that most lacks documents, then at random with `seed`), so that rare labels reach
/// every fold they can; documents without labels fill the folds that most lack documents.
pub fn iterative_stratified_folds(labels: &[Vec<usize>], k: usize, seed: u64) -> Vec<Vec<usize>> {
    let k = k.max(1);
    let mut rng = SplitMix64(seed);
    let n_labels = labels.iter().flatten().max().map_or(0, |m| m + 1);
    // Desired documents per fold, and per label per fold (fractional, as in the paper).
    let mut wanted: Vec<f64> = vec![labels.len() as f64 / k as f64; k];
    let mut label_count = vec![0usize; n_labels];
    for doc in labels {
        for &l in doc {
            label_count[l] += 1;
        }
    }
    let mut wanted_label: Vec<Vec<f64>> = label_count.iter().map(|&c| vec![c as f64 / k as f64; k]).collect();
    let mut folds = vec![Vec::new(); k];
    let mut left: Vec<bool> = vec![true; labels.len()];
    let mut remaining = label_count.clone();
    // The fold among `candidates` with the largest `key`, ties broken at random.
    let pick = |candidates: Vec<usize>, key: &dyn Fn(usize) -> f64, rng: &mut SplitMix64| -> Vec<usize> {
        let best = candidates.iter().map(|&f| key(f)).fold(f64::NEG_INFINITY, f64::max);
        let mut tied: Vec<usize> = candidates.into_iter().filter(|&f| key(f) == best).collect();
        rng.shuffle(&mut tied);
        tied
    };
    // The label with the fewest documents still to deal (ties: the lowest id).
    let rarest = |remaining: &[usize]| (0..n_labels).filter(|&l| remaining[l] > 0).min_by_key(|&l| (remaining[l], l));
    while let Some(label) = rarest(&remaining) {
        let mut members: Vec<usize> = (0..labels.len()).filter(|&d| left[d] && labels[d].contains(&label)).collect();
        rng.shuffle(&mut members);
        for d in members {
            let by_label = pick((0..k).collect(), &|f| wanted_label[label][f], &mut rng);
            let by_size = pick(by_label, &|f| wanted[f], &mut rng);
            let fold = by_size[0];
            folds[fold].push(d);
            left[d] = false;
            wanted[fold] -= 1.0;
            for &l in &labels[d] {
                wanted_label[l][fold] -= 1.0;
                remaining[l] -= 1;
            }
        }
    }
    let mut unlabelled: Vec<usize> = (0..labels.len()).filter(|&d| left[d]).collect();
    rng.shuffle(&mut unlabelled);
    for d in unlabelled {
        let fold = pick((0..k).collect(), &|f| wanted[f], &mut rng)[0];
        folds[fold].push(d);
        wanted[fold] -= 1.0;
    }
    for fold in &mut folds {
        fold.sort_unstable();
    }
    folds
}

#[cfg(test)]
mod iterative_tests {
    use super::*;

    /// A skewed multi-label set: a frequent label, rarer ones, pairs, and documents with none.
    fn data() -> Vec<Vec<usize>> {
        let mut rng = SplitMix64(3);
        (0..500)
            .map(|_| {
                let r = rng.next_u64() % 100;
                match r {
                    0..=39 => vec![],
                    40..=74 => vec![0],
                    75..=84 => vec![0, 1],
                    85..=92 => vec![2],
                    93..=97 => vec![1, 3],
                    _ => vec![4],
                }
            })
            .collect()
    }

    #[test]
    fn every_document_is_held_out_once_and_folds_are_even() {
        let labels = data();
        let folds = iterative_stratified_folds(&labels, 5, 42);
        let mut seen: Vec<usize> = folds.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..labels.len()).collect::<Vec<_>>());
        for fold in &folds {
            assert!((fold.len() as i64 - 100).abs() <= 3, "fold of {}", fold.len());
        }
    }

    #[test]
    fn each_label_is_spread_over_the_folds_about_evenly() {
        let labels = data();
        let folds = iterative_stratified_folds(&labels, 5, 7);
        for label in 0..5 {
            let total = labels.iter().filter(|d| d.contains(&label)).count() as f64;
            for fold in &folds {
                let here = fold.iter().filter(|&&d| labels[d].contains(&label)).count() as f64;
                assert!((here - total / 5.0).abs() <= 1.5, "label {label}: {here} of {total} in a fold");
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_folds_and_another_seed_others() {
        let labels = data();
        assert_eq!(iterative_stratified_folds(&labels, 4, 1), iterative_stratified_folds(&labels, 4, 1));
        assert_ne!(iterative_stratified_folds(&labels, 4, 1), iterative_stratified_folds(&labels, 4, 2));
    }

    #[test]
    fn a_label_rarer_than_the_folds_reaches_as_many_folds_as_it_can() {
        let mut labels = vec![vec![]; 40];
        for d in [3, 17, 29] {
            labels[d] = vec![0];
        }
        let folds = iterative_stratified_folds(&labels, 5, 9);
        let with = folds.iter().filter(|f| f.iter().any(|&d| !labels[d].is_empty())).count();
        assert_eq!(with, 3);
    }
}
