//! The JSON error answer every route gives: a status and an [`isnode_proto::ErrorBody`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use isnode_proto::ErrorBody;

/// An error answer: its status and JSON body.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    /// An answer of `status` whose body's message is `msg`.
    pub fn new(status: StatusCode, msg: impl std::fmt::Display) -> ApiError {
        ApiError {
            status,
            body: ErrorBody::new(msg.to_string()),
        }
    }

    /// An answer of `status` with the whole `body` (a refusal names its limit and value).
    pub fn with_body(status: StatusCode, body: ErrorBody) -> ApiError {
        ApiError { status, body }
    }

    /// The message of the body.
    pub fn into_message(self) -> String {
        self.body.error
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

/// The error answer of `status` with the message `msg`.
pub fn error(status: StatusCode, msg: impl std::fmt::Display) -> Response {
    ApiError::new(status, msg).into_response()
}
