//! `GET /v1/models` and `GET /v1/models/{id}`: the one model this pod serves, as OpenAI lists models,
//! with the APIs it answers (`"apis": ["chat", "completions"]`), as the mesh's tiers list them.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use shared::model_spec::ModelApi;
use shared::RequestError;

use super::errors::error_response;
use super::ApiState;

/// Who the pod names as its models' owner.
pub const OWNED_BY: &str = "llm-cache-mesh";

/// `GET /v1/models`'s body (`object: "list"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    /// The served models (one).
    pub data: Vec<Model>,
}

/// One served model (`object: "model"`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Model {
    /// The name requests use.
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// When the pod started serving it (Unix seconds).
    pub created: i64,
    /// Always [`OWNED_BY`].
    pub owned_by: String,
    /// The APIs it answers: `chat` (`/v1/chat/completions`) and `completions` (`/v1/completions`).
    pub apis: Vec<ModelApi>,
}

impl Model {
    fn served(state: &ApiState) -> Self {
        Self {
            id: state.model_name().to_owned(),
            object: "model".to_owned(),
            created: state.created,
            owned_by: OWNED_BY.to_owned(),
            apis: state.apis(),
        }
    }
}

/// `GET /v1/models`.
pub async fn list(State(state): State<Arc<ApiState>>) -> Json<ModelList> {
    Json(ModelList { object: "list".to_owned(), data: vec![Model::served(&state)] })
}

/// `GET /v1/models/{id}`: the model, or OpenAI's 404 `model_not_found`. Names match case-insensitively,
/// as they do in requests.
pub async fn retrieve(State(state): State<Arc<ApiState>>, Path(id): Path<String>) -> Response {
    if id.eq_ignore_ascii_case(state.model_name()) {
        Json(Model::served(&state)).into_response()
    } else {
        error_response(&RequestError::model_not_found(&id))
    }
}
