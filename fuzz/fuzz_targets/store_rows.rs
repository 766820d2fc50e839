//! Fuzz the decoding of catalog rows read back from a volume: object rows, block rows and
//! time index rows, each column any SQLite value (a damaged or hand-edited catalog). They
//! must never panic; an object row found valid lays out, its block rows validated give
//! exactly one record per block of every member, and a valid time index is strictly
//! increasing inside the object.
#![no_main]

use isnode_store::rows::{
    validate_all_blocks, validate_media_index, validate_object, RawMediaIndex, RawObjectRow,
};
use isnode_store::{Layout, VolumeParams};
use libfuzzer_sys::fuzz_target;
use rusqlite::types::Value;

const PARAMS: VolumeParams = VolumeParams {
    symbol_len: 1024,
    source_symbols: 20,
    repair_symbols: 4,
    members: 6,
    block_len: 8192,
};

/// Takes SQLite values off the front of the input: a tag byte, then the value.
struct Values<'a>(&'a [u8]);

impl Values<'_> {
    fn bytes(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }

    fn int(&mut self) -> i64 {
        let mut b = [0u8; 8];
        let got = self.bytes(8);
        b[..got.len()].copy_from_slice(got);
        i64::from_le_bytes(b)
    }

    fn value(&mut self) -> Value {
        let tag = self.bytes(1).first().copied().unwrap_or(0);
        match tag % 8 {
            0 => Value::Null,
            1 => Value::Integer(self.int()),
            2 => Value::Integer(i64::from(tag >> 3)),
            3 => Value::Real(f64::from_bits(self.int() as u64)),
            4 => {
                let n = usize::from(tag >> 3);
                Value::Text(String::from_utf8_lossy(self.bytes(n)).into_owned())
            }
            5 => Value::Text(
                ["complete", "writing", "mpeg-ts", "mp4", "video/mp2t"][usize::from(tag >> 3) % 5]
                    .into(),
            ),
            6 => Value::Blob(self.bytes(usize::from(tag >> 3)).to_vec()),
            _ => Value::Integer(i64::from(tag >> 3) * 1000),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut v = Values(data);
    let row = RawObjectRow {
        toi: v.int(),
        columns: (0..13).map(|_| v.value()).collect(),
    };
    let entry = validate_object(&row, &PARAMS);
    let media = RawMediaIndex {
        container: v.value(),
        moov_at_front: v.value(),
        points: (0..(v.bytes(1).first().copied().unwrap_or(0) % 16))
            .map(|_| [v.value(), v.value(), v.value()])
            .collect(),
    };
    let size = entry.record().size_bytes;
    if let Ok(index) = validate_media_index(&media, size) {
        let _ = format!("{index:?}");
    }
    let Some(rec) = entry.valid() else {
        return;
    };
    let layout = Layout::new(PARAMS, rec.size_bytes).expect("a valid record lays out");
    let rows: Vec<[Value; 4]> = (0..(v.bytes(1).first().copied().unwrap_or(0) % 64))
        .map(|_| [v.value(), v.value(), v.value(), v.value()])
        .collect();
    if let Ok(members) = validate_all_blocks(&layout, &rows) {
        assert_eq!(members.len(), PARAMS.members as usize);
        for (m, blocks) in members.iter().enumerate() {
            assert_eq!(blocks.len() as u64, layout.member_blocks(m as u32));
        }
    }
});
