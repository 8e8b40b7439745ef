//! Prometheus metrics (GET /metrics): requests by route and status, where documents' time
//! goes (queue, tokenization, inference), what was processed, and the batches.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use longread_classifier::queue::{BatchStats, JobTimings};

/// A request's route and status.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RouteStatus {
    pub(crate) route: String,
    pub(crate) status: u16,
}

/// A request's route.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Route {
    pub(crate) route: String,
}

/// How a reload ended ("ok" or "failed").
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Outcome {
    pub(crate) result: &'static str,
}

/// Every metric the server keeps.
pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) requests: Family<RouteStatus, Counter>,
    pub(crate) request_seconds: Family<Route, Histogram>,
    pub(crate) cancelled: Family<Route, Counter>,
    pub(crate) deadline_expired: Counter,
    queue_seconds: Histogram,
    pub(crate) tokenize_seconds: Histogram,
    inference_seconds: Histogram,
    documents: Counter,
    chunks: Counter,
    tokens: Counter,
    batch_units: Histogram,
    batch_tokens: Histogram,
    batch_seconds: Histogram,
    pub(crate) queue_documents: Gauge,
    pub(crate) queue_units: Gauge,
    pub(crate) in_flight: Gauge,
    pub(crate) reloads: Family<Outcome, Counter>,
}

/// Buckets from 1 ms to about 9 minutes.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 20))
}

/// Buckets from 1 to about 32k.
fn counts() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let m = Self {
            registry: Registry::with_prefix("longread"),
            requests: Family::default(),
            request_seconds: Family::new_with_constructor(seconds),
            cancelled: Family::default(),
            deadline_expired: Counter::default(),
            queue_seconds: seconds(),
            tokenize_seconds: seconds(),
            inference_seconds: seconds(),
            documents: Counter::default(),
            chunks: Counter::default(),
            tokens: Counter::default(),
            batch_units: counts(),
            batch_tokens: Histogram::new(exponential_buckets(16.0, 2.0, 16)),
            batch_seconds: seconds(),
            queue_documents: Gauge::default(),
            queue_units: Gauge::default(),
            in_flight: Gauge::default(),
            reloads: Family::default(),
        };
        let mut registry = m.registry;
        registry.register("requests", "HTTP requests by route and status", m.requests.clone());
        registry.register("request_duration_seconds", "HTTP request durations by route", m.request_seconds.clone());
        registry.register(
            "requests_cancelled",
            "Requests whose client went away before the answer (also in requests, status 499)",
            m.cancelled.clone(),
        );
        registry.register(
            "requests_deadline_expired",
            "Classify requests cancelled at --max-queue-time (also in requests, status 503)",
            m.deadline_expired.clone(),
        );
        registry.register(
            "queue_duration_seconds",
            "From submission to a document's first batch",
            m.queue_seconds.clone(),
        );
        registry.register(
            "tokenize_duration_seconds",
            "Tokenizing and chunking a request's texts",
            m.tokenize_seconds.clone(),
        );
        registry.register(
            "inference_duration_seconds",
            "From a document's first batch to its scores",
            m.inference_seconds.clone(),
        );
        registry.register("reloads", "Model reloads on SIGHUP, by result (ok, failed)", m.reloads.clone());
        registry.register("documents", "Documents classified", m.documents.clone());
        registry.register("chunks", "Chunks encoded for classified documents", m.chunks.clone());
        registry.register("tokens", "Tokens of classified documents", m.tokens.clone());
        registry.register("batch_units", "Chunks per encoder batch", m.batch_units.clone());
        registry.register("batch_tokens", "Padded tokens per encoder batch", m.batch_tokens.clone());
        registry.register("batch_duration_seconds", "Encoder batch durations", m.batch_seconds.clone());
        registry.register("queue_documents", "Documents waiting or being classified", m.queue_documents.clone());
        registry.register("queue_units", "Chunks waiting to be encoded", m.queue_units.clone());
        registry.register("requests_in_flight", "Classify and embed requests in flight", m.in_flight.clone());
        Self { registry, ..m }
    }

    /// A classified document: its timings and size.
    pub(crate) fn document(&self, timings: &JobTimings, chunks: usize, tokens: usize) {
        self.queue_seconds.observe(timings.queued.as_secs_f64());
        self.inference_seconds.observe(timings.inference.as_secs_f64());
        self.documents.inc();
        self.chunks.inc_by(chunks as u64);
        self.tokens.inc_by(tokens as u64);
    }

    /// An encoder batch.
    pub(crate) fn batch(&self, stats: &BatchStats) {
        self.batch_units.observe(stats.units as f64);
        self.batch_tokens.observe(stats.padded_tokens as f64);
        self.batch_seconds.observe(stats.seconds);
    }

    /// The exposition text.
    pub(crate) fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
