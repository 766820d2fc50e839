//! The watch of failed members ([`Members::record_failures`]) against a real catalog: a member
//! whose catalog state goes failed → rebuilding → ok between two of the watch's looks (a
//! whole-member rebuild under its one-second period) is read again, as one rebuilt slowly is.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use isnode_pool::members::Members;
use isnode_serve_config::{ConfigCell, ServeConfig};
use isnode_store::VolumeParams;
use isnode_store::{MemberState, Volume};
use isnode_sys::clock::Clock;
use isnode_sys::stop::Stop;

/// Polls `what` every 5 ms until it holds or `within` passes; whether it held.
fn until(within: Duration, mut what: impl FnMut() -> bool) -> bool {
    let by = Instant::now() + within;
    while Instant::now() < by {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn state(root: &std::path::Path, member: u32) -> MemberState {
    let vol = Volume::open(root).expect("the volume opens");
    let states = vol.member_states().expect("the member states");
    states[member as usize].clone()
}

/// Member 0 fails first (the watch looks at the catalog then); member 1 fails within the
/// watch's period and is rebuilt at once (failed → rebuilding → ok before its next look):
/// the watch still reads member 1 again.
#[test]
fn a_rebuild_between_two_looks_is_seen() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let root = dir.path().join("vol");
    Volume::create(&root, VolumeParams::default(), None).expect("the volume is made");
    let members = Members::new(8, ConfigCell::new(ServeConfig::default()), Clock::start())
        .expect("the members");
    let stop = Stop::new().expect("a stop signal");
    let revived = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        scope.spawn(|| members.record_failures(&root, &stop, &|m| revived.lock().unwrap().push(m)));
        let fail = |m: u32| {
            assert!(members.health.read_failed(m, 1, 1), "member {m} fails");
            members.failed(m, "a test's read error");
            let recorded = until(Duration::from_secs(10), || {
                matches!(state(&root, m), MemberState::Failed { .. })
            });
            assert!(recorded, "member {m} recorded failed in the catalog");
        };
        fail(0);
        fail(1);
        let mut vol = Volume::open(&root).expect("the volume opens");
        let rebuilding = MemberState::Rebuilding {
            done_toi: 0,
            done_bytes: 0,
        };
        vol.set_member_state(1, &rebuilding).expect("rebuilding");
        vol.set_member_state(1, &MemberState::Ok).expect("rebuilt");
        let seen = until(Duration::from_secs(10), || {
            revived.lock().unwrap().contains(&1)
        });
        stop.stop();
        assert!(seen, "member 1, rebuilt between two looks, is read again");
        assert!(!members.health.is_failed(1));
        assert!(members.health.is_failed(0), "member 0 stays failed");
    });
}
