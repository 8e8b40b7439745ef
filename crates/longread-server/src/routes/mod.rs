//! The routes, and the layer that counts and times every request.

pub(crate) mod classify;
pub(crate) mod embed;
mod guard;
pub(crate) mod info;
pub(crate) mod models;
pub(crate) mod page;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::limit::RequestBodyLimitLayer;

use crate::error::{ApiError, ErrorBody, OpenAiErrorBody};
use crate::metrics::{Route, RouteStatus};
use crate::state::AppState;

/// Every route over `state`, with the body limit, the guard (host, API key, JSON, CORS) and
/// the metrics layer.
pub(crate) fn router(state: Arc<AppState>) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        // TEI's aliases too: POST / and /invocations (SageMaker) predict with a classifier,
        // GET /ping (SageMaker) is /health, and /embeddings is OpenAI's route for clients whose
        // base URL has no /v1 (TEI's GET / is our page).
        .route("/", get(page::page).post(classify::predict))
        .route("/invocations", post(classify::predict))
        .route("/report", post(page::report))
        .route("/classify", post(classify::classify))
        .route("/predict", post(classify::predict))
        .route("/embed", post(embed::embed))
        .route("/v1/embeddings", post(embed::openai_embeddings))
        .route("/embeddings", post(embed::openai_embeddings))
        .route("/v1/models", get(models::list))
        .route("/v1/models/{model}", get(models::retrieve))
        .route("/health", get(info::health))
        .route("/ping", get(info::health))
        .route("/info", get(info::info))
        .route("/metrics", get(info::metrics))
        .route("/openapi.json", get(info::openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // The last layer is the outermost: the limit's 413s are reshaped, then counted. axum's
        // extractors have a default limit of their own (2 MiB): --max-body-bytes replaces it.
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(RequestBodyLimitLayer::new(limit))
        // A body that trickles in is cut off (408) after --request-timeout.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(state.config.request_timeout))
        .layer(axum::middleware::map_response(plain_errors_as_json))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), guard::guard))
        .layer(axum::middleware::from_fn(openai_errors))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&state), track))
        .with_state(state)
}

/// 404 in the errors' shape.
async fn not_found() -> ApiError {
    ApiError::not_found("no such route; GET /openapi.json lists them")
}

/// 405 in the errors' shape (axum's own has an empty body).
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::method_not_allowed(format!("{} does not take {method}; GET /openapi.json lists the routes", uri.path()))
}

/// The HTTP stack's bare errors in the errors' shape: the body limit's 413, and a body that
/// could not be read (too slow: 408; cut off: 400).
async fn plain_errors_as_json(response: Response) -> Response {
    let is_json = response.headers().get("content-type").is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json || !response.status().is_client_error() {
        return response;
    }
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::too_large("the request body is over the limit (--max-body-bytes)").into_response();
    }
    let status = response.status();
    let text = match axum::body::to_bytes(response.into_body(), 64 * 1024).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => String::new(),
    };
    if text.contains("timed out") || text.contains("timeout") {
        return ApiError::body_timeout("the request body arrived too slowly (--request-timeout)").into_response();
    }
    ApiError::with_status(status, if text.is_empty() { "the request could not be read".into() } else { text })
        .into_response()
}

/// Errors on OpenAI's routes (`/v1/...`, `/embeddings`) in OpenAI's shape, `{"error": {"message", "type",
/// "param", "code"}}`, whichever layer answered them (the guard's 401, the body limit's 413,
/// the handler's 422): OpenAI's clients read `error.message`, and showed only the status for
/// TEI's `{"error": "...", "error_type"}`.
async fn openai_errors(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let openai = path.starts_with("/v1/") || path == "/embeddings";
    let response = next.run(request).await;
    if !openai || response.status().is_success() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    let reshaped = serde_json::from_slice::<ErrorBody>(&bytes)
        .ok()
        .and_then(|e| serde_json::to_vec(&OpenAiErrorBody::from(e)).ok());
    match reshaped {
        Some(json) => {
            parts.headers.remove(axum::http::header::CONTENT_LENGTH);
            Response::from_parts(parts, axum::body::Body::from(json))
        }
        None => Response::from_parts(parts, axum::body::Body::from(bytes)),
    }
}

/// Counts every request by route and status and times it; a request whose client goes away
/// before the answer (its future dropped) counts as status 499 and in `requests_cancelled`.
async fn track(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let mut pending = Pending { state, route, started: Instant::now(), status: None };
    let response = next.run(request).await;
    pending.status = Some(response.status().as_u16());
    response
}

/// A request being answered: recorded when it ends, answered or dropped.
struct Pending {
    state: Arc<AppState>,
    route: String,
    started: Instant,
    /// The answer's status; `None` while (and if never) answered.
    status: Option<u16>,
}

/// nginx's "client closed request".
const CLIENT_CLOSED: u16 = 499;

impl Drop for Pending {
    fn drop(&mut self) {
        let metrics = &self.state.metrics;
        let route = std::mem::take(&mut self.route);
        if self.status.is_none() {
            metrics.cancelled.get_or_create(&Route { route: route.clone() }).inc();
        }
        let status = self.status.unwrap_or(CLIENT_CLOSED);
        metrics.requests.get_or_create(&RouteStatus { route: route.clone(), status }).inc();
        metrics.request_seconds.get_or_create(&Route { route }).observe(self.started.elapsed().as_secs_f64());
    }
}
