//! The simulation's seeds, and planted bugs it must catch.
//!
//! `seeds` runs seeds 1..=200 (`ISNODE_SIM_SEEDS=N` for 1..=N, `ISNODE_SIM_SEED=S` for
//! seed S alone, `ISNODE_SIM_SESSIONS=N` sessions per seed, default 200,
//! `ISNODE_SIM_MUTATION=Name` with a planted bug).

use super::{broadcast, health};
use super::{replay_command, run, SimConfig, SimMutation, SimReport, Violation};

const DEFAULT_SEEDS: u64 = 200;
const DEFAULT_SESSIONS: usize = 200;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

fn sessions() -> usize {
    env_u64("ISNODE_SIM_SESSIONS").map_or(DEFAULT_SESSIONS, |n| n as usize)
}

fn run_seed(seed: u64, mutation: SimMutation) -> Result<SimReport, Violation> {
    run(SimConfig {
        seed,
        sessions: sessions(),
        mutation,
    })
}

/// `ISNODE_SIM_MUTATION`: a planted bug by name, to replay a mutation test's seed.
fn mutation() -> SimMutation {
    let all = [
        SimMutation::None,
        SimMutation::EvictPinned,
        SimMutation::NetworkOverBudget,
        SimMutation::SkipBlockCheck,
        SimMutation::SendEarly,
        SimMutation::StuckReader,
        SimMutation::DegradedSkips,
        SimMutation::TrustCrc,
        SimMutation::BurstAfterSeek,
        SimMutation::RepairIgnoresLoss,
        SimMutation::StaleFilesAfterRebuild,
        SimMutation::NoHedge,
        SimMutation::NeverProbe,
        SimMutation::ChannelLate,
        SimMutation::ResumeLosesPhase,
        SimMutation::RepairSkipsUnreadable,
        SimMutation::AutoMissesBoundary,
    ];
    let Ok(name) = std::env::var("ISNODE_SIM_MUTATION") else {
        return SimMutation::None;
    };
    all.into_iter()
        .find(|m| format!("{m:?}") == name)
        .unwrap_or_else(|| panic!("ISNODE_SIM_MUTATION={name:?}: one of {all:?}"))
}

#[test]
fn seeds() {
    let seeds: Vec<u64> = match env_u64("ISNODE_SIM_SEED") {
        Some(s) => vec![s],
        None => (1..=env_u64("ISNODE_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS)).collect(),
    };
    let mutation = mutation();
    let mut total = SimReport::default();
    for &seed in &seeds {
        let cfg = SimConfig {
            seed,
            sessions: sessions(),
            mutation,
        };
        // A panic in the code under test names its seed too.
        let outcome = std::panic::catch_unwind(|| run(cfg)).unwrap_or_else(|_| {
            panic!(
                "simulation seed {seed} panicked\n  replay: {}",
                replay_command(&cfg)
            )
        });
        match outcome {
            Ok(r) => add(&mut total, &r),
            Err(v) => panic!("{v}"),
        }
    }
    eprintln!(
        "simulation: {} seeds, {} sessions each: {total:?}",
        seeds.len(),
        sessions()
    );
    if seeds.len() > 1 {
        assert!(
            total.admitted > 0 && total.refused > 0,
            "admission both ways"
        );
        assert!(total.net_lost > 0 && total.net_corrupt > 0 && total.strays > 0);
        assert!(total.forgeries > 0, "CRC-valid forgeries sent");
        assert!(total.loss_reports > 0, "loss reports (adaptive repair)");
        assert!(
            total.burst_codewords > 0 && total.repaired_codewords > 0,
            "codewords completed by unicast repair"
        );
        assert!(
            total.repair_rebuilt > 0,
            "repair answers rebuilt through the code"
        );
        assert!(
            total.block_faults > 0 && total.rebuilt_bursts > 0,
            "disk faults hit"
        );
        assert!(total.lost_members > 0, "members lost");
        assert!(total.seeks > 0 && total.pauses > 0 && total.stops > 0);
        assert!(total.never_echoed > 0, "sessions that never echo");
    }
}

fn add(t: &mut SimReport, r: &SimReport) {
    t.admitted += r.admitted;
    t.refused += r.refused;
    t.refused_unvalidated += r.refused_unvalidated;
    t.never_echoed += r.never_echoed;
    t.packets_sent += r.packets_sent;
    t.bytes_played += r.bytes_played;
    t.blocks_read += r.blocks_read;
    t.block_faults += r.block_faults;
    t.net_lost += r.net_lost;
    t.net_corrupt += r.net_corrupt;
    t.duplicated += r.duplicated;
    t.strays += r.strays;
    t.forgeries += r.forgeries;
    t.loss_reports += r.loss_reports;
    t.burst_codewords += r.burst_codewords;
    t.repair_requests += r.repair_requests;
    t.repair_rebuilt += r.repair_rebuilt;
    t.repaired_codewords += r.repaired_codewords;
    t.pauses += r.pauses;
    t.seeks += r.seeks;
    t.stops += r.stops;
    t.rebuilt_bursts += r.rebuilt_bursts;
    t.planted_block_faults += r.planted_block_faults;
    t.lost_members += r.lost_members;
    t.end_ns = t.end_ns.max(r.end_ns);
}

/// The same seed gives the same run (what makes a printed seed a replay).
#[test]
fn a_seed_replays_exactly() {
    let a = format!("{:?}", run_seed(7, SimMutation::None).expect("seed 7"));
    let b = format!("{:?}", run_seed(7, SimMutation::None).expect("seed 7"));
    assert_eq!(a, b);
}

/// Runs seeds with `mutation` until one fails; returns its violation.
fn first_caught(mutation: SimMutation) -> Violation {
    first_caught_in(mutation, |seed| run_seed(seed, mutation).map(|_| ()))
}

/// Runs seeds 1..=20 of a world (`run`) with `mutation` until one fails; returns its
/// violation, after checking that its replay breaks the same invariant at the same moment.
fn first_caught_in(mutation: SimMutation, run: impl Fn(u64) -> Result<(), Violation>) -> Violation {
    for seed in 1..=20 {
        if let Err(v) = run(seed) {
            eprintln!("{mutation:?} caught: {v}");
            let replay = format!("ISNODE_SIM_MUTATION={mutation:?} ISNODE_SIM_SEED={seed} ");
            assert!(v.to_string().contains(&replay), "{v}");
            // The replay breaks the same invariant at the same moment.
            let again = run(seed).expect_err("the replay passed");
            assert_eq!((again.now_ns, &again.what), (v.now_ns, &v.what));
            return v;
        }
    }
    panic!("{mutation:?} went unnoticed over 20 seeds");
}

#[test]
fn eviction_ignoring_pins_is_caught() {
    let v = first_caught(SimMutation::EvictPinned);
    assert!(v.what.contains("pinned block was overwritten"), "{v}");
}

#[test]
fn a_network_beyond_the_code_is_caught() {
    let v = first_caught(SimMutation::NetworkOverBudget);
    assert!(
        v.what.contains("lost codeword") || v.what.contains("client output ends"),
        "{v}"
    );
}

#[test]
fn a_cache_that_skips_the_block_check_is_caught() {
    let v = first_caught(SimMutation::SkipBlockCheck);
    assert!(v.what.contains("not the stored packet"), "{v}");
}

#[test]
fn a_send_engine_ahead_of_its_pacer_is_caught() {
    let v = first_caught(SimMutation::SendEarly);
    assert!(v.what.contains("above its rate"), "{v}");
}

#[test]
fn a_stalled_reader_misses_the_playout_deadline() {
    let v = first_caught(SimMutation::StuckReader);
    assert!(v.what.contains("playout deadline missed"), "{v}");
}

#[test]
fn a_degraded_path_that_skips_is_caught() {
    let v = first_caught(SimMutation::DegradedSkips);
    assert!(
        v.what.contains("lost codeword") || v.what.contains("client output ends"),
        "{v}"
    );
}

#[test]
fn a_client_that_trusts_the_crc_takes_a_forgery() {
    let v = first_caught(SimMutation::TrustCrc);
    assert!(v.what.contains("differs from the object"), "{v}");
}

#[test]
fn a_second_start_up_burst_at_a_seek_is_caught() {
    let v = first_caught(SimMutation::BurstAfterSeek);
    assert!(v.what.contains("above its rate"), "{v}");
}

#[test]
fn adaptive_repair_that_ignores_the_reported_loss_is_caught() {
    let v = first_caught(SimMutation::RepairIgnoresLoss);
    assert!(
        v.what.contains("lost codeword") || v.what.contains("client output ends"),
        "{v}"
    );
}

/// Seeds of another world: `ISNODE_SIM_SEED=S` alone, else 1..=`ISNODE_SIM_SEEDS` (default
/// `default`).
fn world_seeds(default: u64) -> Vec<u64> {
    match env_u64("ISNODE_SIM_SEED") {
        Some(s) => vec![s],
        None => (1..=env_u64("ISNODE_SIM_SEEDS").unwrap_or(default)).collect(),
    }
}

/// Runs `run` on every seed of [`world_seeds`], failing on the first violation (or panic).
fn all_seeds<R>(default: u64, run: impl Fn(u64, SimMutation) -> Result<R, Violation>) -> Vec<R> {
    let m = mutation();
    world_seeds(default)
        .into_iter()
        .map(|seed| {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed, m)))
                .unwrap_or_else(|_| panic!("simulation seed {seed} panicked ({m:?})"));
            outcome.unwrap_or_else(|v| panic!("{v}"))
        })
        .collect()
}

/// The broadcast world: seeds 1..=40.
#[test]
fn broadcast_seeds() {
    let runs = all_seeds(40, broadcast::run);
    let schemes: std::collections::BTreeSet<_> = runs.iter().map(|r| r.scheme.clone()).collect();
    let sum = |f: fn(&broadcast::BroadcastReport) -> u64| runs.iter().map(f).sum::<u64>();
    eprintln!(
        "broadcast: {} seeds, schemes {schemes:?}, {} channels: {} receivers ({} lossy, {} of them \
         with repair groups on loss, {} joined them), {} packets sent, \
         {} delivered, {} lost, {} bytes played, latest codeword {} µs after its playing time; \
         restarts cut {} codewords, {} repair requests, {} codewords repaired",
        runs.len(),
        runs.iter().map(|r| r.channels).sum::<usize>(),
        sum(|r| r.receivers),
        sum(|r| r.lossy_receivers),
        sum(|r| r.auto_receivers),
        sum(|r| r.auto_repair_joins),
        sum(|r| r.packets_sent),
        sum(|r| r.packets_delivered),
        sum(|r| r.packets_lost),
        sum(|r| r.bytes_played),
        runs.iter()
            .map(|r| r.codewords_decoded_late_max_ns)
            .max()
            .unwrap_or(0)
            / 1_000,
        sum(|r| r.cut_codewords),
        sum(|r| r.repair_requests),
        sum(|r| r.repaired_codewords),
    );
    if runs.len() > 1 {
        assert!(schemes.len() >= 5, "schemes drawn: {schemes:?}");
        assert!(sum(|r| r.packets_lost) > 0 && sum(|r| r.lossy_receivers) > 0);
        assert!(
            sum(|r| r.auto_repair_joins) > 0,
            "no receiver joined repair on loss"
        );
        assert!(sum(|r| r.repaired_codewords) > 0, "cut codewords repaired");
        assert!(
            sum(|r| r.receivers) == runs.len() as u64 * 10,
            "every receiver tuned in"
        );
    }
}

/// The health world: seeds 1..=40.
#[test]
fn health_seeds() {
    let runs = all_seeds(40, health::run);
    let sum = |f: fn(&health::HealthReport) -> u64| runs.iter().map(f).sum::<u64>();
    eprintln!(
        "health: {} seeds: {} packets sent, {} reads ({} failed), {} bursts rebuilt ({} \
         hedged; {} hedges waited), {} members failed, {} probes, revived {} by probe and {} after a rebuild; \
         episodes: {} slow, {} flaky, {} dead",
        runs.len(),
        sum(|r| r.packets_sent),
        sum(|r| r.reads),
        sum(|r| r.read_errors),
        sum(|r| r.rebuilt_bursts),
        sum(|r| r.hedged_bursts),
        sum(|r| r.hedges_waiting),
        sum(|r| r.members_failed),
        sum(|r| r.probes),
        sum(|r| r.revived_by_probe),
        sum(|r| r.revived_by_rebuild),
        sum(|r| r.slow_episodes),
        sum(|r| r.flaky_episodes),
        sum(|r| r.dead_episodes),
    );
    if runs.len() > 1 {
        assert!(sum(|r| r.hedged_bursts) > 0, "hedged bursts");
        assert!(sum(|r| r.revived_by_probe) > 0, "members probed back");
        assert!(
            sum(|r| r.revived_by_rebuild) > 0,
            "members rebuilt and read again"
        );
    }
}

#[test]
fn a_broadcast_seed_replays_exactly() {
    let a = format!(
        "{:?}",
        broadcast::run(3, SimMutation::None).expect("seed 3")
    );
    let b = format!(
        "{:?}",
        broadcast::run(3, SimMutation::None).expect("seed 3")
    );
    assert_eq!(a, b);
}

#[test]
fn a_health_seed_replays_exactly() {
    let a = format!("{:?}", health::run(3, SimMutation::None).expect("seed 3"));
    let b = format!("{:?}", health::run(3, SimMutation::None).expect("seed 3"));
    assert_eq!(a, b);
}

#[test]
fn broadcast_channels_late_of_their_epoch_are_caught() {
    let m = SimMutation::ChannelLate;
    let v = first_caught_in(m, |seed| broadcast::run(seed, m).map(|_| ()));
    assert!(
        v.what
            .contains("not complete by the end of its playing time"),
        "{v}"
    );
}

#[test]
fn a_rebuilt_member_read_through_its_old_files_is_caught() {
    let m = SimMutation::StaleFilesAfterRebuild;
    let v = first_caught_in(m, |seed| health::run(seed, m).map(|_| ()));
    assert!(v.what.contains("still failed"), "{v}");
}

#[test]
fn a_data_plane_that_never_hedges_is_caught() {
    let m = SimMutation::NoHedge;
    let v = first_caught_in(m, |seed| health::run(seed, m).map(|_| ()));
    assert!(v.what.contains("behind its pacer"), "{v}");
}

#[test]
fn a_failed_member_never_probed_is_caught() {
    let m = SimMutation::NeverProbe;
    let v = first_caught_in(m, |seed| health::run(seed, m).map(|_| ()));
    assert!(v.what.contains("still failed"), "{v}");
}

#[test]
fn a_repair_answer_without_the_unreadable_packets_is_caught() {
    let v = first_caught(SimMutation::RepairSkipsUnreadable);
    assert!(v.what.contains("lost codeword"), "{v}");
}

#[test]
fn broadcast_channels_restored_without_their_phase_are_caught() {
    let m = SimMutation::ResumeLosesPhase;
    let v = first_caught_in(m, |seed| broadcast::run(seed, m).map(|_| ()));
    assert!(
        v.what
            .contains("not complete by the end of its playing time")
            || v.what.contains("more than its timetable"),
        "{v}"
    );
}

#[test]
fn broadcast_auto_repair_blind_to_codeword_boundaries_is_caught() {
    let m = SimMutation::AutoMissesBoundary;
    let v = first_caught_in(m, |seed| broadcast::run(seed, m).map(|_| ()));
    assert!(v.what.contains("did not join the repair groups"), "{v}");
}
