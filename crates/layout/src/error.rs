//! Why parameters or a layout were refused.

/// Parameters that break a rule, with the reason (the store reports it as its own
/// `BadParams`, with the same message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid parameters: {0}")]
pub struct ParamsError(pub String);
