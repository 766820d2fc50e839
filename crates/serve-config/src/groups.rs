//! Ranges of multicast groups (`broadcast_groups` in the configuration): `ADDRESS/PREFIX`
//! within 224.0.0.0/4 or ff00::/8.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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
