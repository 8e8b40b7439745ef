//! Data for masked-language-model pretraining as RoBERTa does it (Liu et al. 2019):
//! sequences packed from contiguous text up to a length (FULL-SENTENCES, crossing document
//! boundaries with a separator), and dynamic masking — a new mask each time a sequence is
//! served, as transformers' `DataCollatorForLanguageModeling` draws it: every ordinary token is
//! selected with probability `mask_prob`; of the selected, 80% become `<mask>`, 10% a random
//! token, 10% stay; special tokens and padding are never selected.

use rand::Rng;

/// Label of a position that is not predicted (PyTorch's `ignore_index`).
pub const IGNORE: i64 = -100;

/// Packs token streams into sequences of at most `seq_len` tokens: the documents' ids (without
/// special tokens) are concatenated with `sep` between documents and cut into windows of
/// `seq_len − 2`, each wrapped as `bos … eos`.
pub fn pack_sequences(documents: &[Vec<u32>], seq_len: usize, bos: u32, eos: u32, sep: u32) -> Vec<Vec<u32>> {
    let window = seq_len.saturating_sub(2).max(1);
    let mut stream: Vec<u32> = Vec::new();
    for (i, doc) in documents.iter().filter(|d| !d.is_empty()).enumerate() {
        if i > 0 {
            stream.push(sep);
        }
        stream.extend_from_slice(doc);
    }
    stream
        .chunks(window)
        .map(|w| {
            let mut seq = Vec::with_capacity(w.len() + 2);
            seq.push(bos);
            seq.extend_from_slice(w);
            seq.push(eos);
            seq
        })
        .collect()
}

/// Splits packed sequences into (held-out, training): a seeded shuffle, then the first
/// `ceil(fraction · n)` (at least one) are held out.
pub fn split_held_out(mut sequences: Vec<Vec<u32>>, fraction: f64, seed: u64) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    sequences.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    let n = ((sequences.len() as f64 * fraction).ceil() as usize).max(1).min(sequences.len());
    let train = sequences.split_off(n);
    (sequences, train)
}

/// Dynamic masking settings.
#[derive(Debug, Clone)]
pub struct Masker {
    /// Probability that an ordinary token is selected (0.15).
    pub mask_prob: f64,
    /// Id of `<mask>`.
    pub mask_id: u32,
    /// Random replacements are drawn from `0..vocab_size`.
    pub vocab_size: u32,
    /// Ids that are never selected (special tokens, padding).
    pub special_ids: Vec<u32>,
}

/// One served sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Masked {
    /// Input ids after masking.
    pub input_ids: Vec<u32>,
    /// The original id where a position is predicted, [`IGNORE`] elsewhere.
    pub labels: Vec<i64>,
}

impl Masker {
    /// Draws a fresh mask for `ids` from `rng`.
    pub fn mask(&self, ids: &[u32], rng: &mut impl Rng) -> Masked {
        let mut input_ids = ids.to_vec();
        let mut labels = vec![IGNORE; ids.len()];
        for (i, &id) in ids.iter().enumerate() {
            if self.special_ids.contains(&id) || rng.random::<f64>() >= self.mask_prob {
                continue;
            }
            labels[i] = id as i64;
            let r = rng.random::<f64>();
            if r < 0.8 {
                input_ids[i] = self.mask_id;
            } else if r < 0.9 {
                input_ids[i] = rng.random_range(0..self.vocab_size);
            }
        }
        Masked { input_ids, labels }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn packing_keeps_every_token_in_order_within_the_length() {
        let docs = vec![(10..40).collect::<Vec<u32>>(), vec![], (100..107).collect()];
        let seqs = pack_sequences(&docs, 16, 0, 2, 2);
        assert!(seqs.iter().all(|s| s.len() <= 16 && s[0] == 0 && *s.last().unwrap() == 2));
        let inner: Vec<u32> = seqs.iter().flat_map(|s| s[1..s.len() - 1].to_vec()).collect();
        let mut expected: Vec<u32> = (10..40).collect();
        expected.push(2);
        expected.extend(100..107);
        assert_eq!(inner, expected, "contiguous text across documents, separated by </s>");
    }

    #[test]
    fn held_out_split_is_seeded_and_a_partition() {
        let seqs: Vec<Vec<u32>> = (0..40).map(|i| vec![i]).collect();
        let (held, train) = split_held_out(seqs.clone(), 0.1, 5);
        assert_eq!((held.len(), train.len()), (4, 36));
        let mut all: Vec<Vec<u32>> = held.iter().chain(&train).cloned().collect();
        all.sort();
        assert_eq!(all, seqs);
        assert_eq!(split_held_out(seqs.clone(), 0.1, 5).0, held);
        assert_eq!(split_held_out(seqs[..3].to_vec(), 0.01, 5).0.len(), 1, "at least one");
    }

    #[test]
    fn masking_statistics_follow_the_recipe() {
        let masker = Masker { mask_prob: 0.15, mask_id: 4, vocab_size: 1000, special_ids: vec![0, 1, 2] };
        // <s> 500 ordinary tokens </s> and padding.
        let mut ids = vec![0u32];
        ids.extend((0..500).map(|i| 10 + i % 900));
        ids.extend([2, 1, 1, 1]);
        let mut rng = StdRng::seed_from_u64(3);
        let (mut selected, mut to_mask, mut random, mut kept, mut ordinary) = (0, 0, 0, 0, 0);
        for _ in 0..200 {
            let m = masker.mask(&ids, &mut rng);
            for (i, (&orig, &label)) in ids.iter().zip(&m.labels).enumerate() {
                if masker.special_ids.contains(&orig) {
                    assert_eq!((label, m.input_ids[i]), (IGNORE, orig), "specials and padding are never selected");
                    continue;
                }
                ordinary += 1;
                if label == IGNORE {
                    assert_eq!(m.input_ids[i], orig, "unselected tokens are untouched");
                    continue;
                }
                assert_eq!(label, orig as i64);
                selected += 1;
                match m.input_ids[i] {
                    4 => to_mask += 1,
                    x if x == orig => kept += 1,
                    _ => random += 1,
                }
            }
        }
        let frac = |a: usize, b: usize| a as f64 / b as f64;
        assert!((frac(selected, ordinary) - 0.15).abs() < 0.005, "selected {}", frac(selected, ordinary));
        assert!((frac(to_mask, selected) - 0.8).abs() < 0.01, "<mask> {}", frac(to_mask, selected));
        // A random replacement equal to the original counts as kept (probability 1/1000).
        assert!((frac(random, selected) - 0.1).abs() < 0.01, "random {}", frac(random, selected));
        assert!((frac(kept, selected) - 0.1).abs() < 0.01, "kept {}", frac(kept, selected));
    }

    #[test]
    fn each_serving_draws_a_new_mask() {
        let masker = Masker { mask_prob: 0.15, mask_id: 4, vocab_size: 1000, special_ids: vec![0, 1, 2] };
        let ids: Vec<u32> = (10..210).collect();
        let mut rng = StdRng::seed_from_u64(9);
        let (first, second) = (masker.mask(&ids, &mut rng), masker.mask(&ids, &mut rng));
        assert_ne!(first.labels, second.labels, "the same sequence gets another mask when served again");
        // Reproducible from the seed.
        let mut again = StdRng::seed_from_u64(9);
        assert_eq!(masker.mask(&ids, &mut again), first);
    }
}
