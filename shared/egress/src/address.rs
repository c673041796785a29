//! Which IP addresses a server may connect to on a user's behalf. Pure rules,
//! no I/O.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address may not be contacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Forbidden {
    #[error("a loopback address")]
    Loopback,
    #[error("a private-network address (RFC 1918 or IPv6 unique-local/site-local)")]
    Private,
    #[error("a link-local address (this includes cloud metadata endpoints)")]
    LinkLocal,
    #[error("a carrier-grade NAT address (100.64.0.0/10)")]
    SharedNat,
    #[error("a special-purpose address (unspecified, broadcast, multicast, documentation, reserved or tunnelled)")]
    Special,
}

/// `Ok` when `ip` is a public unicast address, or loopback with
/// `allow_loopback`. IPv4 addresses embedded in IPv6 (mapped, NAT64, 6to4)
/// are judged as the IPv4 address they reach.
pub fn check_ip(ip: IpAddr, allow_loopback: bool) -> Result<(), Forbidden> {
    match ip {
        IpAddr::V4(v4) => check_v4(v4, allow_loopback),
        IpAddr::V6(v6) => check_v6(v6, allow_loopback),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn check_v4(ip: Ipv4Addr, allow_loopback: bool) -> Result<(), Forbidden> {
    let within = |net: [u8; 4], bits: u32| in_v4(ip, net, bits);
    if within([127, 0, 0, 0], 8) {
        return if allow_loopback { Ok(()) } else { Err(Forbidden::Loopback) };
    }
    if within([10, 0, 0, 0], 8) || within([172, 16, 0, 0], 12) || within([192, 168, 0, 0], 16) {
        return Err(Forbidden::Private);
    }
    if within([169, 254, 0, 0], 16) {
        return Err(Forbidden::LinkLocal);
    }
    if within([100, 64, 0, 0], 10) {
        return Err(Forbidden::SharedNat);
    }
    let special: [([u8; 4], u32); 9] = [
        ([0, 0, 0, 0], 8),       // "this network", unspecified
        ([192, 0, 0, 0], 24),    // IETF protocol assignments
        ([192, 0, 2, 0], 24),    // documentation (TEST-NET-1)
        ([198, 51, 100, 0], 24), // documentation (TEST-NET-2)
        ([203, 0, 113, 0], 24),  // documentation (TEST-NET-3)
        ([198, 18, 0, 0], 15),   // benchmarking
        ([192, 88, 99, 0], 24),  // 6to4 relay anycast
        ([224, 0, 0, 0], 4),     // multicast
        ([240, 0, 0, 0], 4),     // reserved, including broadcast
    ];
    if special.iter().any(|&(net, bits)| within(net, bits)) {
        return Err(Forbidden::Special);
    }
    Ok(())
}

fn check_v6(ip: Ipv6Addr, allow_loopback: bool) -> Result<(), Forbidden> {
    let s = ip.segments();
    if ip == Ipv6Addr::LOCALHOST {
        return if allow_loopback { Ok(()) } else { Err(Forbidden::Loopback) };
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return check_v4(v4, allow_loopback);
    }
    // NAT64 (64:ff9b::/96) reaches the embedded IPv4 address.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return check_v4(Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8), false);
    }
    // 6to4 (2002::/16) tunnels to the IPv4 address in bits 16..48.
    if s[0] == 0x2002 {
        return check_v4(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8), false);
    }
    let prefix = |bits: u32, value: u128| {
        let mask = u128::MAX << (128 - bits);
        u128::from(ip) & mask == value & mask
    };
    if prefix(7, 0xfc00 << 112) || prefix(10, 0xfec0 << 112) {
        return Err(Forbidden::Private);
    }
    if prefix(10, 0xfe80 << 112) {
        return Err(Forbidden::LinkLocal);
    }
    let special = [
        (96, 0),                      // unspecified and IPv4-compatible (deprecated)
        (8, 0xff00 << 112),           // multicast
        (32, 0x2001_0db8 << 96),      // documentation
        (20, 0x3fff << 112),          // documentation (RFC 9637)
        (32, 0x2001_0000 << 96),      // Teredo
        (28, 0x2001_0010 << 96),      // ORCHID
        (28, 0x2001_0020 << 96),      // ORCHIDv2
        (64, 0x0100 << 112),          // discard-only
        (48, 0x0064_ff9b_0001 << 80), // local-use NAT64
    ];
    if special.iter().any(|&(bits, value)| prefix(bits, value)) {
        return Err(Forbidden::Special);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn check(s: &str, allow_loopback: bool) -> Result<(), Forbidden> {
        check_ip(s.parse().unwrap(), allow_loopback)
    }

    #[test]
    fn public_addresses_pass() {
        for ip in ["1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700:4700::1111", "2a00:1450::1"] {
            assert_eq!(check(ip, false), Ok(()), "{ip}");
        }
    }

    #[test]
    fn internal_ranges_are_refused() {
        let cases = [
            ("127.0.0.1", Forbidden::Loopback),
            ("127.255.0.9", Forbidden::Loopback),
            ("::1", Forbidden::Loopback),
            ("::ffff:127.0.0.1", Forbidden::Loopback),
            ("10.0.0.1", Forbidden::Private),
            ("172.16.5.4", Forbidden::Private),
            ("172.31.255.255", Forbidden::Private),
            ("192.168.1.1", Forbidden::Private),
            ("::ffff:10.1.2.3", Forbidden::Private),
            ("fd00::1", Forbidden::Private),
            ("fc12:3456::1", Forbidden::Private),
            ("fec0::1", Forbidden::Private),
            ("169.254.169.254", Forbidden::LinkLocal),
            ("fe80::1", Forbidden::LinkLocal),
            ("100.64.0.1", Forbidden::SharedNat),
            ("100.127.255.254", Forbidden::SharedNat),
            ("0.0.0.0", Forbidden::Special),
            ("255.255.255.255", Forbidden::Special),
            ("224.0.0.1", Forbidden::Special),
            ("192.0.2.10", Forbidden::Special),
            ("::", Forbidden::Special),
            ("ff02::1", Forbidden::Special),
            ("2001:db8::1", Forbidden::Special),
            ("2001::1", Forbidden::Special),
            ("64:ff9b::a9fe:a9fe", Forbidden::LinkLocal), // NAT64 of 169.254.169.254
            ("2002:0a00:0001::1", Forbidden::Private),    // 6to4 of 10.0.0.1
        ];
        for (ip, why) in cases {
            assert_eq!(check(ip, false), Err(why), "{ip}");
        }
    }

    #[test]
    fn loopback_only_when_allowed_and_never_private() {
        assert_eq!(check("127.0.0.1", true), Ok(()));
        assert_eq!(check("::1", true), Ok(()));
        assert_eq!(check("10.0.0.1", true), Err(Forbidden::Private));
        assert_eq!(check("169.254.169.254", true), Err(Forbidden::LinkLocal));
        // NAT64/6to4 never reach loopback, allowed or not.
        assert_eq!(check("64:ff9b::7f00:1", true), Err(Forbidden::Loopback));
    }
}
