//! Multicast groups of broadcasts (sans-IO): the configured ranges, the choice of free
//! groups, and which group and port each logical channel uses.
//!
//! A socket joins at most 20 groups by default (`net.ipv4.igmp_max_memberships`), and a
//! harmonic plan has dozens of channels: so a broadcast uses at most `max_groups / 2`
//! source groups and as many repair groups, and logical channel c goes to source group
//! `c % S` and repair group `c % S`, on port `port + c`. A receiver that needs channel c
//! joins its group and binds its port: the kernel hands it that channel's packets only.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

pub use isnode_serve_config::groups::GroupRange;

/// `count` groups of `range` not in `in_use`, lowest first (skipping the range's first
/// address, often reserved); `None` if the range has too few free ones. Bounded: looks at
/// most at `count + in_use.len() + 1` addresses.
pub fn allocate(range: &GroupRange, in_use: &HashSet<IpAddr>, count: usize) -> Option<Vec<IpAddr>> {
    let mut out = Vec::with_capacity(count);
    let limit = (count + in_use.len() + 1) as u64;
    for i in 1..=limit {
        if out.len() == count {
            break;
        }
        let ip = range.nth(i)?;
        if !in_use.contains(&ip) {
            out.push(ip);
        }
    }
    (out.len() == count).then_some(out)
}

/// Where one logical channel's packets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelGroups {
    /// Source packets (and the FDT).
    pub source: SocketAddr,
    /// Repair packets.
    pub repair: SocketAddr,
}

/// The groups and ports of `channels` logical channels over `source` and `repair` groups
/// (equally many, at least one), from `port` up; `None` if the ports run out.
pub fn assign(
    channels: usize,
    source: &[IpAddr],
    repair: &[IpAddr],
    port: u16,
) -> Option<Vec<ChannelGroups>> {
    if source.is_empty() || source.len() != repair.len() {
        return None;
    }
    (0..channels)
        .map(|c| {
            let p = port.checked_add(u16::try_from(c).ok()?)?;
            let g = c % source.len();
            Some(ChannelGroups {
                source: SocketAddr::new(source[g], p),
                repair: SocketAddr::new(repair[g], p),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_refuse_unicast() {
        let r: GroupRange = "239.255.0.0/16".parse().unwrap();
        assert_eq!(r.size(), 65536);
        assert_eq!(r.nth(1), Some("239.255.0.1".parse().unwrap()));
        assert!(r.contains("239.255.7.9".parse().unwrap()));
        assert!(!r.contains("239.254.0.1".parse().unwrap()));
        assert!(!r.contains("ff15::1".parse().unwrap()));
        assert!("10.0.0.0/8".parse::<GroupRange>().is_err());
        assert!("224.0.0.0/3".parse::<GroupRange>().is_err());
        assert!("239.1.2.3".parse::<GroupRange>().is_err());
        let v6: GroupRange = "ff15::/112".parse().unwrap();
        assert_eq!(v6.nth(2), Some("ff15::2".parse().unwrap()));
        assert!(!v6.is_ipv4());
    }

    #[test]
    fn allocation_skips_what_is_used_and_channels_share_groups() {
        let r: GroupRange = "239.1.0.0/30".parse().unwrap();
        let used: HashSet<IpAddr> = ["239.1.0.2".parse().unwrap()].into();
        let got = allocate(&r, &used, 2).unwrap();
        assert_eq!(
            got,
            vec![
                "239.1.0.1".parse::<IpAddr>().unwrap(),
                "239.1.0.3".parse().unwrap()
            ]
        );
        assert!(allocate(&r, &used, 3).is_none());
        let (s, rp) = (&got[..1], &got[1..]);
        let a = assign(3, s, rp, 5000).unwrap();
        assert_eq!(a[2].source, "239.1.0.1:5002".parse().unwrap());
        assert_eq!(a[2].repair, "239.1.0.3:5002".parse().unwrap());
        assert!(assign(2, s, rp, u16::MAX).is_none());
        assert!(assign(2, &got, rp, 1).is_none());
    }
}
