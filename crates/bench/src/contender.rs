//! What a codec under test is to the codec benchmark ([`crate::codec`]) and its peers
//! ([`crate::peers`]): the [`Contender`] trait, the [`Codeword`] it works on, and the
//! [`CodecBenchError`] both report.

use isnode_fec::FecError;

/// Why the codec benchmark could not run or produce a figure.
#[derive(Debug, thiserror::Error)]
pub enum CodecBenchError {
    /// The configuration is unusable.
    #[error("invalid codec benchmark configuration: {0}")]
    InvalidConfig(String),
    /// The codec refused the shape or the data.
    #[error("codec error: {0}")]
    Fec(#[from] FecError),
    /// A peer codec failed.
    #[error("{codec}: {message}")]
    Peer {
        /// The peer.
        codec: String,
        /// What went wrong.
        message: String,
    },
    /// A decoded codeword differs from the original: the decoder is broken.
    #[error(
        "decode produced wrong data (codeword {codeword}, ESI {esi}): refusing to report a figure"
    )]
    DecodeMismatch {
        /// Index of the codeword in the pool.
        codeword: usize,
        /// First ESI that differs.
        esi: usize,
    },
}

/// One codeword: `k + m` symbols, indexed by ESI.
pub type Codeword = Vec<Vec<u8>>;

/// A codec under test. `encode` fills symbols `k..k+m` of a codeword from symbols `0..k`;
/// `decode` rebuilds the source symbols whose `present` flag is false, in place.
pub trait Contender {
    /// Name of the codec (crate or library).
    fn codec(&self) -> String;
    /// Which code it computes.
    fn code(&self) -> String;
    /// Kernel or back end in use.
    fn kernel(&self) -> String;
    /// Encodes one codeword in place.
    fn encode(&mut self, codeword: &mut Codeword) -> Result<(), CodecBenchError>;
    /// Rebuilds the missing source symbols of one codeword in place.
    fn decode(&mut self, codeword: &mut Codeword, present: &[bool]) -> Result<(), CodecBenchError>;
}
