//! The disk reads a set of sessions needs, under interval caching (Dan and Sitaram's
//! scheme, the seed papers' answer to a library larger than memory): every title's foremost
//! viewer reads from disk; a viewer behind another viewer of its title reads from the pool
//! if the pool keeps for it the *interval* between them (the blocks the viewer ahead has
//! read and it has not yet). The pool's room beyond the sessions' working sets keeps the
//! shortest intervals first, as many as fit; a viewer whose interval is not kept reads from
//! disk. Pure: the caller gives the sessions and the room.

use std::collections::HashMap;

use isnode_layout::Layout;

use super::Demand;

/// Bits per second the disks must deliver for `sessions` when `spare_slots` pool slots are
/// left for intervals beyond the working sets. Each reading session counts at its send
/// rate (what it reads is what it sends: whole codewords, repair included).
pub fn disk_rate_bps<'a>(
    sessions: impl Iterator<Item = &'a Demand<'a>>,
    spare_slots: usize,
) -> u64 {
    let mut titles: HashMap<u32, Vec<&Demand<'_>>> = HashMap::new();
    for s in sessions {
        titles.entry(s.toi).or_default().push(s);
    }
    let mut rate = 0u64;
    // (interval in blocks, the rate of the viewer behind it)
    let mut intervals: Vec<(u64, u64)> = Vec::new();
    for viewers in titles.values_mut() {
        viewers.sort_by_key(|v| std::cmp::Reverse(v.codeword));
        if let Some(first) = viewers.first() {
            rate = rate.saturating_add(first.send_rate_bps);
        }
        for pair in viewers.windows(2) {
            if let [ahead, behind] = pair {
                let blocks = interval_blocks(behind.layout, behind.codeword, ahead.codeword);
                intervals.push((blocks, behind.send_rate_bps));
            }
        }
    }
    intervals.sort_unstable();
    let mut left = spare_slots as u64;
    for (blocks, viewer_bps) in intervals {
        if blocks <= left {
            left -= blocks;
        } else {
            rate = rate.saturating_add(viewer_bps);
        }
    }
    rate
}

/// Blocks (of every member) between a viewer at codeword `behind` and one at `ahead` of
/// the same title: those the one ahead has read and the one behind has still to read.
pub fn interval_blocks(layout: &Layout, behind: u32, ahead: u32) -> u64 {
    let last = layout.codewords().saturating_sub(1);
    let (behind, ahead) = (behind.min(last), ahead.min(last));
    if ahead <= behind {
        return 0;
    }
    (0..layout.params().members)
        .map(|m| {
            layout
                .run_block(ahead, m)
                .saturating_sub(layout.run_block(behind, m))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::IpAddr;

    fn layout(codewords: u64) -> Layout {
        let p = isnode_layout::VolumeParams::SMALL;
        Layout::new(p, codewords * 20 * 1024).unwrap()
    }

    fn viewer(l: &Layout, toi: u32, codeword: u32) -> Demand<'_> {
        Demand {
            peer_ip: IpAddr::from([10, 0, 0, 1]),
            send_rate_bps: 1_000,
            toi,
            layout: l,
            codeword,
        }
    }

    #[test]
    fn foremost_viewers_read_and_close_followers_share() {
        let l = layout(400);
        let far = interval_blocks(&l, 0, 300);
        assert!(far > 8, "{far}");
        // Two titles, one viewer each: both read.
        let two = [viewer(&l, 1, 10), viewer(&l, 2, 10)];
        assert_eq!(disk_rate_bps(two.iter(), 0), 2_000);
        // Three viewers of one title at one position: one reads.
        let together = [viewer(&l, 1, 5), viewer(&l, 1, 5), viewer(&l, 1, 5)];
        assert_eq!(disk_rate_bps(together.iter(), 0), 1_000);
        // A follower far behind reads unless the pool has room for the interval.
        let apart = [viewer(&l, 1, 300), viewer(&l, 1, 0)];
        assert_eq!(disk_rate_bps(apart.iter(), 0), 2_000);
        assert_eq!(disk_rate_bps(apart.iter(), far as usize - 1), 2_000);
        assert_eq!(disk_rate_bps(apart.iter(), far as usize), 1_000);
    }

    #[test]
    fn the_shortest_intervals_are_kept_first() {
        let l = layout(400);
        // Title 1: a follower 100 codewords behind; title 2: one 10 behind.
        let s = [
            viewer(&l, 1, 200),
            viewer(&l, 1, 100),
            viewer(&l, 2, 50),
            viewer(&l, 2, 40),
        ];
        let short = interval_blocks(&l, 40, 50);
        let long = interval_blocks(&l, 100, 200);
        assert!(short < long);
        // Room for the short one only: title 2's follower shares, title 1's reads.
        assert_eq!(disk_rate_bps(s.iter(), short as usize), 3_000);
        assert_eq!(disk_rate_bps(s.iter(), (short + long) as usize), 2_000);
    }

    proptest! {
        #[test]
        fn between_one_reader_per_title_and_every_viewer(
            at in proptest::collection::vec((0u32..3, 0u32..400), 1..40),
            spare in 0usize..200,
        ) {
            let l = layout(400);
            let s: Vec<Demand> = at.iter().map(|(t, c)| viewer(&l, *t, *c)).collect();
            let r = disk_rate_bps(s.iter(), spare);
            let titles = at.iter().map(|(t, _)| t).collect::<std::collections::HashSet<_>>().len();
            prop_assert!(r >= titles as u64 * 1_000);
            prop_assert!(r <= s.len() as u64 * 1_000);
            // More room never needs more reads.
            prop_assert!(disk_rate_bps(s.iter(), spare + 50) <= r);
            // One more viewer never needs fewer.
            let more: Vec<Demand> = s.iter().cloned().chain([viewer(&l, 0, 123)]).collect();
            prop_assert!(disk_rate_bps(more.iter(), spare) >= r);
        }
    }
}
