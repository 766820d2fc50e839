//! Settings chosen from a fixed set of names (the engine, the block reads, ...): each lists
//! its values once, with the name the command line and the TOML file use and a line of help,
//! so the CLI builds its parsers and help from them without this crate knowing clap.

use crate::config::{
    BroadcastMode, Degraded, EncryptDefault, EngineKind, ReadIo, ValidateDestination,
};

/// A setting with a fixed set of named values.
pub trait Choice: Copy + PartialEq + std::fmt::Debug + Sized + Send + Sync + 'static {
    /// Every value, in order: the value, its name, a line of help.
    const CHOICES: &'static [(Self, &'static str, &'static str)];
}

impl Choice for EngineKind {
    const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            EngineKind::Gso,
            "gso",
            "`sendmsg` with `UDP_SEGMENT` (GSO) straight from the block pool: one call per run",
        ),
        (
            EngineKind::UringZc,
            "uring-zc",
            "io_uring `SEND_ZC` from the registered pool buffers, with socket-level GSO",
        ),
        (
            EngineKind::Sendmmsg,
            "sendmmsg",
            "`sendmmsg` from the pool: one call per run, one datagram per packet in the kernel",
        ),
        (
            EngineKind::Traditional,
            "traditional",
            "The seeds' baseline: buffered reads into a per-session buffer, parity encoded at send time, headers built and payload copied per packet, one `sendto` per packet",
        ),
        (
            EngineKind::Sendfile,
            "sendfile",
            "`sendfile(2)` of each run of stored packets from the page cache (buffered segment files) into a per-session connected UDP socket with `UDP_SEGMENT`: the kernel hands page-cache pages to the socket, no copy from user memory (the CDA seed's direct path behind the ordinary sendfile interface; what nginx does for HTTP)",
        ),
    ];
}

impl Choice for Degraded {
    const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            Degraded::Rebuild,
            "rebuild",
            "Rebuild the missing symbols from the other members and send them",
        ),
        (
            Degraded::SendAvailable,
            "send-available",
            "Send what can be read; the client's FEC repairs the rest",
        ),
    ];
}

impl Choice for EncryptDefault {
    const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            EncryptDefault::Off,
            "off",
            "Stored clear (an upload may ask for encryption: `?encrypt=on`)",
        ),
        (
            EncryptDefault::On,
            "on",
            "Uploads (unless one asks `?encrypt=off`) and fills from the origin are encrypted at ingest: MPEG-TS as HLS AES-128, CMAF as CENC `cbcs`; other media is refused",
        ),
    ];
}

impl Choice for ValidateDestination {
    const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            ValidateDestination::Token,
            "token",
            "Send a token datagram to the destination; stream once the client echoes it (`isnode_proto::auth`)",
        ),
        (
            ValidateDestination::Off,
            "off",
            "Stream at once. Only for closed test rigs whose destinations cannot answer (the ifb sink of `bench serve`): any client can then aim a stream at any port of its own address",
        ),
    ];
}

impl Choice for ReadIo {
    const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            ReadIo::Uring,
            "uring",
            "io_uring `READ_FIXED` (O_DIRECT, registered pool buffers) without blocking the thread's other sessions; falls back to `Sync` where io_uring is unavailable",
        ),
        (
            ReadIo::Sync,
            "sync",
            "A synchronous `pread` (O_DIRECT where allowed) on the data-plane thread",
        ),
    ];
}

impl Choice for BroadcastMode {
    const CHOICES: &'static [(Self, &'static str, &'static str)] = &[
        (
            BroadcastMode::Off,
            "off",
            "Only broadcasts asked for (`POST /v1/broadcasts`)",
        ),
        (
            BroadcastMode::Auto,
            "auto",
            "Also when a title's unicast demand would cost more than its broadcast",
        ),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_match_serde<T: Choice + serde::Serialize>() {
        for (v, name, help) in T::CHOICES {
            let json = serde_json::to_string(v).expect("serialises");
            assert_eq!(json, format!("\"{name}\""), "{name}");
            assert_eq!(T::CHOICES.iter().filter(|(_, n, _)| n == name).count(), 1);
            assert!(!help.is_empty());
        }
    }

    #[test]
    fn every_choice_is_named_as_in_the_toml_file() {
        names_match_serde::<EngineKind>();
        names_match_serde::<Degraded>();
        names_match_serde::<ValidateDestination>();
        names_match_serde::<ReadIo>();
        names_match_serde::<BroadcastMode>();
    }
}
