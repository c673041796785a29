//! The `Date` header of responses the fast path frames itself (`fast.rs`),
//! formatted once a second per thread, as hyper does for its own.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) is always 29 bytes.
const LEN: usize = 29;

struct Cached {
    second: u64,
    text: [u8; LEN],
}

thread_local! {
    static DATE: RefCell<Cached> = const { RefCell::new(Cached { second: u64::MAX, text: [0; LEN] }) };
}

/// Calls `f` with the current second's `Date` value.
pub(crate) fn with<T>(f: impl FnOnce(&[u8]) -> T) -> T {
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|cached| {
        if cached.second != second {
            let text = httpdate::fmt_http_date(now);
            if let Ok(text) = <[u8; LEN]>::try_from(text.as_bytes()) {
                cached.text = text;
                cached.second = second;
            }
        }
        f(&cached.text)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn the_date_is_an_http_date_of_now() {
        let text = super::with(|d| String::from_utf8(d.to_vec()).unwrap());
        let parsed = httpdate::parse_http_date(&text).unwrap();
        let skew = std::time::SystemTime::now().duration_since(parsed).unwrap();
        assert!(skew.as_secs() <= 1, "{text} is {skew:?} behind now");
        assert!(text.ends_with(" GMT"), "{text}");
    }
}
