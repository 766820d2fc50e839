//! What the rest of the server sends a data-plane thread through its bounded queue.

use std::sync::Arc;

use isnode_serve_core::schedule::Schedule;

use crate::stream::StreamShared;

/// A stream handed to a data-plane thread.
pub struct NewSession {
    /// What the API and the data plane share about it.
    pub shared: Arc<StreamShared>,
    /// Its pacer.
    pub pacer: Schedule,
}

/// What the control API sends a data-plane thread.
pub(crate) enum PlaneMsg {
    /// A session to serve (boxed: the queue's slots stay small for the wake-ups).
    New(Box<NewSession>),
    /// Control requests are queued on one of its sessions (a validation's resume, a seek,
    /// a pause): apply them now rather than after the loop's sleep. At most one is queued
    /// per thread (`Plane::wake`), so wake-ups never fill the queue new sessions come by.
    Wake,
}
