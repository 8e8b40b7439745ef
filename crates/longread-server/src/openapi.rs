//! The OpenAPI document (GET /openapi.json), generated from the handlers and their types.

use crate::error::{ErrorBody, ErrorType, OpenAiErrorBody, OpenAiErrorDetail};
use crate::routes::{classify, embed, info, models, page};

/// Every route and schema.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "longread",
        description = "Classifies whole long documents with hierarchical transformers and shows which parts drove the decision. TEI- and OpenAI-compatible routes included."
    ),
    paths(
        classify::classify,
        classify::predict,
        embed::embed,
        embed::openai_embeddings,
        models::list,
        models::retrieve,
        info::health,
        info::info,
        info::metrics,
        info::openapi,
        page::page,
        page::report
    ),
    components(schemas(
        ErrorBody,
        ErrorType,
        OpenAiErrorBody,
        OpenAiErrorDetail,
        classify::ClassifyRequest,
        classify::PredictRequest,
        classify::PredictParameters,
        classify::LabelScore,
        embed::EmbedRequest,
        embed::EmbedParameters,
        embed::OpenAiRequest,
        embed::OpenAiResponse,
        models::OpenAiModel,
        models::OpenAiModelList,
        info::Info,
        page::ReportRequest,
        longread_classifier::Prediction
    ))
)]
pub(crate) struct ApiDoc;
