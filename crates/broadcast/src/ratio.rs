//! Exact non-negative rationals for virtual time: every instant of a plan is an exact
//! multiple of the title's codeword airtime, so "on time" is decided without rounding.

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, Div, Mul, Sub};

use serde::{Serialize, Serializer};

/// An exact rational number `num / den` (`den > 0`, in lowest terms).
///
/// Plan times are in units of τ, the airtime of one codeword at the title's bitrate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ratio {
    num: i128,
    den: i128,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a.max(1)
}

impl Ratio {
    /// Zero.
    pub const ZERO: Ratio = Ratio { num: 0, den: 1 };
    /// One.
    pub const ONE: Ratio = Ratio { num: 1, den: 1 };

    /// `num / den`. Panics if `den` is zero (an internal invariant, never input-derived).
    pub fn new(num: i128, den: i128) -> Ratio {
        assert!(den != 0, "Ratio with a zero denominator");
        let g = gcd(num, den);
        let s = if den < 0 { -1 } else { 1 };
        Ratio {
            num: s * num / g,
            den: s * den / g,
        }
    }

    /// The integer `n`.
    pub fn int(n: i128) -> Ratio {
        Ratio { num: n, den: 1 }
    }

    /// Numerator (lowest terms).
    pub fn numer(self) -> i128 {
        self.num
    }

    /// Denominator (lowest terms, positive).
    pub fn denom(self) -> i128 {
        self.den
    }

    /// The largest integer not above `self`.
    pub fn floor(self) -> i128 {
        self.num.div_euclid(self.den)
    }

    /// The smallest integer not below `self`.
    pub fn ceil(self) -> i128 {
        -(-self.num).div_euclid(self.den)
    }

    /// As a float (for reports only; decisions use the exact value).
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }

    /// The smaller of two.
    pub fn min(self, o: Ratio) -> Ratio {
        if self <= o {
            self
        } else {
            o
        }
    }

    /// The larger of two.
    pub fn max(self, o: Ratio) -> Ratio {
        if self >= o {
            self
        } else {
            o
        }
    }

    /// `self` rounded up to the next point of the grid `phase + k * step` (k integer).
    pub fn ceil_to_grid(self, phase: Ratio, step: Ratio) -> Ratio {
        let k = ((self - phase) / step).ceil();
        phase + step * Ratio::int(k)
    }

    /// `self` rounded down to the grid `phase + k * step`.
    pub fn floor_to_grid(self, phase: Ratio, step: Ratio) -> Ratio {
        let k = ((self - phase) / step).floor();
        phase + step * Ratio::int(k)
    }
}

impl Add for Ratio {
    type Output = Ratio;
    fn add(self, o: Ratio) -> Ratio {
        let g = gcd(self.den, o.den);
        Ratio::new(
            self.num * (o.den / g) + o.num * (self.den / g),
            self.den / g * o.den,
        )
    }
}

impl Sub for Ratio {
    type Output = Ratio;
    fn sub(self, o: Ratio) -> Ratio {
        self + Ratio {
            num: -o.num,
            den: o.den,
        }
    }
}

impl Mul for Ratio {
    type Output = Ratio;
    fn mul(self, o: Ratio) -> Ratio {
        let g1 = gcd(self.num, o.den);
        let g2 = gcd(o.num, self.den);
        Ratio::new(
            (self.num / g1) * (o.num / g2),
            (self.den / g2) * (o.den / g1),
        )
    }
}

impl Div for Ratio {
    type Output = Ratio;
    fn div(self, o: Ratio) -> Ratio {
        let g1 = gcd(self.num, o.num);
        let g2 = gcd(self.den, o.den);
        Ratio::new(
            (self.num / g1) * (o.den / g2),
            (self.den / g2) * (o.num / g1),
        )
    }
}

impl PartialOrd for Ratio {
    fn partial_cmp(&self, o: &Ratio) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Ratio {
    fn cmp(&self, o: &Ratio) -> Ordering {
        (self.num * o.den).cmp(&(o.num * self.den))
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

impl Serialize for Ratio {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_exact_and_reduced() {
        let a = Ratio::new(1, 3) + Ratio::new(1, 6);
        assert_eq!(a, Ratio::new(1, 2));
        assert_eq!((a * Ratio::int(4)).numer(), 2);
        assert_eq!(Ratio::new(-7, 2).floor(), -4);
        assert_eq!(Ratio::new(-7, 2).ceil(), -3);
        assert_eq!(Ratio::new(7, 2).ceil(), 4);
        assert_eq!(Ratio::new(6, -4), Ratio::new(-3, 2));
        assert!(Ratio::new(2, 3) < Ratio::new(3, 4));
    }

    #[test]
    fn grid_rounding() {
        let t = Ratio::new(7, 2);
        assert_eq!(t.ceil_to_grid(Ratio::ONE, Ratio::int(2)), Ratio::int(5));
        assert_eq!(t.floor_to_grid(Ratio::ONE, Ratio::int(2)), Ratio::int(3));
        assert_eq!(
            Ratio::int(3).ceil_to_grid(Ratio::ONE, Ratio::int(2)),
            Ratio::int(3)
        );
    }
}
