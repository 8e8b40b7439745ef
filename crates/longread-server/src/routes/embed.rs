//! POST /embed (text-embeddings-inference's shape) and POST /v1/embeddings (OpenAI's), served
//! by `--embedding-model`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use longread_model::embedder::Embeddings;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ApiError, ErrorBody, OpenAiErrorBody};
use crate::input::{parse_body, Inputs};
use crate::state::AppState;

/// Texts per encoder batch when embedding.
const EMBED_BATCH: usize = 32;

/// POST /embed's body (TEI's, and the root-level keys `huggingface_hub.InferenceClient`'s
/// `feature_extraction` sends). Any other key is refused: a misspelt option ("normalise") was
/// ignored, and the answer was computed without it.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbedRequest {
    /// One text, or a list of texts.
    #[schema(value_type = Object, example = json!("What is deep learning?"))]
    inputs: Value,
    /// Scale each vector to unit length (default true).
    #[serde(default)]
    normalize: Option<bool>,
    /// Cut texts longer than the model's maximum length (default true, as TEI started with
    /// `--auto-truncate`); false: such a text is refused (413), as TEI refuses it.
    #[serde(default)]
    truncate: Option<bool>,
    /// TEI's sentence-transformers prompt: refused when given (the model has no prompts).
    #[serde(default)]
    prompt_name: Option<String>,
    /// "right" (what the server does); "left" is refused.
    #[serde(default)]
    truncation_direction: Option<String>,
    /// Keep the first N dimensions of each vector (before normalizing), as TEI and the
    /// Inference API do for Matryoshka models; it was ignored.
    #[serde(default)]
    dimensions: Option<usize>,
    /// "float" (what /embed answers); anything else is refused.
    #[serde(default)]
    encoding_format: Option<String>,
    /// The Inference API's feature-extraction parameters, which older
    /// `huggingface_hub.InferenceClient`s send (nulls included).
    #[serde(default)]
    parameters: Option<EmbedParameters>,
}

/// `parameters` of POST /embed: the Inference API's feature extraction (other keys refused).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EmbedParameters {
    /// As the body's `normalize`.
    #[serde(default)]
    normalize: Option<bool>,
    /// As the body's `prompt_name`.
    #[serde(default)]
    prompt_name: Option<String>,
    /// As the body's `truncate`.
    #[serde(default)]
    truncate: Option<bool>,
    /// As the body's `truncation_direction`.
    #[serde(default)]
    truncation_direction: Option<String>,
    /// As the body's `dimensions`.
    #[serde(default)]
    dimensions: Option<usize>,
}

impl EmbedRequest {
    /// Whether to normalize: the body's `normalize` or `parameters.normalize` (they must agree
    /// when both are given; was: `parameters` ignored, so `normalize=False` from
    /// InferenceClient gave unit vectors); a prompt, left truncation and an encoding other than
    /// floats are refused.
    fn normalize(&self) -> Result<bool, ApiError> {
        let parameters = self.parameters.as_ref();
        if self.prompt_name.is_some() || parameters.is_some_and(|p| p.prompt_name.is_some()) {
            return Err(ApiError::invalid("`prompt_name`: the embedding model has no prompts"));
        }
        let direction =
            self.truncation_direction.as_deref().or(parameters.and_then(|p| p.truncation_direction.as_deref()));
        if direction.is_some_and(|d| !d.eq_ignore_ascii_case("right")) {
            return Err(ApiError::invalid(
                "`truncation_direction`: this server truncates long texts on the right (their last tokens are cut); \
                 \"left\" is not supported",
            ));
        }
        if self.encoding_format.as_deref().is_some_and(|f| f != "float") {
            return Err(ApiError::invalid(
                "`encoding_format`: /embed answers floats; POST /v1/embeddings also answers \"base64\"",
            ));
        }
        agree("normalize", self.normalize, parameters.and_then(|p| p.normalize)).map(|n| n.unwrap_or(true))
    }

    /// Whether to cut long texts: the body's `truncate` or `parameters.truncate` (which must
    /// agree), true when neither is given.
    fn truncate(&self) -> Result<bool, ApiError> {
        agree("truncate", self.truncate, self.parameters.as_ref().and_then(|p| p.truncate)).map(|t| t.unwrap_or(true))
    }

    /// How many dimensions to keep: the body's `dimensions` or `parameters.dimensions` (which
    /// must agree), at least 1.
    fn dimensions(&self) -> Result<Option<usize>, ApiError> {
        let dimensions = agree("dimensions", self.dimensions, self.parameters.as_ref().and_then(|p| p.dimensions))?;
        if dimensions == Some(0) {
            return Err(ApiError::invalid("`dimensions` must be at least 1"));
        }
        Ok(dimensions)
    }
}

/// A setting given in the body, in `parameters`, or in both (then they must agree).
fn agree<T: PartialEq>(name: &str, body: Option<T>, parameters: Option<T>) -> Result<Option<T>, ApiError> {
    match (body, parameters) {
        (Some(a), Some(b)) if a != b => {
            Err(ApiError::invalid(format!("`{name}` and `parameters.{name}` disagree: give one of them")))
        }
        (a, b) => Ok(a.or(b)),
    }
}

/// POST /v1/embeddings' body (OpenAI's).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct OpenAiRequest {
    /// One text, or a list of texts.
    #[schema(value_type = Object, example = json!(["What is deep learning?"]))]
    input: Value,
    /// Echoed back; the server has one embedding model.
    #[serde(default)]
    model: Option<String>,
    /// "float" (the default: a list of numbers) or "base64" (the vector's little-endian f32
    /// bytes in standard base64, what OpenAI's own clients ask for unless told otherwise).
    #[serde(default)]
    encoding_format: Option<String>,
    /// Keep the first N dimensions of each vector, scaled back to unit length (as OpenAI's
    /// text-embedding-3 models shorten theirs; meaningful for models trained for it, such as
    /// Matryoshka embeddings). Default: all of them.
    #[serde(default)]
    dimensions: Option<usize>,
    /// Accepted as OpenAI accepts it (an end user's id); not used.
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
}

/// How a vector is written in OpenAI's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EncodingFormat {
    Float,
    Base64,
}

impl EncodingFormat {
    fn parse(name: Option<&str>) -> Result<Self, ApiError> {
        match name {
            None | Some("float") => Ok(Self::Float),
            Some("base64") => Ok(Self::Base64),
            Some(_) => Err(ApiError::invalid("`encoding_format` must be \"float\" or \"base64\"")),
        }
    }
}

/// One vector in OpenAI's answer: numbers, or base64 of their little-endian f32 bytes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub(crate) enum EmbeddingVector {
    /// `encoding_format` "float".
    Float(Vec<f32>),
    /// `encoding_format` "base64".
    Base64(String),
}

impl EmbeddingVector {
    fn encode(vector: Vec<f32>, format: EncodingFormat) -> Self {
        use base64::Engine;
        match format {
            EncodingFormat::Float => Self::Float(vector),
            EncodingFormat::Base64 => {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                Self::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

/// One vector in OpenAI's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct OpenAiEmbedding {
    object: &'static str,
    embedding: EmbeddingVector,
    index: usize,
}

/// Token counts in OpenAI's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Usage {
    prompt_tokens: usize,
    total_tokens: usize,
}

/// OpenAI's answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct OpenAiResponse {
    object: &'static str,
    data: Vec<OpenAiEmbedding>,
    model: String,
    usage: Usage,
}

/// Sentence embeddings (pooled as the model's sentence-transformers modules say), one vector per text, as TEI answers.
#[utoipa::path(post, path = "/embed", request_body = EmbedRequest,
    responses(
        (status = 200, description = "One vector per text", body = Vec<Vec<f32>>),
        (status = 404, description = "No --embedding-model", body = ErrorBody),
        (status = 413, description = "Body, text or batch over the limits; a text over the model's maximum length with `truncate: false`", body = ErrorBody),
        (status = 422, description = "Invalid JSON, wrong types, an empty text", body = ErrorBody),
        (status = 429, description = "Too many requests in flight", body = ErrorBody),
    ))]
pub(crate) async fn embed(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Json<Vec<Vec<f32>>>, ApiError> {
    let request: EmbedRequest = parse_body(&body)?;
    let (normalize, dimensions, truncate) = (request.normalize()?, request.dimensions()?, request.truncate()?);
    let inputs = Inputs::from_value(request.inputs, "inputs")?;
    let embeddings = embed_inputs(&state, &inputs, "inputs", Vectors { dimensions, normalize, truncate }).await?;
    Ok(Json(embeddings.vectors))
}

/// Sentence embeddings as OpenAI's embeddings API answers (unit length).
#[utoipa::path(post, path = "/v1/embeddings", request_body = OpenAiRequest,
    responses(
        (status = 200, description = "One embedding per text", body = OpenAiResponse),
        (status = 404, description = "No --embedding-model", body = OpenAiErrorBody),
        (status = 413, description = "Body, text or batch over the limits", body = OpenAiErrorBody),
        (status = 422, description = "Invalid JSON, wrong types, an empty text", body = OpenAiErrorBody),
        (status = 429, description = "Too many requests in flight", body = OpenAiErrorBody),
    ))]
pub(crate) async fn openai_embeddings(
    State(state): State<Arc<AppState>>,
    body: Bytes,
) -> Result<Json<OpenAiResponse>, ApiError> {
    let request: OpenAiRequest = parse_body(&body)?;
    let format = EncodingFormat::parse(request.encoding_format.as_deref())?;
    if request.dimensions == Some(0) {
        return Err(ApiError::invalid("`dimensions` must be at least 1"));
    }
    let inputs = Inputs::from_value(request.input, "input")?;
    let vectors = Vectors { dimensions: request.dimensions, normalize: true, truncate: true };
    let embeddings = embed_inputs(&state, &inputs, "input", vectors).await?;
    let tokens: usize = embeddings.token_counts.iter().sum();
    let data = embeddings
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, vector)| OpenAiEmbedding {
            object: "embedding",
            embedding: EmbeddingVector::encode(vector, format),
            index,
        })
        .collect();
    let model = request.model.unwrap_or_else(|| model_id(&state));
    Ok(Json(OpenAiResponse {
        object: "list",
        data,
        model,
        usage: Usage { prompt_tokens: tokens, total_tokens: tokens },
    }))
}

/// The embedding model's name: its directory's.
pub(crate) fn model_id(state: &AppState) -> String {
    let dir = state.config.embedding_model.as_deref().unwrap_or(std::path::Path::new(""));
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// What a request asks of its vectors.
#[derive(Debug, Clone, Copy)]
struct Vectors {
    /// Keep the first N dimensions (before normalizing).
    dimensions: Option<usize>,
    /// Scale to unit length.
    normalize: bool,
    /// Cut texts over the model's maximum length (else refuse them).
    truncate: bool,
}

/// Checks and embeds the texts of `inputs` off the async threads.
async fn embed_inputs(
    state: &Arc<AppState>,
    inputs: &Inputs,
    field: &str,
    asked: Vectors,
) -> Result<Embeddings, ApiError> {
    let Vectors { dimensions, normalize, truncate } = asked;
    let loaded = state.loaded()?;
    let Some(embedder) = loaded.embedder.as_ref().map(Arc::clone) else {
        return Err(ApiError::not_found("this server has no embedding model (start it with --embedding-model DIR)"));
    };
    let width = embedder.dimension();
    if let Some(d) = dimensions.filter(|&d| d > width) {
        return Err(ApiError::invalid(format!("`dimensions` {d} is more than the model's {width}")));
    }
    let cfg = &state.config;
    let texts: Vec<String> =
        inputs.texts(field, cfg.max_client_batch_size, cfg.max_input_chars)?.into_iter().map(str::to_owned).collect();
    let _in_flight = state.admit(texts.iter().map(String::len).sum())?;
    let (single, field) = (matches!(inputs, Inputs::One(_)), field.to_owned());
    let mut embeddings = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let encoded = embedder.tokenize(&refs).map_err(|e| ApiError::backend(format!("embedding: {e}")))?;
        if let Some(i) = encoded.iter().position(|e| e.truncated).filter(|_| !truncate) {
            return Err(ApiError::too_large(format!(
                "{} is longer than the embedding model's {} tokens; send `truncate: true` to embed its first {} tokens",
                if single { format!("`{field}`") } else { format!("`{field}[{i}]`") },
                embedder.max_length(),
                embedder.max_length()
            )));
        }
        embedder.embed_encoded(encoded, EMBED_BATCH, |_| {}).map_err(|e| ApiError::backend(format!("embedding: {e}")))
    })
    .await
    .map_err(|e| ApiError::backend(format!("embedding: {e}")))??;
    if let Some(d) = dimensions {
        embeddings.vectors.iter_mut().for_each(|v| v.truncate(d));
    }
    if normalize {
        embeddings.normalize();
    }
    Ok(embeddings)
}
