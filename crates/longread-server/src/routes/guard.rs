//! What a request must show before any route runs: a Host naming the machine when the server is
//! on loopback (DNS rebinding), the API key when one is set, a JSON body on POST (so a page on
//! another site cannot send one without a CORS preflight), and the CORS answers for the one
//! origins `--cors-allow-origin` names, if any.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::state::AppState;

/// Checks a request in the order above; answers CORS preflights for the allowed origin.
pub(crate) async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let config = &state.config;
    if let Err(refused) = host_allowed(config, &request) {
        return refused.into_response();
    }
    let origin = allowed_origin(config, &request);
    if request.method() == Method::OPTIONS {
        if let Some(origin) = origin {
            return preflight(origin);
        }
    }
    if let Err(refused) = authorized(config, &request).and_then(|()| declared_json(&request)) {
        return with_cors(refused.into_response(), origin);
    }
    with_cors(next.run(request).await, origin)
}

/// On loopback, the Host header must be `localhost`, `127.0.0.1` or `[::1]` (any port): a page
/// that rebinds its own name to 127.0.0.1 sends its own name.
fn host_allowed(config: &ServerConfig, request: &Request) -> Result<(), ApiError> {
    if !config.on_loopback() {
        return Ok(());
    }
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.split(':').next().unwrap_or(""),
    };
    if matches!(name.to_ascii_lowercase().as_str(), "localhost" | "127.0.0.1" | "::1") {
        return Ok(());
    }
    Err(ApiError::forbidden(format!(
        "Host {host:?} is not this machine: a server on {} answers requests for localhost, 127.0.0.1 or [::1] only",
        config.host
    )))
}

/// With `--api-key`, every route but GET /health (and its alias /ping) needs
/// `Authorization: Bearer KEY`.
fn authorized(config: &ServerConfig, request: &Request) -> Result<(), ApiError> {
    let Some(key) = &config.api_key else { return Ok(()) };
    if request.method() == Method::GET && matches!(request.uri().path(), "/health" | "/ping") {
        return Ok(());
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), key.as_bytes()) {
        Ok(())
    } else {
        Err(ApiError::unauthorized("send the API key as `Authorization: Bearer KEY` (--api-key)"))
    }
}

/// POST bodies must be declared `application/json` (the page and every client do): a
/// cross-site form or `text/plain` POST, which browsers send without asking, is refused.
fn declared_json(request: &Request) -> Result<(), ApiError> {
    if request.method() != Method::POST {
        return Ok(());
    }
    let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|h| h.to_str().ok()).unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if media == "application/json" {
        return Ok(());
    }
    Err(ApiError::not_json(format!(
        "send the body as JSON with `Content-Type: application/json` (got {:?})",
        if content_type.is_empty() { "none" } else { content_type }
    )))
}

/// The request's Origin, when `--cors-allow-origin` allows it (`*`: any; scheme and host
/// compare without regard to case, as URLs do).
fn allowed_origin(config: &ServerConfig, request: &Request) -> Option<HeaderValue> {
    let origin = request.headers().get(header::ORIGIN)?;
    let allowed = &config.cors_allow_origin;
    allowed.iter().any(|a| a == "*" || origin.as_bytes().eq_ignore_ascii_case(a.as_bytes())).then(|| origin.clone())
}

/// 204 to a preflight from the allowed origin.
fn preflight(origin: HeaderValue) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("content-type, authorization"));
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    headers.insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}

/// Adds the CORS header for an allowed origin.
fn with_cors(mut response: Response, origin: Option<HeaderValue>) -> Response {
    if let Some(origin) = origin {
        response.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        response.headers_mut().insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// Equality whose time depends on the lengths only, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let longest = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..longest {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_compare_equal_only_when_equal() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
