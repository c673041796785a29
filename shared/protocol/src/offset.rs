//! Offsets: opaque to clients, a byte position to us.
//!
//! Rendered as `{0:016}_{position:016}` (33 characters, digits and `_`):
//! fixed width, so lexicographic order equals position order; never `-1` or
//! `now`; none of `,&=?/`. The leading part is reserved (always zero today)
//! so a future layout (e.g. segment numbers) can sort after every offset
//! handed out so far without breaking comparisons.

use std::fmt;

use crate::ProtocolError;

const WIDTH: usize = 16;
const LEN: usize = WIDTH * 2 + 1;
/// Largest position that fits in 16 decimal digits.
const MAX_POSITION: u64 = 9_999_999_999_999_999;

/// A position in a stream's byte sequence, in offset-token form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub u64);

impl Offset {
    pub const ZERO: Offset = Offset(0);

    pub fn position(self) -> u64 {
        self.0
    }

    /// Parse a server-minted offset token.
    pub fn parse(token: &str) -> Result<Self, ProtocolError> {
        let bad = || ProtocolError::InvalidOffset(format!("{token:?} is not an offset this server issued"));
        if token.len() != LEN || token.as_bytes()[WIDTH] != b'_' {
            return Err(bad());
        }
        let (high, low) = (&token[..WIDTH], &token[WIDTH + 1..]);
        if !high.bytes().all(|b| b.is_ascii_digit()) || !low.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if high.bytes().any(|b| b != b'0') {
            return Err(bad());
        }
        low.parse::<u64>().map(Offset).map_err(|_| bad())
    }

    /// The token's bytes, without going through a formatter: every response
    /// carries one (`Stream-Next-Offset`), and `format!`'s padded integers
    /// and a growing `String` cost more than the rest of rendering a header.
    pub fn to_token(self) -> [u8; LEN] {
        let mut token = [b'0'; LEN];
        token[WIDTH] = b'_';
        let mut n = self.0.min(MAX_POSITION);
        // The rest are the zeros the token starts as.
        for digit in token[WIDTH + 1..].iter_mut().rev() {
            if n == 0 {
                break;
            }
            // `n % 10` is below 10, so the cast is exact.
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
        token
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = self.to_token();
        // Digits and `_` only: always UTF-8.
        f.write_str(std::str::from_utf8(&token).map_err(|_| fmt::Error)?)
    }
}

/// The `offset` query parameter of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOffset {
    /// `-1` or absent: the stream's beginning.
    Beginning,
    /// `now`: the current tail.
    Now,
    At(Offset),
}

impl ReadOffset {
    /// Parse the values of every `offset` parameter in the query (absent: none).
    pub fn from_query(values: &[&str]) -> Result<Option<Self>, ProtocolError> {
        match values {
            [] => Ok(None),
            [v] => Self::parse(v).map(Some),
            _ => Err(ProtocolError::InvalidOffset("offset given more than once".into())),
        }
    }

    pub fn parse(value: &str) -> Result<Self, ProtocolError> {
        match value {
            "" => Err(ProtocolError::InvalidOffset("empty offset".into())),
            "-1" => Ok(Self::Beginning),
            "now" => Ok(Self::Now),
            v => Offset::parse(v).map(Self::At),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trips_and_sorts(a in 0..MAX_POSITION, b in 0..MAX_POSITION) {
            let (ta, tb) = (Offset(a).to_string(), Offset(b).to_string());
            prop_assert_eq!(Offset::parse(&ta).unwrap(), Offset(a));
            prop_assert_eq!(ta.cmp(&tb), a.cmp(&b));
            prop_assert!(!ta.contains([',', '&', '=', '?', '/']));
            prop_assert!(ta != "-1" && ta != "now");
            prop_assert_eq!(ta, format!("{:016}_{:016}", 0, a), "the documented layout");
        }

        #[test]
        fn arbitrary_strings_never_panic(s in ".{0,40}") {
            let _ = ReadOffset::parse(&s);
        }
    }

    #[test]
    fn positions_past_sixteen_digits_render_as_the_largest() {
        let max = format!("{:016}_{:016}", 0, MAX_POSITION);
        assert_eq!(Offset(u64::MAX).to_string(), max);
        assert_eq!(Offset(MAX_POSITION + 1).to_token(), max.as_bytes());
        assert_eq!(Offset(0).to_string(), "0000000000000000_0000000000000000");
        for n in [1, 9, 10, 99, 100, 12_345, 1_000_000, MAX_POSITION - 1] {
            assert_eq!(Offset(n).to_string(), format!("{:016}_{:016}", 0, n));
        }
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "abc",
            "1,2",
            "0000000000000000_000000000000000x",
            " 0000000000000000_0000000000000000",
            "0000000000000001_0000000000000000",
            "-2",
            "NOW",
        ] {
            assert!(ReadOffset::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(ReadOffset::parse("-1").unwrap(), ReadOffset::Beginning);
        assert_eq!(ReadOffset::parse("now").unwrap(), ReadOffset::Now);
        assert!(ReadOffset::from_query(&["-1", "-1"]).is_err());
    }
}
