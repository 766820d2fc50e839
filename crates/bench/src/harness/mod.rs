//! The server harness of the benchmarks that run `isnode serve`: one way to start the
//! server process and wait for it ([`server`]), to open sessions over its HTTP API and keep
//! them alive ([`session`], [`keepalive`], [`secret`]), to read its `/metrics` ([`metrics`]) and what
//! the process costs from /proc ([`process`]).

pub(crate) mod keepalive;
pub(crate) mod metrics;
pub(crate) mod process;
pub(crate) mod secret;
pub(crate) mod server;
pub(crate) mod session;
