//! CRC-32/MPEG-2 as used by MPEG-TS PSI sections.

const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u32) << 24;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 0x8000_0000 != 0 {
                (c << 1) ^ 0x04C1_1DB7
            } else {
                c << 1
            };
            bit += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static TABLE: [u32; 256] = make_table();

/// CRC-32/MPEG-2 (polynomial 0x04C11DB7, initial value 0xFFFFFFFF, no reflection, no final XOR).
///
/// Running it over a whole PSI section including its trailing CRC_32 field yields 0 when the
/// section is intact.
pub fn crc32_mpeg2(data: &[u8]) -> u32 {
    data.iter().fold(0xFFFF_FFFF_u32, |crc, &b| {
        (crc << 8) ^ TABLE[usize::from((crc >> 24) as u8 ^ b)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_value() {
        // The catalogue check value of CRC-32/MPEG-2.
        assert_eq!(crc32_mpeg2(b"123456789"), 0x0376_E6E7);
    }

    #[test]
    fn residue_of_intact_message_is_zero() {
        let mut msg = b"isnode section".to_vec();
        let crc = crc32_mpeg2(&msg);
        msg.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(crc32_mpeg2(&msg), 0);
    }
}
