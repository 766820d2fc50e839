//! ISA-L (`libisal`) through a minimal FFI: `ec_init_tables` and `ec_encode_data`.

use std::os::raw::{c_int, c_uchar};

use isnode_fec::matrix::Matrix;
use isnode_fec::Code;

use crate::contender::{CodecBenchError, Codeword, Contender};

extern "C" {
    fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
    fn ec_encode_data(
        len: c_int,
        k: c_int,
        rows: c_int,
        gftbls: *mut c_uchar,
        data: *mut *mut c_uchar,
        coding: *mut *mut c_uchar,
    );
}

fn err(message: &str) -> CodecBenchError {
    CodecBenchError::Peer {
        codec: "isa-l".into(),
        message: message.into(),
    }
}

/// ISA-L's kernels computing our RFC 5510 code.
pub struct Isal {
    code: Code,
    k: usize,
    m: usize,
    encode_tables: Vec<u8>,
    decode_tables: Vec<u8>,
}

/// `outputs = tables * inputs` with ISA-L; `tables` from `ec_init_tables(inputs, outputs)`.
fn run(
    tables: &mut [u8],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
) -> Result<(), CodecBenchError> {
    let len = inputs.first().map_or(0, |s| s.len());
    if tables.len() != inputs.len() * outputs.len() * 32
        || inputs.iter().any(|s| s.len() != len)
        || outputs.iter().any(|s| s.len() != len)
    {
        return Err(err("shape mismatch"));
    }
    let len = c_int::try_from(len).map_err(|_| err("symbol too long"))?;
    let mut ins: Vec<*mut u8> = inputs.iter().map(|s| s.as_ptr().cast_mut()).collect();
    let mut outs: Vec<*mut u8> = outputs.iter_mut().map(|s| s.as_mut_ptr()).collect();
    // SAFETY: `tables` holds `inputs * outputs * 32` bytes (checked), every pointer is valid
    // for `len` bytes, ISA-L only reads the inputs and writes the outputs, which are distinct
    // `&mut` slices; the counts fit in c_int since they are at most 255.
    #[allow(unsafe_code)]
    unsafe {
        ec_encode_data(
            len,
            ins.len() as c_int,
            outs.len() as c_int,
            tables.as_mut_ptr(),
            ins.as_mut_ptr(),
            outs.as_mut_ptr(),
        );
    }
    Ok(())
}

fn init_tables(coefs: &mut [u8], rows: usize, cols: usize) -> Vec<u8> {
    let mut tables = vec![0u8; rows * cols * 32];
    assert_eq!(coefs.len(), rows * cols);
    // SAFETY: `coefs` is `rows x cols`, `tables` has the `rows * cols * 32` bytes ISA-L
    // writes; both counts are at most 255.
    #[allow(unsafe_code)]
    unsafe {
        ec_init_tables(
            cols as c_int,
            rows as c_int,
            coefs.as_mut_ptr(),
            tables.as_mut_ptr(),
        );
    }
    tables
}

impl Isal {
    /// Our `k`, `k + m` code on ISA-L's kernels.
    pub fn new(k: usize, m: usize) -> Result<Isal, CodecBenchError> {
        let code = Code::new(k, k + m)?;
        let mut coefs = Vec::with_capacity(k * m);
        for esi in k..k + m {
            coefs.extend_from_slice(code.repair_coefficients(esi)?);
        }
        let encode_tables = init_tables(&mut coefs, m, k);
        Ok(Isal {
            code,
            k,
            m,
            encode_tables,
            decode_tables: Vec::new(),
        })
    }
}

impl Contender for Isal {
    fn codec(&self) -> String {
        "isa-l".into()
    }
    fn code(&self) -> String {
        "RFC 5510 RS GF(2^8)".into()
    }
    fn kernel(&self) -> String {
        "auto".into()
    }
    fn encode(&mut self, codeword: &mut Codeword) -> Result<(), CodecBenchError> {
        let (source, repair) = codeword.split_at_mut(self.k);
        let inputs: Vec<&[u8]> = source.iter().map(Vec::as_slice).collect();
        let mut outputs: Vec<&mut [u8]> =
            repair[..self.m].iter_mut().map(Vec::as_mut_slice).collect();
        run(&mut self.encode_tables, &inputs, &mut outputs)
    }
    fn decode(&mut self, codeword: &mut Codeword, present: &[bool]) -> Result<(), CodecBenchError> {
        let (k, n) = (self.k, self.k + self.m);
        let lost: Vec<usize> = (0..k).filter(|&i| !present[i]).collect();
        let e = lost.len();
        if e == 0 {
            return Ok(());
        }
        let kept: Vec<usize> = (0..k).filter(|&i| present[i]).collect();
        let repair: Vec<usize> = (k..n).filter(|&i| present[i]).take(e).collect();
        if repair.len() != e {
            return Err(err("not enough symbols"));
        }
        // D = A^-1 [I | G[R][P]], as isnode-fec does.
        let mut a = Matrix::zero(e, e);
        let mut rhs = Matrix::zero(e, k);
        for (r, &esi) in repair.iter().enumerate() {
            let row = self.code.repair_coefficients(esi)?;
            for (c, &s) in lost.iter().enumerate() {
                a.set(r, c, row[s]);
            }
            rhs.set(r, r, 1);
            for (c, &s) in kept.iter().enumerate() {
                rhs.set(r, e + c, row[s]);
            }
        }
        let a_inv = a.invert().ok_or_else(|| err("singular decode matrix"))?;
        let d = a_inv.mul(&rhs);
        let mut coefs: Vec<u8> = (0..e).flat_map(|r| d.row(r).to_vec()).collect();
        self.decode_tables = init_tables(&mut coefs, e, k);

        let mut by_esi: Vec<Option<&[u8]>> = vec![None; n];
        let mut outputs: Vec<&mut [u8]> = Vec::with_capacity(e);
        for (esi, shard) in codeword.iter_mut().enumerate() {
            if present[esi] {
                by_esi[esi] = Some(shard.as_slice());
            } else if esi < k {
                outputs.push(shard.as_mut_slice());
            }
        }
        let inputs: Vec<&[u8]> = repair
            .iter()
            .chain(&kept)
            .filter_map(|&esi| by_esi[esi])
            .collect();
        run(&mut self.decode_tables, &inputs, &mut outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isal_parity_is_ours() {
        let (k, m, len) = (20, 6, 100);
        let mut cw: Codeword = (0..k + m)
            .map(|i| (0..len).map(|b| (i * 13 + b * 5 + 1) as u8).collect())
            .collect();
        let mut ours = cw.clone();
        Isal::new(k, m)
            .expect("isal")
            .encode(&mut cw)
            .expect("encode");
        let code = Code::new(k, k + m).expect("shape");
        let (s, r) = ours.split_at_mut(k);
        let s: Vec<&[u8]> = s.iter().map(Vec::as_slice).collect();
        let mut r: Vec<&mut [u8]> = r.iter_mut().map(Vec::as_mut_slice).collect();
        code.encode(&s, &mut r).expect("encode");
        assert_eq!(cw, ours);
    }
}
