//! Multicast groups of broadcasts (sans-IO): the configured ranges, the choice of free
//! groups, and which group and port each logical channel uses.
//!
//! A socket joins at most 20 groups by default (`net.ipv4.igmp_max_memberships`), and a
//! harmonic plan has dozens of channels: so a broadcast uses at most `max_groups / 2`
//! source groups and as many repair groups, and logical channel c goes to source group
//! `c % S` and repair group `c % S`, on port `port + c`. A receiver that needs channel c
//! joins its group and binds its port: the kernel hands it that channel's packets only.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

/// A range of multicast groups, `ADDRESS/PREFIX` (IPv4 within 224.0.0.0/4, IPv6 within
/// ff00::/8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupRange {
    base: IpAddr,
    prefix: u8,
}

impl FromStr for GroupRange {
    type Err = String;

    fn from_str(s: &str) -> Result<GroupRange, String> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("group range {s:?}: expected ADDRESS/PREFIX"))?;
        let base: IpAddr = addr
            .parse()
            .map_err(|e| format!("group range {s:?}: {e}"))?;
        let prefix: u8 = prefix
            .parse()
            .map_err(|e| format!("group range {s:?}: prefix: {e}"))?;
        let bits = if base.is_ipv4() { 32 } else { 128 };
        if prefix > bits {
            return Err(format!("group range {s:?}: prefix longer than {bits} bits"));
        }
        let r = GroupRange { base, prefix };
        let last = r.nth(r.size().saturating_sub(1)).unwrap_or(base);
        if !base.is_multicast() || !last.is_multicast() {
            return Err(format!("group range {s:?} is not all multicast"));
        }
        Ok(GroupRange {
            base: r.nth(0).unwrap_or(base),
            prefix,
        })
    }
}

impl std::fmt::Display for GroupRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

impl serde::Serialize for GroupRange {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GroupRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<GroupRange, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl GroupRange {
    fn host_bits(&self) -> u32 {
        let bits = if self.base.is_ipv4() { 32 } else { 128 };
        bits - u32::from(self.prefix)
    }

    /// Number of groups (saturating at `u64::MAX`).
    pub fn size(&self) -> u64 {
        1u64.checked_shl(self.host_bits()).unwrap_or(u64::MAX)
    }

    /// The `i`-th group of the range.
    pub fn nth(&self, i: u64) -> Option<IpAddr> {
        if i >= self.size() {
            return None;
        }
        match self.base {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(self.host_bits()).unwrap_or(0);
                let v = (u32::from(a) & mask) | u32::try_from(i).ok()?;
                Some(IpAddr::V4(Ipv4Addr::from(v)))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(self.host_bits()).unwrap_or(0);
                Some(IpAddr::V6(Ipv6Addr::from(
                    (u128::from(a) & mask) | u128::from(i),
                )))
            }
        }
    }

    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, ip) {
            (IpAddr::V4(b), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(self.host_bits()).unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(b), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(self.host_bits()).unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }

    /// True for an IPv4 range.
    pub fn is_ipv4(&self) -> bool {
        self.base.is_ipv4()
    }
}

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
