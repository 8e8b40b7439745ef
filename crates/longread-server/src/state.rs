//! What every request handler shares: the settings, the loaded models (or why they are not
//! loaded yet), the requests in flight and the metrics.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use longread_classifier::queue::BatchQueue;
use longread_classifier::{Classifier, ClassifierOptions};
use longread_model::device::serving_batch_tokens;
use longread_model::{Embedder, EmbedderOptions};

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::metrics::Metrics;

/// The models once loaded.
pub(crate) struct Loaded {
    pub(crate) classifier: Arc<Classifier>,
    pub(crate) queue: BatchQueue,
    pub(crate) embedder: Option<Arc<Embedder>>,
    /// The model as `longread inspect --json` shows it.
    pub(crate) summary: serde_json::Value,
    /// When the models were loaded, in seconds since the Unix epoch (OpenAI's `created`).
    pub(crate) loaded_at: u64,
}

/// The server's shared state.
pub(crate) struct AppState {
    pub(crate) config: ServerConfig,
    /// The models; replaced whole by [`AppState::reload`].
    loaded: RwLock<Option<Arc<Loaded>>>,
    load_error: Mutex<Option<String>>,
    in_flight: AtomicUsize,
    /// Bytes of input text held by the requests in flight.
    in_flight_bytes: AtomicUsize,
    pub(crate) metrics: Arc<Metrics>,
}

impl AppState {
    pub(crate) fn new(config: ServerConfig) -> Self {
        Self {
            config,
            loaded: RwLock::new(None),
            load_error: Mutex::new(None),
            in_flight: AtomicUsize::new(0),
            in_flight_bytes: AtomicUsize::new(0),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Loads the models (blocking: run it off the async threads); a failure is kept for
    /// /health and the routes, and returned.
    pub(crate) fn load(&self) -> Result<(), String> {
        let result = load_models(&self.config, &self.metrics);
        match result {
            Ok(loaded) => {
                *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(loaded));
                Ok(())
            }
            Err(message) => {
                *self.load_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(message.clone());
                Err(message)
            }
        }
    }

    /// Loads the models again from the same directories (SIGHUP: a decision rule or a
    /// calibration changed, a model retrained in place) and swaps them in whole; requests
    /// under way finish on the models they started with. Blocking: run it off the async
    /// threads. On failure the models loaded before keep serving, and the error is returned.
    /// Both sets of models are in memory until the old one is released.
    pub(crate) fn reload(&self) -> Result<(), String> {
        let fresh = Arc::new(load_models(&self.config, &self.metrics)?);
        let old = self.loaded.write().unwrap_or_else(|p| p.into_inner()).replace(fresh);
        if let Some(old) = old {
            // Dropped here, off the async threads, once the requests holding it let go (its
            // queue finishes what they submitted and stops its worker).
            while Arc::strong_count(&old) > 1 {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            drop(old);
        }
        Ok(())
    }

    /// The models, or 503 while they load or after they failed to.
    pub(crate) fn loaded(&self) -> Result<Arc<Loaded>, ApiError> {
        let current = self.loaded.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(loaded) = current {
            if !loaded.queue.is_running() {
                return Err(ApiError::unhealthy("the inference worker stopped"));
            }
            return Ok(loaded);
        }
        match self.load_error.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(message) => Err(ApiError::unhealthy(format!("the model failed to load: {message}"))),
            None => Err(ApiError::unhealthy("the model is loading")),
        }
    }

    /// Counts a classify or embed request with `text_bytes` of input text in flight until the
    /// guard drops; 429 when `--max-concurrent-requests` are already, or when its text would
    /// take the text in flight over `--max-inflight-text-bytes` (a request alone is always
    /// admitted: its own size is bounded by the body and text limits).
    pub(crate) fn admit(self: &Arc<Self>, text_bytes: usize) -> Result<InFlight, ApiError> {
        let limit = self.config.max_concurrent_requests;
        let before = self.in_flight.fetch_add(1, Ordering::SeqCst);
        if before >= limit {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::overloaded(limit));
        }
        let budget = self.config.max_inflight_text_bytes;
        let held = self.in_flight_bytes.fetch_add(text_bytes, Ordering::SeqCst);
        if held > 0 && held + text_bytes > budget {
            self.in_flight_bytes.fetch_sub(text_bytes, Ordering::SeqCst);
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::memory_full(held, text_bytes, budget));
        }
        self.metrics.in_flight.inc();
        Ok(InFlight { state: Arc::clone(self), text_bytes })
    }
}

/// A request in flight (see [`AppState::admit`]).
pub(crate) struct InFlight {
    state: Arc<AppState>,
    text_bytes: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.in_flight_bytes.fetch_sub(self.text_bytes, Ordering::SeqCst);
        self.state.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.state.metrics.in_flight.dec();
    }
}

/// Loads the classifier (with its batching queue) and the embedder.
fn load_models(config: &ServerConfig, metrics: &Arc<Metrics>) -> Result<Loaded, String> {
    let device = config.device.resolve().map_err(|e| e.to_string())?;
    let max_batch_tokens = config.max_batch_tokens.unwrap_or_else(|| serving_batch_tokens(&device));
    let options = ClassifierOptions {
        precision: config.precision,
        max_batch_tokens: Some(max_batch_tokens),
        device: config.device,
        occlusion: config.occlusion,
    };
    let mut classifier = Classifier::load(&config.model, options).map_err(|e| format!("--model: {e}"))?;
    if let Some(dir) = &config.vector_cache {
        classifier.set_vector_cache(dir).map_err(|e| format!("--vector-cache {}: {e}", dir.display()))?;
    }
    let classifier = Arc::new(classifier);
    let summary = longread_classifier::summary::summarize(&config.model).map_err(|e| format!("--model: {e}"))?;
    let embedder = match &config.embedding_model {
        None => None,
        Some(dir) => {
            let options = EmbedderOptions {
                pooling: config.embedding_pooling,
                normalize: Some(false), // per request
                device: config.device,
                precision: None,
            };
            let dir = longread_model::checkpoint::local_or_hub(dir).map_err(|e| format!("--embedding-model: {e}"))?;
            Some(Arc::new(Embedder::open(&dir, options).map_err(|e| format!("--embedding-model: {e}"))?))
        }
    };
    let batches = Arc::clone(metrics);
    let queue = BatchQueue::start(Arc::clone(&classifier), move |stats| batches.batch(stats));
    let loaded_at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Ok(Loaded { classifier, queue, embedder, summary: summary.json, loaded_at })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unhealthy_while_loading_and_after_a_failed_load() {
        let state = Arc::new(AppState::new(ServerConfig::new("/no/such/model")));
        let loading = state.loaded().err().unwrap();
        assert_eq!((loading.status.as_u16(), loading.body.error.as_str()), (503, "the model is loading"));
        assert!(state.load().is_err());
        let failed = state.loaded().err().unwrap();
        assert_eq!(failed.status.as_u16(), 503);
        assert!(failed.body.error.contains("failed to load") && failed.body.error.contains("/no/such/model"));
    }

    #[test]
    fn requests_over_the_limit_are_refused_until_one_ends() {
        let config = ServerConfig { max_concurrent_requests: 2, ..ServerConfig::new("m") };
        let state = Arc::new(AppState::new(config));
        let (a, _b) = (state.admit(1).ok().unwrap(), state.admit(1).ok().unwrap());
        assert_eq!(state.admit(1).err().unwrap().status.as_u16(), 429);
        drop(a);
        assert!(state.admit(1).is_ok());
    }

    #[test]
    fn text_over_the_budget_is_refused_unless_alone_and_freed_when_done() {
        let config = ServerConfig { max_inflight_text_bytes: 100, ..ServerConfig::new("m") };
        let state = Arc::new(AppState::new(config));
        let big = state.admit(500).unwrap_or_else(|e| panic!("alone, any size is admitted: {}", e.body.error));
        let refused = state.admit(1).err().unwrap();
        assert_eq!((refused.status.as_u16(), refused.body.error_type), (429, crate::error::ErrorType::Overloaded));
        assert!(refused.body.error.contains("--max-inflight-text-bytes"), "{}", refused.body.error);
        drop(big);
        let (a, b) = (state.admit(60).ok().unwrap(), state.admit(40).ok().unwrap());
        assert!(state.admit(1).is_err(), "60 + 40 fill the 100 bytes");
        drop((a, b));
        assert!(state.admit(100).is_ok(), "a refused request held nothing");
    }
}
