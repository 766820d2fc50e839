//! The `traditional` engine: the seed papers' 2003-style baseline server, kept only so that
//! benchmarks can compare against it, and kept out of the other engines' files.
//!
//! Per session it does what a server without prefabrication did: buffered `pread` of
//! every packet into a per-session buffer, rebuild of lost source symbols, the parity
//! encoded at send time, the header built and the payload copied per packet, and one
//! `sendto` per packet. Verification and decoding go through the store's codeword
//! [`Assembler`], like every other reader.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use isnode_fec::Code;
use isnode_pool::objects::ObjectInfo;
use isnode_store::codeword::{Assembler, Want};
use isnode_wire::DataPacketId;

use crate::codes::code_for;
use crate::deps::PlaneDeps;

/// Per-session state of the baseline engine.
pub(crate) struct Baseline {
    /// Segment files, buffered, opened on first use.
    files: Vec<Option<File>>,
    tried: Vec<bool>,
    pub(crate) asm: Assembler,
    /// The codeword in `asm` and whether all its n symbols are good.
    pub(crate) loaded: Option<(u32, bool)>,
    /// One packet: the per-packet copy.
    pub(crate) pkt: Vec<u8>,
}

impl Baseline {
    /// State for a session on `obj`.
    pub(crate) fn new(obj: &ObjectInfo) -> Baseline {
        let p = obj.layout.params();
        let n = (p.source_symbols + p.repair_symbols) as usize;
        Baseline {
            files: (0..p.members).map(|_| None).collect(),
            tried: vec![false; p.members as usize],
            asm: Assembler::new(p.symbol_len as usize, n),
            loaded: None,
            pkt: vec![0; p.packet_len() as usize],
        }
    }

    /// Reads the packets `member` holds of codeword `sbn` into the assembler.
    fn read_member(&mut self, obj: &ObjectInfo, sbn: u32, member: u32, deps: &PlaneDeps) {
        let m = member as usize;
        let path = &obj.seg_paths[m];
        if !self.tried[m] {
            self.tried[m] = true;
            match File::open(path) {
                Ok(f) => self.files[m] = Some(f),
                Err(err) => deps
                    .members
                    .count_error(member, &format!("{}: {err}", path.display())),
            }
        }
        let layout = &obj.layout;
        for esi in layout.member_run(sbn, member).esis {
            let at = layout.symbol_location(sbn, esi);
            let read = match &self.files[m] {
                Some(f) => f.read_exact_at(
                    &mut self.pkt,
                    layout.block_offset(at.block) + at.offset as u64,
                ),
                None => return,
            };
            if let Err(err) = &read {
                deps.members
                    .count_error(member, &format!("{}: {err}", path.display()));
            }
            let id = DataPacketId {
                tsi: obj.tsi,
                toi: obj.rec.toi,
                sbn,
                esi: esi as u8,
            };
            self.asm
                .offer(esi, read.is_ok().then_some(&self.pkt[..]), &id);
        }
    }

    /// Loads codeword `sbn`: source packets read, lost ones rebuilt from the repair
    /// member, parity encoded; true if all n symbols are ready.
    pub(crate) fn load(
        &mut self,
        obj: &ObjectInfo,
        sbn: u32,
        codes: &mut HashMap<u32, Code>,
        deps: &PlaneDeps,
    ) -> bool {
        let layout = &obj.layout;
        let members = layout.params().members;
        self.asm.begin(layout, sbn);
        for member in 0..members - 1 {
            self.read_member(obj, sbn, member, deps);
        }
        let k = layout.source_symbols(sbn);
        // Repair symbols are read only when a source symbol is lost.
        if self.asm.needs(k, Want::Source) {
            self.read_member(obj, sbn, members - 1, deps);
        }
        match self.asm.rebuild(Want::Source) {
            Ok(t) => {
                deps.counters
                    .symbols_rebuilt
                    .fetch_add(u64::from(t.rebuilt_source), Ordering::Relaxed);
            }
            Err(err) => {
                tracing::warn!(sbn, "codeword cannot be rebuilt: {err}");
                return false;
            }
        }
        let n = layout.encoding_symbols(sbn);
        let Some(code) = code_for(codes, k, n) else {
            return false;
        };
        // Parity at send time, as the seeds' baseline server computed it.
        let e = layout.params().symbol_len as usize;
        let (src, rep) = self.asm.symbols_mut().split_at_mut(k as usize * e);
        let sources: Vec<&[u8]> = src.chunks_exact(e).collect();
        let mut repairs: Vec<&mut [u8]> = rep.chunks_exact_mut(e).collect();
        if let Err(err) = code.encode(&sources, &mut repairs) {
            tracing::error!("encoding codeword {sbn}: {err}");
            return false;
        }
        true
    }
}
