//! Two checks of labelled data before a run: dev documents whose text is also a training
//! document (their dev scores measure memory, not the model: a dev split of a file with
//! repeated texts, or a dev file cut from the same pool), and texts the training data gives
//! different labels (the model is asked to learn both). Texts compare exactly, less the
//! whitespace around them.

use std::collections::HashMap;

use crate::dataset::LabelledDataset;

/// What [`check_overlap`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overlap {
    /// Dev documents whose text is a training document's.
    pub dev_in_train: usize,
    /// The first of them: (dev line, training line).
    pub first_shared: Option<(usize, usize)>,
    /// Training texts given more than one primary label.
    pub conflicting: usize,
    /// The first of them: the two lines.
    pub first_conflict: Option<(usize, usize)>,
}

/// Compares `dev` with `train`, and `train`'s primary labels among its repeated texts.
pub fn check_overlap(train: &LabelledDataset, dev: &LabelledDataset) -> Overlap {
    let primary = |d: &LabelledDataset, i: usize| d.labels.first().and_then(|l| l[i]);
    // Each training text's first line and label, and whether another label was seen for it.
    let mut seen: HashMap<&str, (usize, Option<usize>, bool)> = HashMap::with_capacity(train.len());
    let mut overlap = Overlap::default();
    for (i, example) in train.examples.iter().enumerate() {
        let label = primary(train, i);
        let entry = seen.entry(example.text.trim()).or_insert((example.line, label, false));
        let differs = label.is_some() && entry.1.is_some() && label != entry.1;
        if differs && !entry.2 {
            entry.2 = true;
            overlap.conflicting += 1;
            overlap.first_conflict.get_or_insert((entry.0, example.line));
        }
    }
    for example in &dev.examples {
        if let Some(&(line, _, _)) = seen.get(example.text.trim()) {
            overlap.dev_in_train += 1;
            overlap.first_shared.get_or_insert((example.line, line));
        }
    }
    overlap
}

impl Overlap {
    /// Warnings for people, naming the first case of each (empty when all is well).
    pub fn warnings(&self, train: &LabelledDataset, dev: &LabelledDataset) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some((dev_line, train_line)) = self.first_shared {
            let are =
                if self.dev_in_train == 1 { "is also a training document" } else { "are also training documents" };
            lines.push(format!(
                "warning: {} of {} dev documents {are} (first: {}:{dev_line} is {}:{train_line}); their dev scores \
                 measure memory, so the dev metric and the epoch it picks flatter the model — hold out whole sources, \
                 or remove repeated texts",
                self.dev_in_train,
                dev.len(),
                dev.source,
                train.source,
            ));
        }
        if let Some((a, b)) = self.first_conflict {
            let texts = if self.conflicting == 1 { "text has" } else { "texts have" };
            lines.push(format!(
                "warning: {} training {texts} more than one label (first: {}:{a} and line {b}); the model cannot fit \
                 both",
                self.conflicting, train.source,
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labelled::read_labelled_columns;

    fn dataset(source: &str, rows: &[(&str, &str)]) -> LabelledDataset {
        let lines: String =
            rows.iter().map(|(t, l)| format!("{}\n", serde_json::json!({"text": t, "label": l}))).collect();
        let examples = read_labelled_columns(lines.as_bytes(), source, &["label".to_string()]).unwrap();
        LabelledDataset::resolve(examples, &[&["a".to_string(), "b".to_string()]], source).unwrap()
    }

    #[test]
    fn shared_and_conflicting_texts_are_counted_with_their_first_lines() {
        let train = dataset("train.jsonl", &[("one", "a"), ("two", "b"), ("one ", "b"), ("three", "a"), ("one", "a")]);
        let dev = dataset("dev.jsonl", &[("four", "a"), (" two", "b"), ("three", "b"), ("five", "a")]);
        let found = check_overlap(&train, &dev);
        assert_eq!(
            found,
            Overlap { dev_in_train: 2, first_shared: Some((2, 2)), conflicting: 1, first_conflict: Some((1, 3)) }
        );
        let warnings = found.warnings(&train, &dev);
        assert_eq!(warnings.len(), 2);
        assert!(
            warnings[0].starts_with("warning: 2 of 4 dev documents")
                && warnings[0].contains("dev.jsonl:2 is train.jsonl:2")
        );
        assert!(
            warnings[1].starts_with("warning: 1 training text has") && warnings[1].contains("train.jsonl:1 and line 3")
        );
    }

    #[test]
    fn distinct_texts_give_no_warning() {
        let train = dataset("train.jsonl", &[("one", "a"), ("two", "b")]);
        let dev = dataset("dev.jsonl", &[("three", "a")]);
        let found = check_overlap(&train, &dev);
        assert_eq!(found, Overlap::default());
        assert!(found.warnings(&train, &dev).is_empty());
        assert_eq!(check_overlap(&train, &train.pick(&[])), Overlap::default(), "no dev set");
    }
}
