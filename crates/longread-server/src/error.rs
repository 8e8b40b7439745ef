//! Errors: the server's own (it could not start), and a request's, answered as
//! `{"error": ..., "error_type": ...}` with text-embeddings-inference's status codes (on OpenAI's
//! routes, `/v1/...`, in OpenAI's shape: [`OpenAiErrorBody`]).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A setting that cannot work.
    #[error("{0}")]
    Config(String),
    /// The address could not be bound, or serving failed.
    #[error("{0}")]
    Io(String),
}

/// What kind of failure a request met (TEI's `error_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// The request is malformed or over a limit.
    Validation,
    /// A text could not be tokenized or classified (empty, no words).
    Tokenizer,
    /// Too many requests in flight.
    Overloaded,
    /// The model failed while running.
    Backend,
    /// The model is loading or failed to load.
    Unhealthy,
    /// No such route or model.
    NotFound,
    /// A route that exists, asked with another method.
    MethodNotAllowed,
    /// A missing or wrong API key, or a request for another host.
    Unauthorized,
}

/// The JSON body of every error.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub error: String,
    /// Its kind.
    pub error_type: ErrorType,
}

/// The JSON body of an error on OpenAI's routes (`/v1/...`), as OpenAI answers: its clients
/// read `error.message` (they showed only "Error code: 422" for the shape above).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct OpenAiErrorBody {
    /// The error.
    pub error: OpenAiErrorDetail,
}

/// What OpenAI's error holds.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct OpenAiErrorDetail {
    /// What went wrong, for people.
    pub message: String,
    /// Its kind (as `error_type` elsewhere).
    #[serde(rename = "type")]
    pub kind: ErrorType,
    /// The request field at fault; not given.
    pub param: Option<String>,
    /// OpenAI's error code; not given.
    pub code: Option<String>,
}

impl From<ErrorBody> for OpenAiErrorBody {
    fn from(body: ErrorBody) -> Self {
        Self { error: OpenAiErrorDetail { message: body.error, kind: body.error_type, param: None, code: None } }
    }
}

/// A request's failure: its status and body.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, error_type: ErrorType, message: impl Into<String>) -> Self {
        Self { status, body: ErrorBody { error: message.into(), error_type } }
    }

    /// 422: invalid JSON, wrong types, an empty text.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, ErrorType::Validation, message)
    }

    /// 422: a text the model cannot read.
    pub fn tokenizer(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, ErrorType::Tokenizer, message)
    }

    /// 413: a body, text or batch over the limits.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorType::Validation, message)
    }

    /// 400: an empty batch.
    pub fn empty_batch() -> Self {
        Self::new(StatusCode::BAD_REQUEST, ErrorType::Validation, "`inputs` must not be an empty list")
    }

    /// 429: too many requests in flight.
    pub fn overloaded(limit: usize) -> Self {
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorType::Overloaded,
            format!(
                "the server is overloaded: {limit} requests are in flight (--max-concurrent-requests); retry later"
            ),
        )
    }

    /// 429: the text in flight would go over `--max-inflight-text-bytes`.
    pub fn memory_full(held: usize, asked: usize, budget: usize) -> Self {
        let mib = |b: usize| b as f64 / (1u64 << 20) as f64;
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorType::Overloaded,
            format!(
                "the server is overloaded: {:.1} MiB of text are in flight and this request brings {:.1} MiB, over \
                 the {:.1} MiB of --max-inflight-text-bytes; retry later",
                mib(held),
                mib(asked),
                mib(budget)
            ),
        )
    }

    /// 503: a request that waited `--max-queue-time` for its answer (its work is cancelled).
    pub fn deadline(waited: std::time::Duration) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorType::Overloaded,
            format!(
                "no answer within {:.0} s (--max-queue-time): the request was cancelled; retry later",
                waited.as_secs_f64()
            ),
        )
    }

    /// 424: the model failed while running (TEI's backend error).
    pub fn backend(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FAILED_DEPENDENCY, ErrorType::Backend, message)
    }

    /// 503: the model is loading or failed to load.
    pub fn unhealthy(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, ErrorType::Unhealthy, message)
    }

    /// 404: a route or model the server does not have.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorType::NotFound, message)
    }

    /// 401: no valid `Authorization: Bearer` key.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, ErrorType::Unauthorized, message)
    }

    /// 403: a Host header that does not name the machine (a loopback server).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, ErrorType::Unauthorized, message)
    }

    /// 415: a request body that is not declared as JSON.
    pub fn not_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, ErrorType::Validation, message)
    }

    /// 408: a request body that did not arrive within `--request-timeout`.
    pub fn body_timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::REQUEST_TIMEOUT, ErrorType::Validation, message)
    }

    /// Another client error of the HTTP stack, with its status.
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> Self {
        Self::new(status, ErrorType::Validation, message)
    }

    /// 405: a route that exists, with another method.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, ErrorType::MethodNotAllowed, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body)).into_response();
        if matches!(self.status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE) {
            // Overload and loading pass: a client may retry after a moment.
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        }
        response
    }
}
