//! GET /v1/models and /v1/models/{model}: the model OpenAI's embeddings route serves, as
//! OpenAI lists models (its clients' `models.list()`, and tools that offer a choice of models).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;

use crate::error::{ApiError, OpenAiErrorBody};
use crate::routes::embed::model_id;
use crate::state::AppState;

/// One model, as OpenAI describes it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct OpenAiModel {
    /// The name to give as `model` (the embedding model directory's name).
    id: String,
    /// Always "model".
    object: &'static str,
    /// When the server loaded it, in seconds since the Unix epoch.
    created: u64,
    /// Always "longread".
    owned_by: &'static str,
}

/// OpenAI's list of models.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct OpenAiModelList {
    /// Always "list".
    object: &'static str,
    /// The embedding model, or nothing when the server has none.
    data: Vec<OpenAiModel>,
}

/// The models `/v1/embeddings` serves: the `--embedding-model`, or none.
#[utoipa::path(get, path = "/v1/models", responses(
    (status = 200, description = "The embedding model, if any", body = OpenAiModelList),
    (status = 503, description = "Loading, or failed", body = OpenAiErrorBody),
))]
pub(crate) async fn list(State(state): State<Arc<AppState>>) -> Result<Json<OpenAiModelList>, ApiError> {
    Ok(Json(OpenAiModelList { object: "list", data: served(&state)?.into_iter().collect() }))
}

/// One model by its id; 404 for any other.
#[utoipa::path(get, path = "/v1/models/{model}",
    params(("model" = String, Path, description = "A model id as /v1/models lists it")),
    responses(
        (status = 200, description = "The model", body = OpenAiModel),
        (status = 404, description = "No such model", body = OpenAiErrorBody),
        (status = 503, description = "Loading, or failed", body = OpenAiErrorBody),
    ))]
pub(crate) async fn retrieve(
    State(state): State<Arc<AppState>>,
    Path(model): Path<String>,
) -> Result<Json<OpenAiModel>, ApiError> {
    match served(&state)? {
        Some(served) if served.id == model => Ok(Json(served)),
        Some(served) => Err(ApiError::not_found(format!("the model `{model}` does not exist; this server has `{}`", served.id))),
        None => Err(ApiError::not_found(format!(
            "the model `{model}` does not exist; this server has no embedding model (start it with --embedding-model DIR)"
        ))),
    }
}

/// The embedding model once loaded, described.
fn served(state: &AppState) -> Result<Option<OpenAiModel>, ApiError> {
    let loaded = state.loaded()?;
    Ok(loaded.embedder.as_ref().map(|_| OpenAiModel {
        id: model_id(state),
        object: "model",
        created: loaded.loaded_at,
        owned_by: "longread",
    }))
}
