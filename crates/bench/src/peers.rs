//! Peer codecs for `isnode bench codec --compare`, each behind the [`Contender`] trait.
//!
//! * `reed-solomon-erasure` (feature `simd-accel`: its C SIMD kernels): Reed-Solomon over
//!   GF(2^8) with its own (Backblaze-style Vandermonde) matrix: a different parity, same
//!   kind of code.
//! * `reed-solomon-simd`: Leopard-style GF(2^16) FFT code: a different code, what a Rust
//!   user would pick for speed (needs even symbol lengths).
//! * `flute`: the RFC 5510 codec of the `flute` crate, reached through its `bench` feature
//!   (`flute::bench::ReedSolomon`, which builds its codec for each block and copies the data,
//!   as its public API does).
//! * ISA-L (`libisal`, when found at build time): `ec_encode_data` with **our** RFC 5510
//!   parity matrix (ISA-L's field is also GF(2^8)/0x11D, so the parity is byte-identical to
//!   ours), and for decoding the same `e x e` method as ours (the decode matrix computed with
//!   `isnode_fec::matrix`, then `ec_init_tables` + `ec_encode_data`): ISA-L's kernels at
//!   their best.

use crate::contender::{CodecBenchError, Codeword, Contender};

/// The peers that accept a `k`, `m`, `symbol_len_bytes` codeword, and the names (with the
/// reason) of those that do not.
pub fn all(k: usize, m: usize, symbol_len_bytes: usize) -> (Vec<Box<dyn Contender>>, Vec<String>) {
    let mut peers: Vec<Box<dyn Contender>> = Vec::new();
    let mut skipped = Vec::new();
    match Rse::new(k, m) {
        Ok(p) => peers.push(Box::new(p)),
        Err(e) => skipped.push(e.to_string()),
    }
    match RsSimd::new(k, m, symbol_len_bytes) {
        Ok(p) => peers.push(Box::new(p)),
        Err(e) => skipped.push(e.to_string()),
    }
    peers.push(Box::new(Flute::new(k, m, symbol_len_bytes)));
    #[cfg(has_isal)]
    match isal::Isal::new(k, m) {
        Ok(p) => peers.push(Box::new(p)),
        Err(e) => skipped.push(e.to_string()),
    }
    #[cfg(not(has_isal))]
    skipped.push("isa-l: libisal not found at build time (Debian: libisal-dev)".to_string());
    (peers, skipped)
}

fn peer_err(codec: &str, e: impl std::fmt::Debug) -> CodecBenchError {
    CodecBenchError::Peer {
        codec: codec.to_string(),
        message: format!("{e:?}"),
    }
}

/// `reed-solomon-erasure` over GF(2^8), with its SIMD C kernels.
pub struct Rse {
    rs: reed_solomon_erasure::galois_8::ReedSolomon,
    k: usize,
}

impl Rse {
    /// `k` data and `m` parity shards.
    pub fn new(k: usize, m: usize) -> Result<Rse, CodecBenchError> {
        Ok(Rse {
            rs: reed_solomon_erasure::galois_8::ReedSolomon::new(k, m)
                .map_err(|e| peer_err("reed-solomon-erasure", e))?,
            k,
        })
    }
}

impl Contender for Rse {
    fn codec(&self) -> String {
        "reed-solomon-erasure".into()
    }
    fn code(&self) -> String {
        "RS GF(2^8), own matrix".into()
    }
    fn kernel(&self) -> String {
        "simd-accel".into()
    }
    fn encode(&mut self, codeword: &mut Codeword) -> Result<(), CodecBenchError> {
        let (data, parity) = codeword.split_at_mut(self.k);
        self.rs
            .encode_sep(data, parity)
            .map_err(|e| peer_err("reed-solomon-erasure", e))
    }
    fn decode(&mut self, codeword: &mut Codeword, present: &[bool]) -> Result<(), CodecBenchError> {
        let mut shards: Vec<(&mut [u8], bool)> = codeword
            .iter_mut()
            .zip(present)
            .map(|(s, &p)| (s.as_mut_slice(), p))
            .collect();
        self.rs
            .reconstruct_data(&mut shards)
            .map_err(|e| peer_err("reed-solomon-erasure", e))
    }
}

/// `reed-solomon-simd` (GF(2^16) Leopard code).
pub struct RsSimd {
    encoder: reed_solomon_simd::ReedSolomonEncoder,
    decoder: reed_solomon_simd::ReedSolomonDecoder,
    k: usize,
    m: usize,
    len: usize,
}

impl RsSimd {
    /// `k` original and `m` recovery shards of `len` bytes (even).
    pub fn new(k: usize, m: usize, len: usize) -> Result<RsSimd, CodecBenchError> {
        Ok(RsSimd {
            encoder: reed_solomon_simd::ReedSolomonEncoder::new(k, m, len)
                .map_err(|e| peer_err("reed-solomon-simd", e))?,
            decoder: reed_solomon_simd::ReedSolomonDecoder::new(k, m, len)
                .map_err(|e| peer_err("reed-solomon-simd", e))?,
            k,
            m,
            len,
        })
    }
}

impl Contender for RsSimd {
    fn codec(&self) -> String {
        "reed-solomon-simd".into()
    }
    fn code(&self) -> String {
        "Leopard GF(2^16) FFT".into()
    }
    fn kernel(&self) -> String {
        "auto".into()
    }
    fn encode(&mut self, codeword: &mut Codeword) -> Result<(), CodecBenchError> {
        let err = |e| peer_err("reed-solomon-simd", e);
        self.encoder.reset(self.k, self.m, self.len).map_err(err)?;
        for shard in &codeword[..self.k] {
            self.encoder.add_original_shard(shard).map_err(err)?;
        }
        let result = self.encoder.encode().map_err(err)?;
        for (out, rec) in codeword[self.k..].iter_mut().zip(result.recovery_iter()) {
            out.copy_from_slice(rec);
        }
        Ok(())
    }
    fn decode(&mut self, codeword: &mut Codeword, present: &[bool]) -> Result<(), CodecBenchError> {
        let err = |e| peer_err("reed-solomon-simd", e);
        self.decoder.reset(self.k, self.m, self.len).map_err(err)?;
        for (i, shard) in codeword.iter().enumerate() {
            if !present[i] {
                continue;
            }
            if i < self.k {
                self.decoder.add_original_shard(i, shard).map_err(err)?;
            } else {
                self.decoder
                    .add_recovery_shard(i - self.k, shard)
                    .map_err(err)?;
            }
        }
        let result = self.decoder.decode().map_err(err)?;
        for (i, restored) in result.restored_original_iter() {
            codeword[i].copy_from_slice(restored);
        }
        Ok(())
    }
}

/// The `flute` crate's RFC 5510 codec (`flute::bench::ReedSolomon`, m = 8).
pub struct Flute {
    rs: flute::bench::ReedSolomon,
    k: usize,
    len: usize,
    block: Vec<u8>,
}

impl Flute {
    /// `k` source symbols, `k + m` encoding symbols of `len` bytes.
    pub fn new(k: usize, m: usize, len: usize) -> Flute {
        Flute {
            rs: flute::bench::ReedSolomon::new(8, k, k + m, len),
            k,
            len,
            block: vec![0; k * len],
        }
    }
}

impl Contender for Flute {
    fn codec(&self) -> String {
        "flute".into()
    }
    fn code(&self) -> String {
        "RFC 5510 RS GF(2^8)".into()
    }
    fn kernel(&self) -> String {
        format!("{:?}", flute::bench::Kernel::best()).to_lowercase()
    }
    fn encode(&mut self, codeword: &mut Codeword) -> Result<(), CodecBenchError> {
        for (chunk, symbol) in self.block.chunks_exact_mut(self.len).zip(&codeword[..]) {
            chunk.copy_from_slice(symbol);
        }
        let symbols = self.rs.encode(&self.block);
        // `encode` returns all n encoding symbols; the repair ones follow the k source ones.
        let repair = symbols.get(self.k..).unwrap_or_default();
        for (out, symbol) in codeword[self.k..].iter_mut().zip(repair) {
            out.copy_from_slice(symbol);
        }
        Ok(())
    }
    fn decode(&mut self, codeword: &mut Codeword, present: &[bool]) -> Result<(), CodecBenchError> {
        let symbols: Vec<(u32, &[u8])> = codeword
            .iter()
            .enumerate()
            .filter(|(i, _)| present[*i])
            .take(self.k)
            .map(|(i, s)| (i as u32, s.as_slice()))
            .collect();
        let block = self.rs.decode(&symbols);
        for (i, symbol) in codeword[..self.k].iter_mut().enumerate() {
            if !present[i] {
                symbol.copy_from_slice(&block[i * self.len..(i + 1) * self.len]);
            }
        }
        Ok(())
    }
}

#[cfg(has_isal)]
mod isal;

#[cfg(test)]
mod tests {
    use super::*;
    use isnode_fec::Code;

    /// Encodes a random-ish codeword with our codec and with `peer`; returns both.
    fn both(peer: &mut dyn Contender, k: usize, m: usize, len: usize) -> (Codeword, Codeword) {
        let mut ours: Codeword = (0..k + m)
            .map(|i| (0..len).map(|b| (i * 31 + b * 7 + 3) as u8).collect())
            .collect();
        let mut theirs = ours.clone();
        let code = Code::new(k, k + m).expect("shape");
        {
            let (s, r) = ours.split_at_mut(k);
            let s: Vec<&[u8]> = s.iter().map(Vec::as_slice).collect();
            let mut r: Vec<&mut [u8]> = r.iter_mut().map(Vec::as_mut_slice).collect();
            code.encode(&s, &mut r).expect("encode");
        }
        peer.encode(&mut theirs).expect("peer encode");
        (ours, theirs)
    }

    #[test]
    fn flute_parity_is_ours() {
        let (ours, theirs) = both(&mut Flute::new(10, 4, 64), 10, 4, 64);
        assert_eq!(ours, theirs);
    }

    #[test]
    fn every_peer_round_trips() {
        let (k, m, len) = (12, 4, 128);
        let (peers, _) = all(k, m, len);
        for mut peer in peers {
            let (_, mut cw) = both(peer.as_mut(), k, m, len);
            let original = cw.clone();
            let mut present = vec![true; k + m];
            for esi in [0, 3, 7, 11] {
                present[esi] = false;
                cw[esi].fill(0xEE);
            }
            peer.decode(&mut cw, &present).expect("decode");
            assert_eq!(cw, original, "{}", peer.codec());
        }
    }
}
