//! GET /health, /info, /metrics and /openapi.json.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// GET /info's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Info {
    /// The model directory's name.
    model_id: String,
    /// Its directory: the name, or with `--info-paths` the path as given.
    model_dir: String,
    /// What its evidence is made of: "chunk" or "sentence".
    evidence_unit: &'static str,
    /// Labels of the primary task, in id order.
    labels: Vec<String>,
    /// Every task's name and labels (multi-task models have several).
    #[schema(value_type = Object)]
    tasks: serde_json::Value,
    /// The model's configuration, chunking and parameters, as `longread inspect --json` shows them.
    #[schema(value_type = Object)]
    model: serde_json::Value,
    /// The embedding model's directory (name or path, as `model_dir`), if any.
    embedding_model: Option<String>,
    /// How it embeds: `pooling` ("mean" or "cls"), `normalize_module` (whether the model has
    /// sentence-transformers' Normalize module; requests choose), `dimension`, `max_tokens`.
    #[schema(value_type = Option<Object>)]
    embedding: Option<serde_json::Value>,
    /// The server's limits.
    #[schema(value_type = Object)]
    limits: serde_json::Value,
    /// Where the encoder runs: `cpu`, or `cuda:N (GPU name)`.
    device: String,
    /// longread's version.
    version: &'static str,
}

/// 200 when the models are loaded and the inference worker runs; 503 otherwise.
#[utoipa::path(get, path = "/health", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "Loading, or failed", body = ErrorBody),
))]
pub(crate) async fn health(State(state): State<Arc<AppState>>) -> Result<(), ApiError> {
    state.loaded().map(|_| ())
}

/// The model, its labels and chunking, and the server's limits.
#[utoipa::path(get, path = "/info", responses(
    (status = 200, description = "The model and limits", body = Info),
    (status = 503, description = "Loading, or failed", body = ErrorBody),
))]
pub(crate) async fn info(State(state): State<Arc<AppState>>) -> Result<Json<Info>, ApiError> {
    let loaded = state.loaded()?;
    let cfg = &state.config;
    let classifier = &loaded.classifier;
    let tasks: Vec<serde_json::Value> =
        classifier.tasks().iter().map(|t| serde_json::json!({"name": t.name, "labels": t.labels})).collect();
    // Full paths tell a caller about the host's file system: only with --info-paths.
    let shown = |path: &std::path::Path| {
        if cfg.info_paths {
            path.display().to_string()
        } else {
            path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
        }
    };
    let mut summary = loaded.summary.clone();
    if let Some(dir) = summary.get_mut("model_dir") {
        *dir = shown(&cfg.model).into();
    }
    Ok(Json(Info {
        model_id: cfg.model.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        model_dir: shown(&cfg.model),
        evidence_unit: classifier.evidence_unit(),
        labels: classifier.labels().to_vec(),
        tasks: serde_json::Value::from(tasks),
        model: summary,
        embedding_model: cfg.embedding_model.as_deref().map(shown),
        embedding: loaded.embedder.as_ref().map(|e| {
            serde_json::json!({
                "pooling": e.pooling().name(),
                "normalize_module": e.has_normalize_module(),
                "dimension": e.dimension(),
                "max_tokens": e.max_length(),
            })
        }),
        limits: serde_json::json!({
            "max_batch_tokens": classifier.max_batch_tokens(),
            "max_concurrent_requests": cfg.max_concurrent_requests,
            "max_inflight_text_bytes": cfg.max_inflight_text_bytes,
            "max_queue_time_seconds": cfg.max_queue_time.as_secs_f64(),
            "max_input_chars": cfg.max_input_chars,
            "max_client_batch_size": cfg.max_client_batch_size,
            "max_body_bytes": cfg.max_body_bytes,
            "precision": classifier.precision(),
            "occlusion": classifier.options().occlusion,
        }),
        device: longread_model::device::describe(classifier.device()),
        version: env!("CARGO_PKG_VERSION"),
    }))
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text format")))]
pub(crate) async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    if let Ok(loaded) = state.loaded() {
        state.metrics.queue_documents.set(loaded.queue.documents() as i64);
        state.metrics.queue_units.set(loaded.queue.waiting_units() as i64);
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render())
}

/// This API's OpenAPI document.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub(crate) async fn openapi() -> impl IntoResponse {
    use utoipa::OpenApi;
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::ApiDoc::openapi().to_pretty_json().unwrap_or_default(),
    )
}
