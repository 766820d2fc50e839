//! Planning errors: each says what was asked, why it cannot be planned, and what would do.
//! A server API returns them as 4xx.

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A size or rate of the title is zero.
    #[error("the title's {what} is zero; a broadcast plan needs a non-empty title with a bitrate")]
    Empty {
        /// Which input was zero.
        what: &'static str,
    },
    /// A time given in seconds is not a positive finite number.
    #[error("{what} must be a positive finite number of seconds, got {value}")]
    BadSeconds {
        /// Which input.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// The maximum wait is shorter than one codeword's airtime: no segment fits in it.
    #[error(
        "maximum wait {wait_s:.3} s is shorter than {needed} codeword airtime(s) of {airtime_s:.3} s \
         (codeword of {codeword_bytes} bytes at {bitrate_bps} bit/s) that {scheme} needs; \
         allow a longer wait or use smaller codewords"
    )]
    WaitTooShort {
        /// The scheme asked for.
        scheme: String,
        /// The maximum wait asked for, seconds.
        wait_s: f64,
        /// Airtime of one codeword at the title's bitrate, seconds.
        airtime_s: f64,
        /// Codewords of airtime the scheme needs at least.
        needed: u64,
        /// Payload bytes of one codeword.
        codeword_bytes: u64,
        /// The title's bitrate.
        bitrate_bps: u64,
    },
    /// The scheme's name is not one of ours.
    #[error("unknown broadcast scheme {0:?}; known: {known}", known = crate::names::SCHEME_NAMES.join(", "))]
    UnknownScheme(String),
    /// A scheme parameter is outside its range.
    #[error("{scheme}: parameter {name} = {value} is out of range ({range})")]
    Parameter {
        /// The scheme.
        scheme: &'static str,
        /// The parameter's name.
        name: &'static str,
        /// The value given.
        value: u64,
        /// The range allowed.
        range: &'static str,
    },
    /// The plan would need more channels than a plan may have.
    #[error(
        "{scheme} would need {channels} channels for this title and wait (at most {limit}); \
         allow a longer wait"
    )]
    TooManyChannels {
        /// The scheme.
        scheme: &'static str,
        /// Channels it would need.
        channels: u64,
        /// The limit.
        limit: u64,
    },
    /// The client would have to receive faster than its cap.
    #[error(
        "{scheme} needs a client receive rate of {needed_bps:.0} bit/s, above the cap of \
         {cap_bps} bit/s; raise the cap or pick a scheme with fewer channels at once \
         (staggered, skyscraper, pyramid)"
    )]
    ClientBandwidth {
        /// The scheme.
        scheme: &'static str,
        /// Peak receive rate the plan needs, bit/s.
        needed_bps: f64,
        /// The cap given, bit/s.
        cap_bps: u64,
    },
}
