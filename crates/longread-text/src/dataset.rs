//! A labelled dataset: documents with one label column per task, resolved to label indices,
//! and its stratified, seeded dev split — what every trainer and evaluation reads.

use crate::error::{Result, TextError};
use crate::labelled::{resolve_column, stratified_split, Example};

/// Labelled documents: `labels[task][document]` indexes that task's label names (`None` where
/// a multi-task line lacks the task's column).
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledDataset {
    /// The documents as read (text, id, line).
    pub examples: Vec<Example>,
    /// Label indices per task, then per document.
    pub labels: Vec<Vec<Option<usize>>>,
    /// Where the documents came from, for messages.
    pub source: String,
}

impl LabelledDataset {
    /// Resolves the examples' label columns (read in task order) against each task's label
    /// names; an unknown label is an error naming its line.
    pub fn resolve(examples: Vec<Example>, task_labels: &[&[String]], source: &str) -> Result<Self> {
        let labels = task_labels
            .iter()
            .enumerate()
            .map(|(t, names)| resolve_column(&examples, t, names, source))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self { examples, labels, source: source.to_owned() })
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.examples.len()
    }

    /// True without documents.
    pub fn is_empty(&self) -> bool {
        self.examples.is_empty()
    }

    /// The documents at `indices`, in that order.
    pub fn pick(&self, indices: &[usize]) -> Self {
        Self {
            examples: indices.iter().map(|&i| self.examples[i].clone()).collect(),
            labels: self.labels.iter().map(|task| indices.iter().map(|&i| task[i]).collect()).collect(),
            source: self.source.clone(),
        }
    }

    /// Splits off `fraction` of the documents as a dev set, stratified by the primary task's
    /// label (documents without it form a stratum of their own) and seeded: returns (train,
    /// dev). Refused when the fraction is outside (0, 1) or leaves either side empty.
    pub fn split_dev(&self, fraction: f64, seed: u64) -> Result<(Self, Self)> {
        let (train, dev) = self.dev_split_indices(fraction, seed)?;
        Ok((self.pick(&train), self.pick(&dev)))
    }

    /// The document indices of [`LabelledDataset::split_dev`]: (train, dev), each sorted.
    pub fn dev_split_indices(&self, fraction: f64, seed: u64) -> Result<(Vec<usize>, Vec<usize>)> {
        if !(0.0 < fraction && fraction < 1.0) {
            return Err(TextError::Split("--dev-split must be between 0 and 1 (or give --dev FILE)".into()));
        }
        let primary = self.labels.first().map(Vec::as_slice).unwrap_or_default();
        let unlabelled = primary.iter().flatten().max().map_or(0, |m| m + 1);
        let strata: Vec<usize> = primary.iter().map(|l| l.unwrap_or(unlabelled)).collect();
        let (train, dev) = stratified_split(&strata, fraction, seed);
        if train.is_empty() || dev.is_empty() {
            return Err(TextError::Split(format!("--dev-split {fraction} leaves an empty training or dev set")));
        }
        Ok((train, dev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labelled::read_labelled_columns;

    fn data() -> LabelledDataset {
        let lines: String = (0..20)
            .map(|i| {
                let topic = if i % 5 == 0 { String::new() } else { format!(", \"topic\": \"t{}\"", i % 2) };
                format!("{{\"text\": \"doc {i}\", \"label\": \"{}\"{topic}}}\n", ["a", "b"][i % 2])
            })
            .collect();
        let columns = ["label".to_string(), "topic".to_string()];
        let examples = read_labelled_columns(lines.as_bytes(), "in.jsonl", &columns).unwrap();
        let (ab, topics) = (vec!["a".to_string(), "b".to_string()], vec!["t0".to_string(), "t1".to_string()]);
        LabelledDataset::resolve(examples, &[&ab, &topics], "in.jsonl").unwrap()
    }

    #[test]
    fn resolves_every_task_column_and_keeps_missing_labels() {
        let d = data();
        assert_eq!((d.len(), d.labels.len()), (20, 2));
        assert_eq!(d.labels[0][3], Some(1));
        assert_eq!((d.labels[1][5], d.labels[1][3]), (None, Some(1)));
    }

    #[test]
    fn the_dev_split_is_stratified_seeded_and_disjoint() {
        let d = data();
        let (train, dev) = d.split_dev(0.2, 7).unwrap();
        assert_eq!((train.len(), dev.len()), (16, 4));
        let count = |s: &LabelledDataset, l| s.labels[0].iter().filter(|&&x| x == Some(l)).count();
        assert_eq!((count(&dev, 0), count(&dev, 1)), (2, 2), "each label gives its share");
        let ids = |s: &LabelledDataset| s.examples.iter().map(|e| e.line).collect::<Vec<_>>();
        assert!(ids(&dev).iter().all(|i| !ids(&train).contains(i)));
        assert_eq!(d.split_dev(0.2, 7).unwrap().1, dev, "same seed, same split");
        assert_ne!(ids(&d.split_dev(0.2, 8).unwrap().1), ids(&dev), "another seed, another split");
        assert!(d.split_dev(1.0, 7).is_err() && d.split_dev(0.0, 7).is_err());
    }
}
