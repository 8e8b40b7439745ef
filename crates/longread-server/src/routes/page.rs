//! GET / (a page to paste or drop a document and see its label, scores and the text shaded
//! by attention; `/?text=...` classifies that text at once) and POST /report (one document's
//! report, rendered as `longread report` renders it). No external scripts or fonts.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::Html;
use longread_report::{render_html, DocumentView};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiError, ErrorBody};
use crate::input::{parse_body, Inputs};
use crate::routes::classify::classify_inputs;
use crate::state::AppState;

/// POST /report's body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub(crate) struct ReportRequest {
    /// One document.
    #[schema(value_type = String)]
    inputs: Value,
}

/// The page.
#[utoipa::path(get, path = "/", responses((status = 200, description = "The web page", content_type = "text/html")))]
pub(crate) async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}

/// One document's report: label, scores, attention chart and the shaded text.
#[utoipa::path(post, path = "/report", request_body = ReportRequest,
    responses(
        (status = 200, description = "A self-contained HTML report", content_type = "text/html"),
        (status = 422, description = "Invalid JSON, not one text, an empty or unreadable text", body = ErrorBody),
    ))]
pub(crate) async fn report(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Html<String>, ApiError> {
    let request: ReportRequest = parse_body(&body)?;
    let inputs = Inputs::from_value(request.inputs, "inputs")?;
    let Inputs::One(text) = &inputs else {
        return Err(ApiError::invalid("`inputs` must be one text"));
    };
    let prediction = classify_inputs(&state, &inputs).await?.remove(0);
    let model = state.config.model.display().to_string();
    let view = DocumentView::of_result("document".into(), text, Ok(prediction));
    Ok(Html(render_html("longread", &model, &[view])))
}
