//! A queue that batches the work of concurrent requests at chunk level (continuous
//! batching): documents are submitted prepared ([`Classifier::prepare`]); one worker thread
//! fills each encoder batch up to the classifier's `max_batch_tokens` (units × the longest)
//! by taking one unit from each waiting document in turn, round-robin, so a 200k-token
//! document shares every batch with the short documents that arrive after it instead of
//! making them wait for all of its chunks. The batch itself runs on every core. A document
//! is scored and answered as soon as its last unit is encoded; a cancelled document's
//! remaining units are dropped. Results do not depend on what else was in a batch. Units the
//! classifier's vector cache holds are never queued, and fresh ones are kept in it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::units::{PreparedDocument, UnitOutput};
use crate::{Classifier, DocResult};

/// A document's outcome: its result, or why the model could not run (a backend failure).
pub type JobOutcome = std::result::Result<DocResult, String>;

/// Where a document's time went.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobTimings {
    /// From submission until its first unit entered a batch.
    pub queued: Duration,
    /// From then until it was scored.
    pub inference: Duration,
}

/// One encoder batch, for metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchStats {
    /// Units (chunks) in the batch.
    pub units: usize,
    /// Documents they came from.
    pub documents: usize,
    /// Units × the costliest unit (padded tokens for encoder models).
    pub padded_tokens: usize,
    /// Seconds the batch took.
    pub seconds: f64,
}

/// What a submitter is told when its document is done.
type Reply = Box<dyn FnOnce(JobOutcome, JobTimings) + Send>;

/// A submitted document and how far it got.
struct Job {
    id: u64,
    doc: Arc<PreparedDocument>,
    /// Next unit to put in a batch (units the vector cache gave are skipped).
    next: usize,
    outputs: Vec<Option<UnitOutput>>,
    /// Which units are encoded here (not from the vector cache).
    fresh: Vec<bool>,
    filled: usize,
    cancelled: Arc<AtomicBool>,
    reply: Option<Reply>,
    submitted: Instant,
    started: Option<Instant>,
}

/// The queue's state, under its lock.
#[derive(Default)]
struct State {
    jobs: Vec<Job>,
    /// Where the next batch starts taking units (fairness across batches).
    cursor: usize,
    next_id: u64,
    closed: bool,
}

struct Shared {
    classifier: Arc<Classifier>,
    state: Mutex<State>,
    wake: Condvar,
    on_batch: Box<dyn Fn(&BatchStats) + Send + Sync>,
}

/// The batching queue in front of one [`Classifier`].
pub struct BatchQueue {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

/// Cancels its document when dropped (a client that went away), unless it was answered.
#[derive(Debug)]
pub struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl BatchQueue {
    /// Starts the worker thread; `on_batch` hears of every batch it runs.
    pub fn start(classifier: Arc<Classifier>, on_batch: impl Fn(&BatchStats) + Send + Sync + 'static) -> Self {
        let shared = Arc::new(Shared {
            classifier,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            on_batch: Box::new(on_batch),
        });
        let worker = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("longread-batches".into())
                .spawn(move || run_worker(&shared))
                .expect("spawning the batch worker thread")
        };
        Self { shared, worker: Some(worker) }
    }

    /// The classifier it runs.
    pub fn classifier(&self) -> &Classifier {
        &self.shared.classifier
    }

    /// Queues `doc`; `reply` runs (on the worker thread) once it is scored. Dropping the
    /// returned guard before then cancels the document's remaining units. It blocks while it
    /// reads the classifier's vector cache, and a document the cache holds whole is scored
    /// and answered here: call it where blocking is allowed (not on an async runtime's
    /// threads).
    pub fn submit(
        &self,
        doc: PreparedDocument,
        reply: impl FnOnce(JobOutcome, JobTimings) + Send + 'static,
    ) -> CancelOnDrop {
        let cancelled = Arc::new(AtomicBool::new(false));
        let units = doc.units();
        if units == 0 {
            let nothing = JobTimings { queued: Duration::ZERO, inference: Duration::ZERO };
            reply(Ok(Err(crate::DocError::new("the document has nothing to encode"))), nothing);
            return CancelOnDrop(cancelled);
        }
        let outputs = self.shared.classifier.recall(&doc);
        let fresh: Vec<bool> = outputs.iter().map(Option::is_none).collect();
        let filled = fresh.iter().filter(|&&f| !f).count();
        let mut job = Job {
            id: 0,
            doc: Arc::new(doc),
            next: 0,
            outputs,
            fresh,
            filled,
            cancelled: Arc::clone(&cancelled),
            reply: Some(Box::new(reply)),
            submitted: Instant::now(),
            started: None,
        };
        if filled == units {
            // Every unit came from the vector cache: nothing to queue.
            job.started = Some(job.submitted);
            answer(&self.shared.classifier, (job, None));
            return CancelOnDrop(cancelled);
        }
        let mut state = self.lock();
        job.id = state.next_id;
        state.next_id += 1;
        state.jobs.push(job);
        drop(state);
        self.shared.wake.notify_one();
        CancelOnDrop(cancelled)
    }

    /// Documents waiting or in progress.
    pub fn documents(&self) -> usize {
        self.lock().jobs.len()
    }

    /// Units (chunks) submitted and not yet encoded.
    pub fn waiting_units(&self) -> usize {
        self.lock().jobs.iter().map(|j| j.doc.units() - j.next).sum()
    }

    /// Whether the worker thread is running.
    pub fn is_running(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| !w.is_finished())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared)
    }
}

impl Drop for BatchQueue {
    /// Finishes the documents already submitted, then stops the worker.
    fn drop(&mut self) {
        self.lock().closed = true;
        self.shared.wake.notify_all();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// The state's lock; a panic elsewhere while holding it leaves the state usable.
fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The worker: waits for units, runs batches, answers finished documents, until closed and
/// empty.
fn run_worker(shared: &Shared) {
    loop {
        let mut state = lock(shared);
        let batch = loop {
            drop_cancelled(&mut state);
            let batch = next_batch(&shared.classifier, &mut state);
            if !batch.is_empty() {
                break batch;
            }
            if state.closed && state.jobs.is_empty() {
                return;
            }
            state = shared.wake.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        };
        let units: Vec<(Arc<PreparedDocument>, usize)> =
            batch.iter().map(|&(id, unit)| (Arc::clone(&state.jobs[position(&state, id)].doc), unit)).collect();
        drop(state);

        let started = Instant::now();
        let refs: Vec<(&PreparedDocument, usize)> = units.iter().map(|(d, u)| (d.as_ref(), *u)).collect();
        let outputs = catch_unwind(AssertUnwindSafe(|| shared.classifier.encode_units(&refs)))
            .unwrap_or_else(|_| Err(longread_model::error::ModelError::InvalidInput("the encoder panicked".into())))
            .map_err(|e| format!("running the model: {e}"));
        let stats = BatchStats {
            units: refs.len(),
            documents: batch.iter().map(|&(id, _)| id).collect::<std::collections::HashSet<_>>().len(),
            padded_tokens: refs.len() * refs.iter().map(|(d, u)| shared.classifier.unit_cost(d, *u)).max().unwrap_or(0),
            seconds: started.elapsed().as_secs_f64(),
        };
        (shared.on_batch)(&stats);
        let done = store_outputs(&mut lock(shared), &batch, outputs);
        for job in done {
            answer(&shared.classifier, job);
        }
    }
}

/// Removes cancelled documents with no unit in the running batch (the worker holds the
/// lock between batches, so none is).
fn drop_cancelled(state: &mut State) {
    state.jobs.retain(|j| !j.cancelled.load(Ordering::Relaxed));
}

/// Picks the next batch: one unit from each document in turn, starting at the cursor, while
/// units × the costliest stays within the budget (at least one unit).
fn next_batch(classifier: &Classifier, state: &mut State) -> Vec<(u64, usize)> {
    let budget = classifier.max_batch_tokens();
    let n = state.jobs.len();
    let mut picked: Vec<(u64, usize)> = Vec::new();
    let mut costliest = 0;
    if n == 0 {
        return picked;
    }
    let mut k = state.cursor % n;
    let mut idle = 0; // documents in a row with nothing left to give
    while idle < n {
        let job = &mut state.jobs[k];
        while job.next < job.doc.units() && job.outputs[job.next].is_some() {
            job.next += 1; // from the vector cache
        }
        if job.next < job.doc.units() {
            let cost = classifier.unit_cost(&job.doc, job.next).max(costliest);
            if !picked.is_empty() && (picked.len() + 1) * cost > budget {
                break;
            }
            costliest = cost;
            picked.push((job.id, job.next));
            job.next += 1;
            job.started.get_or_insert_with(Instant::now);
            idle = 0;
        } else {
            idle += 1;
        }
        k = (k + 1) % n;
    }
    state.cursor = k;
    picked
}

/// Index of the job with this id (it stays while it has units in a batch).
fn position(state: &State, id: u64) -> usize {
    state.jobs.iter().position(|j| j.id == id).expect("a job with units in the batch stays queued")
}

/// Files the batch's outputs under their documents (or fails every document in it) and
/// takes out the documents that are complete.
fn store_outputs(
    state: &mut State,
    batch: &[(u64, usize)],
    outputs: std::result::Result<Vec<UnitOutput>, String>,
) -> Vec<(Job, Option<String>)> {
    let mut failed: Option<String> = None;
    match outputs {
        Ok(outputs) => {
            for (&(id, unit), output) in batch.iter().zip(outputs) {
                let at = position(state, id);
                let job = &mut state.jobs[at];
                job.outputs[unit] = Some(output);
                job.filled += 1;
            }
        }
        Err(message) => failed = Some(message),
    }
    let in_batch = |id: u64| batch.iter().any(|&(b, _)| b == id);
    let mut done = Vec::new();
    let mut k = 0;
    while k < state.jobs.len() {
        let job = &state.jobs[k];
        let complete = job.filled == job.doc.units();
        let broken = failed.is_some() && in_batch(job.id);
        if complete || broken {
            let job = state.jobs.remove(k);
            done.push((job, failed.clone().filter(|_| broken)));
            if state.cursor > k {
                state.cursor -= 1;
            }
        } else {
            k += 1;
        }
    }
    done
}

/// Scores a complete document (or passes on its failure) and replies.
fn answer(classifier: &Classifier, (mut job, failure): (Job, Option<String>)) {
    let outcome = match failure {
        Some(message) => Err(message),
        None => {
            let outputs: Vec<UnitOutput> = job.outputs.drain(..).map(|o| o.expect("every unit is filled")).collect();
            classifier
                .remember(&job.doc, &outputs, &job.fresh)
                .map_err(|e| format!("keeping the chunk vectors: {e}"))
                .and_then(|()| classifier.finish(&job.doc, outputs).map_err(|e| format!("scoring the document: {e}")))
        }
    };
    let started = job.started.unwrap_or(job.submitted);
    let timings = JobTimings { queued: started - job.submitted, inference: started.elapsed() };
    if let Some(reply) = job.reply.take() {
        reply(outcome, timings);
    }
}
