//! Fills from the origin: a request for a title the volume lacks starts one (HEAD for its
//! size and ETag, then parallel 1 MiB-aligned ranged GETs with `If-Match`, pushed in order
//! into the store's `isnode_store::fill::Fill` and committed so that the durable front
//! advances), served while it runs up to its front (`isnode_pool::front`).
//!
//! One fill per title: [`Fills`] maps each title being filled to its job; every request for
//! it (session, content, playlist, digests, pre-fill) joins that job ([`start_or_join`],
//! [`find`]). The fill runs on its own thread (store writes block) with the origin's
//! requests on a small tokio runtime of its own ([`origin`]: S3 or a directory through
//! `object_store`), off the data plane and the API's runtime. An origin error retries with
//! backoff from the durable front; an object changed at the origin abandons the fill and
//! starts again. Failures are [`FillStatus`] kinds: the API maps them to HTTP statuses.

mod content_check;
mod evict;
mod fills;
mod job;
pub mod limits;
mod lookup;
pub mod origin;
mod probe;
mod protected;
mod resume;
mod run;
mod start;
mod status;
mod touch;

pub use fills::{
    FillCounters, FillEnv, FillSnapshot, Fills, UnlessInUse, FIRST_BYTES_WAIT, FRONT_WAIT,
};
pub use job::{FillJob, FillKind, FillReport, Phase};
pub use lookup::{find, first_answer, Found, LookupError};
pub use start::{resume_all, start_or_join, Starter};
pub use status::FillStatus;
