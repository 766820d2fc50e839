//! The schemes' names, in table order (a leaf: the schemes and their errors both name them).

/// Every scheme's name, in table order (`Scheme::NAMES`).
pub(crate) const SCHEME_NAMES: [&str; 9] = [
    "staggered",
    "pyramid",
    "skyscraper",
    "fast",
    "pagoda",
    "harmonic",
    "cautious-harmonic",
    "quasi-harmonic",
    "polyharmonic",
];
