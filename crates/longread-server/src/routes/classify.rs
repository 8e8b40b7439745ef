//! POST /classify (longread's own: whole documents with their evidence) and POST /predict
//! (text-embeddings-inference's shape). Both tokenize off the async threads, submit every
//! document to the batching queue and wait; a client that goes away cancels its documents.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use longread_classifier::Prediction;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::{ApiError, ErrorBody};
use crate::input::{parse_body, Inputs, OneOrMany};
use crate::state::AppState;

/// POST /classify's body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClassifyRequest {
    /// One document, or a list of documents.
    #[schema(value_type = Object, example = json!("The whole transcript ..."))]
    inputs: Value,
    /// Include the chunks (or a HAN's sentences and words) with their offsets and attention.
    #[serde(default = "yes")]
    chunks: bool,
}

/// POST /predict's body (TEI's fields; others are refused, as /classify refuses them).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PredictRequest {
    /// One document, or a list of documents.
    #[schema(value_type = Object, example = json!("The whole transcript ..."))]
    inputs: Value,
    /// Logits instead of probabilities.
    #[serde(default)]
    raw_scores: bool,
    /// Accepted for TEI compatibility; longread never truncates (it reads every chunk).
    #[serde(default)]
    #[allow(dead_code)]
    truncate: Option<bool>,
    /// Accepted for TEI compatibility (`Left`/`Right`); unused, as `truncate`.
    #[serde(default)]
    #[allow(dead_code)]
    truncation_direction: Option<String>,
    /// The Hugging Face Inference API's text-classification parameters, which
    /// `huggingface_hub.InferenceClient` sends (nulls included) to a server's URL.
    #[serde(default)]
    parameters: Option<PredictParameters>,
}

/// `parameters` of POST /predict (and its aliases): the Inference API's text classification.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PredictParameters {
    /// Keep the k labels of highest score (default: every label).
    #[serde(default)]
    top_k: Option<usize>,
    /// "softmax" (the default: probabilities), "sigmoid" (each logit's sigmoid) or "none"
    /// (the logits, as `raw_scores`).
    #[serde(default)]
    function_to_apply: Option<String>,
}

/// What a label's score is in /predict's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScoreFunction {
    Softmax,
    Sigmoid,
    Logits,
}

impl ScoreFunction {
    /// From `raw_scores` and `parameters.function_to_apply`, which must agree when both are given.
    fn of(raw_scores: bool, function: Option<&str>) -> Result<Self, ApiError> {
        let named = match function {
            None => None,
            Some("softmax") => Some(Self::Softmax),
            Some("sigmoid") => Some(Self::Sigmoid),
            Some("none") => Some(Self::Logits),
            Some(other) => {
                return Err(ApiError::invalid(format!(
                    "`parameters.function_to_apply` {other:?}: expected \"softmax\", \"sigmoid\" or \"none\""
                )))
            }
        };
        match (raw_scores, named) {
            (true, Some(f)) if f != Self::Logits => Err(ApiError::invalid(
                "`raw_scores: true` gives logits: leave out `parameters.function_to_apply` or make it \"none\"",
            )),
            (true, _) => Ok(Self::Logits),
            (false, named) => Ok(named.unwrap_or(Self::Softmax)),
        }
    }
}

/// One label's score in TEI's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct LabelScore {
    /// The label.
    label: String,
    /// Its probability (or logit with `raw_scores`).
    score: f32,
}

fn yes() -> bool {
    true
}

/// Classifies whole documents; each answer is what `longread predict` writes for the
/// document (without its id).
#[utoipa::path(post, path = "/classify", request_body = ClassifyRequest,
    responses(
        (status = 200, description = "One prediction, or a list for a list of inputs", body = Prediction),
        (status = 400, description = "Empty batch", body = ErrorBody),
        (status = 413, description = "Body, text or batch over the limits", body = ErrorBody),
        (status = 422, description = "Invalid JSON, wrong types, an empty or unreadable text", body = ErrorBody),
        (status = 429, description = "Too many requests or too much text in flight", body = ErrorBody),
        (status = 503, description = "The model is loading or failed to load, or no answer within --max-queue-time (the request's work is cancelled)", body = ErrorBody),
    ))]
pub(crate) async fn classify(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<OneOrMany<Prediction>>, ApiError> {
    let request: ClassifyRequest = parse_body(&body)?;
    let inputs = Inputs::from_value(request.inputs, "inputs")?;
    let mut predictions = classify_inputs(&state, &inputs).await?;
    if !request.chunks {
        for p in &mut predictions {
            p.parts = p.parts.without_evidence();
        }
    }
    Ok(Json(inputs.shape(predictions)))
}

/// Classifies whole documents and answers as TEI does: every label with its score, highest
/// first (a list of such lists for a list of inputs).
#[utoipa::path(post, path = "/predict", request_body = PredictRequest,
    responses(
        (status = 200, description = "Labels by score, highest first", body = Vec<LabelScore>),
        (status = 400, description = "Empty batch", body = ErrorBody),
        (status = 413, description = "Body, text or batch over the limits", body = ErrorBody),
        (status = 422, description = "Invalid JSON, wrong types, an empty or unreadable text", body = ErrorBody),
        (status = 429, description = "Too many requests or too much text in flight", body = ErrorBody),
        (status = 503, description = "The model is loading or failed to load, or no answer within --max-queue-time (the request's work is cancelled)", body = ErrorBody),
    ))]
pub(crate) async fn predict(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<OneOrMany<Vec<LabelScore>>>, ApiError> {
    let request: PredictRequest = parse_body(&body)?;
    let parameters = request.parameters.unwrap_or_default();
    let function = ScoreFunction::of(request.raw_scores, parameters.function_to_apply.as_deref())?;
    let top_k = match parameters.top_k {
        Some(0) => return Err(ApiError::invalid("`parameters.top_k` must be at least 1")),
        Some(k) => k,
        None => usize::MAX,
    };
    let inputs = Inputs::from_value(request.inputs, "inputs")?;
    let predictions = classify_inputs(&state, &inputs).await?;
    let ranked: Vec<Vec<LabelScore>> = predictions
        .iter()
        .map(|p| {
            let mut labels = ranked(p, function);
            labels.truncate(top_k);
            labels
        })
        .collect();
    Ok(Json(inputs.shape(ranked)))
}

/// Every label with its probability (or logit), highest first.
fn ranked(p: &Prediction, function: ScoreFunction) -> Vec<LabelScore> {
    let values: Vec<f32> = match function {
        ScoreFunction::Softmax => p.scores.probabilities.clone(),
        ScoreFunction::Logits => p.logits.clone(),
        ScoreFunction::Sigmoid => p.logits.iter().map(|&z| 1.0 / (1.0 + (-z).exp())).collect(),
    };
    let mut scores: Vec<LabelScore> =
        p.scores.labels.iter().zip(values).map(|(label, score)| LabelScore { label: label.clone(), score }).collect();
    scores.sort_by(|a, b| b.score.total_cmp(&a.score));
    scores
}

/// Checks, tokenizes and classifies the texts of `inputs` through the queue; the first
/// document that cannot be classified fails the request with 422 naming it.
pub(crate) async fn classify_inputs(state: &Arc<AppState>, inputs: &Inputs) -> Result<Vec<Prediction>, ApiError> {
    state.loaded()?;
    let cfg = &state.config;
    let texts: Vec<String> = inputs
        .texts("inputs", cfg.max_client_batch_size, cfg.max_input_chars)?
        .into_iter()
        .map(str::to_owned)
        .collect();
    let _in_flight = state.admit(texts.iter().map(String::len).sum())?;

    let started = Instant::now();
    // Tokenizing, and submitting (which reads the vector cache and scores a document it holds
    // whole), run off the async threads. Nothing is submitted unless every text tokenized.
    let names: Vec<String> = (0..texts.len()).map(|i| inputs.name("inputs", i)).collect();
    let app = Arc::clone(state);
    let (waiting, tokenized) = tokio::task::spawn_blocking(move || {
        let loaded = app.loaded()?;
        let prepared = texts.iter().map(|t| loaded.classifier.prepare(t)).collect::<Vec<_>>();
        let tokenized = started.elapsed();
        let prepared = prepared
            .into_iter()
            .zip(&names)
            .map(|(doc, name)| doc.map_err(|e| ApiError::tokenizer(format!("{name}: {}", e.message))))
            .collect::<Result<Vec<_>, ApiError>>()?;
        let waiting = prepared
            .into_iter()
            .map(|doc| {
                let (units, tokens) = (doc.units(), doc.tokens());
                let (tx, rx) = oneshot::channel();
                // Dropped with the request's future: a client that disconnects cancels what is
                // left of its documents.
                let guard = loaded.queue.submit(doc, move |outcome, timings| {
                    let _ = tx.send((outcome, timings));
                });
                (rx, units, tokens, guard)
            })
            .collect::<Vec<_>>();
        Ok((waiting, tokenized))
    })
    .await
    .map_err(|e| ApiError::backend(format!("tokenizing: {e}")))??;
    state.metrics.tokenize_seconds.observe(tokenized.as_secs_f64());

    let mut predictions = Vec::with_capacity(waiting.len());
    // Past --max-queue-time the request is answered 503 and, as its guards drop, its documents
    // leave the queue.
    let limit = cfg.max_queue_time;
    let deadline = (!limit.is_zero()).then(|| tokio::time::Instant::from(started) + limit);
    // A document's guard lives until its answer is in.
    for (i, (rx, units, tokens, _guard)) in waiting.into_iter().enumerate() {
        let answer = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, rx).await {
                Ok(answer) => answer,
                Err(_) => {
                    state.metrics.deadline_expired.inc();
                    return Err(ApiError::deadline(limit));
                }
            },
            None => rx.await,
        };
        let (outcome, timings) = answer.map_err(|_| ApiError::backend("the inference worker stopped"))?;
        let result = outcome.map_err(ApiError::backend)?;
        let prediction =
            result.map_err(|e| ApiError::tokenizer(format!("{}: {}", inputs.name("inputs", i), e.message)))?;
        state.metrics.document(&timings, units, tokens);
        predictions.push(prediction);
    }
    Ok(predictions)
}
