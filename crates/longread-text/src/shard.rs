//! One shard of an input (`longread predict --shard I/N`): for people who scale out with job
//! arrays (Kubernetes indexed jobs, Slurm arrays), each job classifies every N-th document.
//! Deterministic by position: a JSON-lines document by its line number, a file of a directory
//! by its place in the sorted listing; the N shards together hold each document exactly once.

use std::str::FromStr;

use crate::Document;

/// Shard `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which shard (0 ≤ index < count).
    pub index: usize,
    /// How many shards.
    pub count: usize,
}

impl FromStr for Shard {
    type Err = String;

    /// `I/N`, e.g. `0/3`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("a shard is I/N with 0 <= I < N (e.g. 0/3), not {s:?}");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (usize, usize) =
            (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

impl Shard {
    /// Whether the document at 0-based `position` of its input (the JSON-lines line number
    /// minus one when there is one) belongs to this shard.
    pub fn holds(&self, document: &Document, position: usize) -> bool {
        self.holds_position(document.line.map_or(position, |line| line.saturating_sub(1)))
    }

    /// Whether the item at 0-based `position` (a line, a file of a sorted listing) belongs to
    /// this shard.
    pub fn holds_position(&self, position: usize) -> bool {
        position % self.count == self.index
    }

    /// The documents of this shard, in input order.
    pub fn select(&self, documents: Vec<Document>) -> Vec<Document> {
        documents.into_iter().enumerate().filter(|(p, d)| self.holds(d, *p)).map(|(_, d)| d).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_refuse_nonsense() {
        assert_eq!("1/3".parse::<Shard>().unwrap(), Shard { index: 1, count: 3 });
        for bad in ["3/3", "1/0", "1", "a/3", "-1/3", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn shards_hold_every_document_once_by_line_number() {
        let docs: Vec<Document> = (0..10)
            .map(|i| {
                let mut d = Document::new(i, format!("text {i}"));
                d.line = Some(2 * i + 1); // blank lines between the records
                d
            })
            .collect();
        let mut seen: Vec<String> =
            (0..3).flat_map(|i| Shard { index: i, count: 3 }.select(docs.clone())).map(|d| d.text).collect();
        seen.sort();
        let mut all: Vec<String> = docs.iter().map(|d| d.text.clone()).collect();
        all.sort();
        assert_eq!(seen, all);
        let first: Vec<usize> = Shard { index: 0, count: 3 }.select(docs).iter().map(|d| d.line.unwrap()).collect();
        assert_eq!(first, vec![1, 7, 13, 19], "lines 1, 4, 7, 10 and 13, ... by line number");
    }
}
