//! Admission by memory: whether one more HTTP content reader fits under the memory
//! cgroup's limit, and how much of it the HTTP mirror may take meanwhile. Each reader holds
//! memory the kernel cannot reclaim (its connection's buffers, a chunk being sent, its
//! socket's queues); so do the pool and the mirror (shared memory, no swap). Past the limit
//! the kernel's OOM killer ends the whole server and every viewer with it.
//!
//! The readers come first: at each reading of the group, the mirror's budget is what the
//! limit leaves beside what the group holds outside the mirror, the headroom, and room for
//! [`BURST_READERS`] more readers ([`mirror_budget_bytes`]); so the mirror shrinks as
//! readers come (a reader past the mirror copies instead) and grows back as they go. A
//! reader is admitted while the pool, the server, the headroom and a floor per reader fit
//! under the limit, and while what is held outside the mirror, the mirror's budget, a
//! share for each reader admitted since the reading and the headroom do ([`admit_reader`]).
//! Pure: the caller reads the group, counts the readers, and sets the mirror's budget.

/// What a reader admitted since the last reading is taken to add until the next: its
/// connection's buffer and chunk (measured: about 185 KiB a reader on the copy path, at
/// 250 readers) and some of its socket's queues.
pub const READER_BYTES: u64 = 256 << 10;

/// The least a reader holds (its connection's 64 KiB buffer and a 64 KiB chunk): the
/// most readers a limit can hold beside the pool, the server and the headroom.
pub const READER_FLOOR_BYTES: u64 = 128 << 10;

/// Readers the mirror leaves room for beyond what is held at a reading (admitted before
/// the next reading gives the mirror's room to them).
pub const BURST_READERS: u64 = 16;

/// The least memory kept free under the limit for what the admitted readers and the
/// server do next (buffers that grow, fills, a scrub).
pub const MIN_HEADROOM_BYTES: u64 = 16 << 20;

/// What the server holds beside its readers and mirror, measured: 17-20 MB of RSS beyond
/// the pool (`bench load`, 8 to 256 UDP streams).
pub const SERVER_OWN_BYTES: u64 = 24 << 20;

/// A reading of the memory cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The group's limit, bytes.
    pub limit_bytes: u64,
    /// What it holds that the kernel cannot reclaim, bytes.
    pub held_bytes: u64,
    /// Of that, the HTTP mirror's (which gives way to readers), bytes.
    pub mirror_bytes: u64,
}

impl Reading {
    /// What is held outside the mirror.
    fn outside_mirror_bytes(&self) -> u64 {
        self.held_bytes.saturating_sub(self.mirror_bytes)
    }
}

/// Whether a new content reader is admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It fits.
    Admit,
    /// It does not.
    Refuse {
        /// The limit, bytes.
        limit_bytes: u64,
        /// Why.
        why: Short,
    },
}

/// Why memory is short for a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Short {
    /// The limit holds at most `most` readers' floors beside the pool, the server and the
    /// headroom.
    Shares {
        /// Readers the limit holds.
        most: u64,
    },
    /// What is held outside the mirror (an estimate now, bytes) leaves no room.
    Held {
        /// The estimate.
        held_bytes: u64,
    },
}

/// The memory kept free under `limit_bytes`: an eighth of it, at least
/// [`MIN_HEADROOM_BYTES`].
pub fn headroom_bytes(limit_bytes: u64) -> u64 {
    (limit_bytes / 8).max(MIN_HEADROOM_BYTES)
}

/// The HTTP mirror's budget at `reading`: the configured budget, or what the limit leaves
/// beside what is held outside the mirror, the headroom and [`BURST_READERS`] readers'
/// shares if that is less.
pub fn mirror_budget_bytes(reading: Reading, configured_bytes: u64) -> u64 {
    let beside = reading
        .outside_mirror_bytes()
        .saturating_add(headroom_bytes(reading.limit_bytes))
        .saturating_add(BURST_READERS * READER_BYTES);
    configured_bytes.min(reading.limit_bytes.saturating_sub(beside))
}

/// The most readers `limit_bytes` holds at their floor ([`READER_FLOOR_BYTES`]) beside a
/// pool of `pool_bytes`, the server and the headroom.
pub fn readers_held(limit_bytes: u64, pool_bytes: u64) -> u64 {
    let beside = pool_bytes
        .saturating_add(SERVER_OWN_BYTES)
        .saturating_add(headroom_bytes(limit_bytes));
    limit_bytes.saturating_sub(beside) / READER_FLOOR_BYTES
}

/// Admits reader number `readers` (counting it: at least 1) when the pool, the server, the
/// headroom and a floor for each reader fit under the limit ([`readers_held`]), and what
/// `reading` held outside the mirror,
/// the mirror's budget `mirror_budget_bytes`, a share for each of the `admitted_since`
/// readers admitted after the reading and for this one, and the headroom fit too.
pub fn admit_reader(
    reading: Reading,
    mirror_budget_bytes: u64,
    admitted_since: u64,
    (pool_bytes, readers): (u64, u64),
) -> Verdict {
    let limit_bytes = reading.limit_bytes;
    let most = readers_held(limit_bytes, pool_bytes);
    if readers > most {
        return Verdict::Refuse {
            limit_bytes,
            why: Short::Shares { most },
        };
    }
    let held_bytes = reading
        .outside_mirror_bytes()
        .saturating_add(admitted_since.saturating_mul(READER_BYTES));
    let needs = held_bytes
        .saturating_add(mirror_budget_bytes)
        .saturating_add(READER_BYTES)
        .saturating_add(headroom_bytes(limit_bytes));
    match needs <= limit_bytes {
        true => Verdict::Admit,
        false => Verdict::Refuse {
            limit_bytes,
            why: Short::Held { held_bytes },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn at(held_bytes: u64, mirror_bytes: u64) -> Reading {
        Reading {
            limit_bytes: 128 * MIB,
            held_bytes,
            mirror_bytes,
        }
    }

    #[test]
    fn the_mirror_gives_its_room_to_what_is_held_outside_it() {
        // 128 - 16 of headroom - 4 for a burst of readers: 108 MiB less what is outside.
        assert_eq!(
            mirror_budget_bytes(at(40 * MIB, 10 * MIB), 256 * MIB),
            78 * MIB
        );
        assert_eq!(
            mirror_budget_bytes(at(40 * MIB, 10 * MIB), 32 * MIB),
            32 * MIB
        );
        assert_eq!(mirror_budget_bytes(at(120 * MIB, 0), 256 * MIB), 0);
        // A large limit keeps an eighth free.
        assert_eq!(headroom_bytes(4096 * MIB), 512 * MIB);
    }

    #[test]
    fn a_reader_is_refused_when_its_share_leaves_no_headroom() {
        let pool = (8 * MIB, 1);
        let reading = at(40 * MIB, 10 * MIB);
        let budget = mirror_budget_bytes(reading, 256 * MIB);
        // Room for the burst's 16 readers, then none until the next reading.
        assert_eq!(admit_reader(reading, budget, 15, pool), Verdict::Admit);
        assert_eq!(
            admit_reader(reading, budget, 16, pool),
            Verdict::Refuse {
                limit_bytes: 128 * MIB,
                why: Short::Held {
                    held_bytes: 34 * MIB
                }
            }
        );
        // A mirror held to less than the room leaves the rest to readers.
        assert_eq!(admit_reader(reading, 0, 300, pool), Verdict::Admit);
    }

    #[test]
    fn the_limit_holds_a_floor_per_reader_beside_the_pool_the_server_and_headroom() {
        // 128 - 22 - 24 - 16 = 66 MiB: 528 readers of 128 KiB.
        let pool = 22 * MIB;
        let empty = at(0, 0);
        assert_eq!(admit_reader(empty, 0, 0, (pool, 528)), Verdict::Admit);
        assert_eq!(
            admit_reader(empty, 0, 0, (pool, 529)),
            Verdict::Refuse {
                limit_bytes: 128 * MIB,
                why: Short::Shares { most: 528 }
            }
        );
    }

    proptest! {
        /// What admitted readers may add never reaches into the headroom beside the
        /// mirror's budget, and the mirror's budget leaves the headroom free beside what
        /// is held outside it.
        #[test]
        fn admitted_readers_and_the_mirror_leave_the_headroom(
            limit in 0u64..(1 << 40),
            held in 0u64..(1 << 40),
            mirror in 0u64..(1 << 40),
            configured in 0u64..(1 << 40),
            since in 0u64..10_000,
            pool in 0u64..(1 << 36),
            readers in 1u64..100_000,
        ) {
            let reading = Reading { limit_bytes: limit, held_bytes: held, mirror_bytes: mirror };
            let headroom = headroom_bytes(limit);
            let outside = held.saturating_sub(mirror);
            let budget = mirror_budget_bytes(reading, configured);
            prop_assert!(budget <= configured);
            prop_assert!(budget == 0 || outside + budget + headroom <= limit);
            if admit_reader(reading, budget, since, (pool, readers)) == Verdict::Admit {
                prop_assert!(outside + budget + (since + 1) * READER_BYTES + headroom <= limit);
                let floors = readers * READER_FLOOR_BYTES;
                prop_assert!(pool + SERVER_OWN_BYTES + headroom + floors <= limit);
                if since > 0 {
                    let fewer = admit_reader(reading, budget, since - 1, (pool, readers));
                    prop_assert_eq!(fewer, Verdict::Admit);
                }
            }
        }
    }
}
