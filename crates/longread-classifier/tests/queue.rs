//! The batching queue: documents submitted from many threads at once get exactly the scores
//! `Classifier::classify` gives them alone; a short document submitted behind a long one is
//! answered first (round-robin units); a cancelled document's remaining units are dropped.
//! Ensembles queue their members' units (an encoder member's chunks among everyone's).

#[path = "../../longread-model/tests/common.rs"]
mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fixture, hier_documents as documents, max_diff};
use longread_classifier::ensemble::build_ensemble;
use longread_classifier::queue::{BatchQueue, JobOutcome};
use longread_classifier::{Classifier, ClassifierOptions, Prediction};

fn same(alone: &Prediction, queued: &Prediction) {
    assert_eq!(alone.label, queued.label);
    assert!(max_diff(alone.probabilities(), queued.probabilities()) <= 1e-6);
    assert!(max_diff(&alone.logits, &queued.logits) <= 1e-6);
    let evidence = |p: &Prediction| -> Vec<f32> {
        match (p.parts.chunks(), p.parts.sentences()) {
            (Some(c), _) => c.iter().map(|c| c.attention).collect(),
            (None, Some(s)) => s.iter().map(|s| s.attention).collect(),
            _ => Vec::new(),
        }
    };
    assert!(max_diff(&evidence(alone), &evidence(queued)) <= 1e-6);
}

/// Submits `text` and waits for its outcome.
fn classify_queued(queue: &BatchQueue, text: &str) -> JobOutcome {
    let (tx, rx) = mpsc::channel();
    let doc = queue.classifier().prepare(text).unwrap();
    let _guard = queue.submit(doc, move |outcome, _| tx.send(outcome).unwrap());
    rx.recv_timeout(Duration::from_secs(60)).unwrap()
}

/// An ensemble of the RoBERTa hierarchical fixture (chunks) and the HAN (a whole-text unit),
/// in a new temporary directory.
fn ensemble() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ens");
    build_ensemble(&[(fixture("hier/roberta-attention"), 2.0), (fixture("han"), 1.0)], &out).unwrap();
    (tmp, out)
}

#[test]
fn documents_from_32_threads_get_the_scores_they_get_alone() {
    let (_tmp, ensemble) = ensemble();
    let models = [fixture("hier/trained-bert-attention"), fixture("hier/trained-multitask"), fixture("han"), ensemble];
    for model in models {
        // A small budget: batches mix the chunks of many documents.
        let options = ClassifierOptions { max_batch_tokens: Some(96), ..ClassifierOptions::default() };
        let classifier = Arc::new(Classifier::load(&model, options).unwrap());
        let docs = documents();
        let queue = Arc::new(BatchQueue::start(Arc::clone(&classifier), |_| {}));
        let threads: Vec<_> = (0..32)
            .map(|t| {
                let (queue, text) = (Arc::clone(&queue), docs[t % docs.len()].clone());
                std::thread::spawn(move || (t, classify_queued(&queue, &text)))
            })
            .collect();
        let mut answered = 0;
        for thread in threads {
            let (t, outcome) = thread.join().unwrap();
            let queued = outcome.unwrap().unwrap();
            let alone = classifier.classify(&[&docs[t % docs.len()]]).unwrap().remove(0).unwrap();
            same(&alone, &queued);
            answered += 1;
        }
        assert_eq!(answered, 32, "{}", model.display());
        assert_eq!(queue.documents(), 0);
        assert_eq!(queue.waiting_units(), 0);
    }
}

#[test]
fn a_short_document_behind_a_long_one_is_answered_first() {
    let (_tmp, ensemble) = ensemble();
    for model in [fixture("hier/trained-bert-attention"), ensemble] {
        a_short_document_behind_a_long_one_is_answered_first_by(&model);
    }
}

fn a_short_document_behind_a_long_one_is_answered_first_by(model: &std::path::Path) {
    // One unit per batch: the long document's chunks and the short one's units alternate.
    // Deterministic: the worker is held after the long document's first batch until the short
    // one is queued (without the hold, a loaded machine could let the worker finish the long
    // document before the short one arrives: seen once in a full test run on 2 cores).
    let options = ClassifierOptions { max_batch_tokens: Some(1), ..ClassifierOptions::default() };
    let classifier = Arc::new(Classifier::load(model, options).unwrap());
    let long = documents().join(" ").repeat(20);
    let long_doc = classifier.prepare(&long).unwrap();
    assert!(long_doc.units() >= 4, "{} chunks", long_doc.units());
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let hold = std::sync::Mutex::new(Some((entered_tx, go_rx)));
    let queue = BatchQueue::start(Arc::clone(&classifier), move |_| {
        if let Some((entered, go)) = hold.lock().unwrap().take() {
            entered.send(()).unwrap();
            go.recv().unwrap();
        }
    });
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    let _long = queue.submit(long_doc, move |_, _| tx.send(("long", Instant::now())).unwrap());
    entered_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let short = classifier.prepare("The committee met on Tuesday.").unwrap();
    let _short = queue.submit(short, move |_, t| tx2.send(("short", Instant::now() - t.inference)).unwrap());
    go_tx.send(()).unwrap();
    let first = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let second = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!((first.0, second.0), ("short", "long"));
}

#[test]
fn a_cancelled_document_is_dropped_and_the_queue_goes_on() {
    // Deterministic: the worker is held inside its first batch (a one-unit blocker) while the
    // long document is submitted and cancelled, so none of its units can have been taken
    // (without the hold, a loaded machine could let the worker finish it first).
    let options = ClassifierOptions { max_batch_tokens: Some(1), ..ClassifierOptions::default() };
    let classifier = Arc::new(Classifier::load(&fixture("hier/trained-bert-attention"), options).unwrap());
    let batches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&batches);
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let hold = std::sync::Mutex::new(Some((entered_tx, go_rx)));
    let queue = BatchQueue::start(Arc::clone(&classifier), move |b| {
        counted.fetch_add(b.units, std::sync::atomic::Ordering::Relaxed);
        if let Some((entered, go)) = hold.lock().unwrap().take() {
            entered.send(()).unwrap();
            go.recv().unwrap();
        }
    });
    let _blocker = queue.submit(classifier.prepare("The committee met.").unwrap(), |_, _| {});
    entered_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    let long = classifier.prepare(&documents().join(" ").repeat(20)).unwrap();
    let units = long.units();
    let (tx, rx) = mpsc::channel::<&str>();
    let guard = queue.submit(long, move |_, _| tx.send("answered").unwrap());
    drop(guard);
    go_tx.send(()).unwrap();
    let after = classify_queued(&queue, "Rain is expected.").unwrap().unwrap();
    assert!(!after.label.is_empty());
    assert!(rx.try_recv().is_err(), "a cancelled document is not answered");
    // The blocker's unit and the last document's; none of the cancelled document's.
    let encoded = batches.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(encoded, 2, "units encoded; the cancelled document had {units}");
    assert_eq!(queue.documents(), 0);
    assert_eq!(queue.waiting_units(), 0);
}

/// With a vector cache, the queue encodes a document once: submitted again (or after
/// `predict` filled the cache), it is answered from its vectors without a batch, with the
/// scores it had; an ensemble's encoder member reads the cache while its HAN member is queued.
#[test]
fn the_vector_cache_spares_the_queue_documents_it_holds() {
    let (_tmp, ensemble) = ensemble();
    // Units queued the second time: none, or the ensemble's HAN document.
    for (model, queued_again) in [(fixture("hier/trained-bert-attention"), 0), (ensemble, 1)] {
        let cache = tempfile::tempdir().unwrap();
        let mut classifier = Classifier::load(&model, ClassifierOptions::default()).unwrap();
        classifier.set_vector_cache(cache.path()).unwrap();
        let classifier = Arc::new(classifier);
        let units = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&units);
        let queue = BatchQueue::start(Arc::clone(&classifier), move |b| {
            _ = counted.fetch_add(b.units, std::sync::atomic::Ordering::SeqCst)
        });
        let text = documents()[1].clone();
        let first = classify_queued(&queue, &text).unwrap().unwrap();
        let encoded = units.load(std::sync::atomic::Ordering::SeqCst);
        let doc_units = classifier.prepare(&text).unwrap().units();
        assert_eq!(encoded, doc_units, "{}: every unit encoded once", model.display());
        assert!(std::fs::read_dir(cache.path()).unwrap().count() > 0, "the cache was written");
        let again = classify_queued(&queue, &text).unwrap().unwrap();
        let second = units.load(std::sync::atomic::Ordering::SeqCst) - encoded;
        assert_eq!(second, queued_again, "{}: the cached chunks skipped the queue", model.display());
        assert_eq!(first.logits, again.logits, "{}", model.display());
        same(&classifier.classify(&[text.as_str()]).unwrap().remove(0).unwrap(), &again);
    }
}
