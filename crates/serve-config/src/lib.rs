//! The server's configuration as one plain serde value ([`ServeConfig`]): the TOML file and
//! the command line's flags both produce it, [`ServeConfig::validate`] checks it once, and
//! every part of the server reads the sections it needs. No clap here: the CLI overlays its
//! flags on this value, and lists the named settings from [`choice::Choice`].

pub mod cell;
pub mod choice;
pub mod config;
pub mod groups;
pub mod origin;

pub use cell::ConfigCell;
pub use choice::Choice;
pub use config::*;
pub use groups::GroupRange;
pub use origin::OriginKind;
