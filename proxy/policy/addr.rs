//! Address classification: is a resolved address a public, global unicast
//! destination? Pure: no I/O.
//!
//! The lists follow the IANA special-purpose registries for IPv4 and IPv6,
//! plus the cloud metadata endpoints. Addresses that embed an IPv4 address
//! (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) are judged by the
//! address they embed as well.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not a public destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonPublic {
    Unspecified,
    Loopback,
    Private,
    SharedCgnat,
    LinkLocal,
    Metadata,
    Multicast,
    Broadcast,
    Documentation,
    Benchmarking,
    Reserved,
    UniqueLocal,
    /// NAT64, 6to4, Teredo or IPv4-mapped address whose embedded IPv4
    /// address is not public.
    Embedded(&'static str),
}

impl NonPublic {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            NonPublic::Unspecified => "an unspecified address",
            NonPublic::Loopback => "a loopback address",
            NonPublic::Private => "a private address",
            NonPublic::SharedCgnat => "a carrier-grade NAT address",
            NonPublic::LinkLocal => "a link-local address",
            NonPublic::Metadata => "a cloud metadata address",
            NonPublic::Multicast => "a multicast address",
            NonPublic::Broadcast => "the broadcast address",
            NonPublic::Documentation => "a documentation address",
            NonPublic::Benchmarking => "a benchmarking address",
            NonPublic::Reserved => "a reserved address",
            NonPublic::UniqueLocal => "a unique-local address",
            NonPublic::Embedded(kind) => kind,
        }
    }
}

const METADATA_V4: [Ipv4Addr; 3] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(168, 63, 129, 16),
];
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// Classifies an address: `Ok(())` when it is global unicast.
/// The address an IPv6 form of an IPv4 address stands for: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, not `::` or `::1`)
/// and well-known NAT64 (`64:ff9b::a.b.c.d`) become that IPv4 address;
/// anything else is itself. Used to compare with sluice's own addresses.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..6] == [0; 6] && u32::from(low) > 1 {
        return IpAddr::V4(low);
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        return IpAddr::V4(low);
    }
    ip
}

/// `Ok` when `ip` is a public address sluice may dial; else which kind of
/// non-public address it is (IPv4-mapped and translated IPv6 forms are
/// classified as the IPv4 address they carry).
pub fn classify(ip: IpAddr) -> Result<(), NonPublic> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

/// [`classify`] for an IPv4 address.
pub fn classify_v4(ip: Ipv4Addr) -> Result<(), NonPublic> {
    use NonPublic::*;
    if METADATA_V4.contains(&ip) {
        return Err(Metadata);
    }
    let table: &[([u8; 4], u32, NonPublic)] = &[
        ([0, 0, 0, 0], 8, Unspecified),
        ([10, 0, 0, 0], 8, Private),
        ([100, 64, 0, 0], 10, SharedCgnat),
        ([127, 0, 0, 0], 8, Loopback),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([172, 16, 0, 0], 12, Private),
        ([192, 0, 0, 0], 24, Reserved),
        ([192, 0, 2, 0], 24, Documentation),
        ([192, 31, 196, 0], 24, Reserved),
        ([192, 52, 193, 0], 24, Reserved),
        ([192, 88, 99, 0], 24, Reserved),
        ([192, 168, 0, 0], 16, Private),
        ([192, 175, 48, 0], 24, Reserved),
        ([198, 18, 0, 0], 15, Benchmarking),
        ([198, 51, 100, 0], 24, Documentation),
        ([203, 0, 113, 0], 24, Documentation),
        ([224, 0, 0, 0], 4, Multicast),
        ([255, 255, 255, 255], 32, Broadcast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    for (net, bits, why) in table {
        if in_v4(ip, *net, *bits) {
            return Err(*why);
        }
    }
    Ok(())
}

fn embedded(v4: Ipv4Addr, kind: &'static str) -> Result<(), NonPublic> {
    classify_v4(v4).map_err(|_| NonPublic::Embedded(kind))
}

fn v4_at(seg: &[u16; 8], hi: usize) -> Ipv4Addr {
    let bits = (u32::from(seg[hi]) << 16) | u32::from(seg[hi + 1]);
    Ipv4Addr::from(bits)
}

/// [`classify`] for an IPv6 address.
pub fn classify_v6(ip: Ipv6Addr) -> Result<(), NonPublic> {
    use NonPublic::*;
    let s = ip.segments();
    if ip == METADATA_V6 {
        return Err(Metadata);
    }
    if ip.is_unspecified() {
        return Err(Unspecified);
    }
    if ip.is_loopback() {
        return Err(Loopback);
    }
    // ::ffff:0:0/96 IPv4-mapped: judged as the IPv4 address it maps.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return embedded(v4, "an IPv4-mapped address of a non-public IPv4 address");
    }
    // ::/96 IPv4-compatible (deprecated) and the rest of ::/8: reserved.
    if s[0] == 0 {
        return Err(Reserved);
    }
    // 64:ff9b::/96 well-known NAT64 prefix.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return embedded(v4_at(&s, 6), "a NAT64 address of a non-public IPv4 address");
    }
    // 64:ff9b:1::/48 local-use NAT64.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        return Err(Reserved);
    }
    // 100::/64 discard-only.
    if s[0] == 0x100 && s[1..4] == [0, 0, 0] {
        return Err(Reserved);
    }
    // 2001::/32 Teredo: server at bits 32..64, client (inverted) at 96..128.
    if s[0] == 0x2001 && s[1] == 0 {
        let server = v4_at(&s, 2);
        let client = Ipv4Addr::from(!u32::from(v4_at(&s, 6)));
        embedded(server, "a Teredo address of a non-public IPv4 address")?;
        return embedded(client, "a Teredo address of a non-public IPv4 address");
    }
    // 2001:db8::/32 and 3fff::/20 documentation.
    if (s[0] == 0x2001 && s[1] == 0xdb8) || (s[0] == 0x3fff && s[1] < 0x1000) {
        return Err(Documentation);
    }
    // 2001:2::/48 benchmarking.
    if s[0] == 0x2001 && s[1] == 2 && s[2] == 0 {
        return Err(Benchmarking);
    }
    // 2001::/23 IETF protocol assignments (ORCHID, AMT, ...): not a destination.
    if s[0] == 0x2001 && s[1] < 0x200 {
        return Err(Reserved);
    }
    // 2002::/16 6to4: judged by the embedded IPv4 address.
    if s[0] == 0x2002 {
        return embedded(v4_at(&s, 1), "a 6to4 address of a non-public IPv4 address");
    }
    // 5f00::/16 SRv6 SIDs.
    if s[0] == 0x5f00 {
        return Err(Reserved);
    }
    if s[0] & 0xfe00 == 0xfc00 {
        return Err(UniqueLocal);
    }
    if s[0] & 0xffc0 == 0xfe80 || s[0] & 0xffc0 == 0xfec0 {
        return Err(LinkLocal);
    }
    if s[0] & 0xff00 == 0xff00 {
        return Err(Multicast);
    }
    // Global unicast is 2000::/3; everything else is unassigned.
    if s[0] & 0xe000 != 0x2000 {
        return Err(Reserved);
    }
    Ok(())
}

#[cfg(test)]
mod canonical_tests {
    use super::*;

    #[test]
    fn canonical_table() {
        let cases = [
            ("v4 stays", "127.0.0.1", "127.0.0.1"),
            ("mapped", "::ffff:127.0.0.1", "127.0.0.1"),
            ("compatible", "::127.0.0.1", "127.0.0.1"),
            ("nat64", "64:ff9b::7f00:1", "127.0.0.1"),
            (
                "nat64, both bytes of the low segment",
                "64:ff9b::7f00:101",
                "127.0.1.1",
            ),
            (
                "not nat64: another first segment",
                "2606:ff9b::7f00:1",
                "2606:ff9b::7f00:1",
            ),
            ("loopback v6 stays", "::1", "::1"),
            ("unspecified v6 stays", "::", "::"),
            ("global v6 stays", "2001:db8::1", "2001:db8::1"),
        ];
        for (what, a, want) in cases {
            let a: IpAddr = a.parse().unwrap();
            let want: IpAddr = want.parse().unwrap();
            assert_eq!(canonical(a), want, "case {what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("public v4", "93.184.216.34", true),
            ("public v4 edge below cgnat", "100.63.255.255", true),
            ("loopback", "127.0.0.1", false),
            ("loopback other", "127.255.0.9", false),
            ("private 10", "10.1.2.3", false),
            ("private 172.16", "172.16.0.1", false),
            ("public 172.32", "172.32.0.1", true),
            ("private 192.168", "192.168.1.1", false),
            ("cgnat", "100.64.0.1", false),
            ("cgnat top", "100.127.255.255", false),
            ("metadata aws", "169.254.169.254", false),
            ("metadata alibaba", "100.100.100.200", false),
            ("metadata azure", "168.63.129.16", false),
            ("link local", "169.254.1.1", false),
            ("this network", "0.1.2.3", false),
            ("unspecified", "0.0.0.0", false),
            ("broadcast", "255.255.255.255", false),
            ("multicast", "224.0.0.1", false),
            ("reserved 240", "240.0.0.1", false),
            ("documentation", "192.0.2.1", false),
            ("documentation 2", "198.51.100.1", false),
            ("documentation 3", "203.0.113.1", false),
            ("benchmarking", "198.18.0.1", false),
            ("ietf", "192.0.0.8", false),
            ("public v6", "2606:4700::1111", true),
            ("v6 loopback", "::1", false),
            ("v6 unspecified", "::", false),
            ("v6 mapped loopback", "::ffff:127.0.0.1", false),
            ("v6 mapped metadata", "::ffff:169.254.169.254", false),
            ("v6 mapped public", "::ffff:93.184.216.34", true),
            ("v6 compatible", "::127.0.0.1", false),
            ("nat64 private", "64:ff9b::10.0.0.1", false),
            ("nat64 metadata", "64:ff9b::a9fe:a9fe", false),
            ("nat64 public", "64:ff9b::93.184.216.34", true),
            ("nat64 local use", "64:ff9b:1::1", false),
            ("6to4 private", "2002:0a00:0001::1", false),
            ("6to4 loopback", "2002:7f00:0001::1", false),
            ("6to4 public", "2002:5db8:d822::1", true),
            (
                "teredo private client",
                "2001:0:5db8:d822::f5ff:fffe",
                false,
            ),
            (
                "teredo private server",
                "2001:0:0a00:0001::a247:2bdd",
                false,
            ),
            ("teredo public", "2001:0:5db8:d822::a247:2bdd", true),
            ("v6 documentation", "2001:db8::1", false),
            ("v6 documentation 3fff", "3fff::1", false),
            ("v6 benchmarking", "2001:2::1", false),
            ("orchid", "2001:20::1", false),
            ("ula", "fd12:3456::1", false),
            ("metadata v6", "fd00:ec2::254", false),
            ("link local v6", "fe80::1", false),
            ("multicast v6", "ff02::1", false),
            ("discard", "100::1", false),
            ("unassigned", "4000::1", false),
            // Global addresses that share a segment with a special prefix
            // (each prefix check needs all its segments).
            ("global, second segment ff9b", "2606:ff9b::a00:1", true),
            ("global, ff9b then 1", "2606:ff9b:1::1", true),
            ("global, third segment 1", "2606:4700:1::1111", true),
            ("global, zero segments", "2606::1", true),
            ("6to4 documentation", "2002:c000:0201::1", false),
            (
                "teredo public client, reserved-looking bits",
                "2001:0:5db8:d822::f7f7:f7f7",
                true,
            ),
            ("global 2001:4860::", "2001:4860::8888", true),
            ("global just past 3fff::/20", "3fff:1000::1", true),
            ("global, 2 in the second segment", "2606:2::1", true),
            ("global, small second segment", "2606:100::1", true),
            ("global just past 2001::/23", "2001:200::1", true),
            ("global, first segment ending in 00", "2600::1", true),
        ];
        for (what, ip, public) in cases {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(classify(ip).is_ok(), *public, "case {what:?}: {ip}");
        }
    }

    #[test]
    fn each_special_range_is_named_as_itself() {
        use NonPublic::*;
        let cases = [
            ("2001:2::1", Benchmarking),
            ("2001:2:1::1", Reserved),
            ("2001:3::1", Reserved),
            ("2001:db8::1", Documentation),
            ("fd12:3456::1", UniqueLocal),
            ("fc00::1", UniqueLocal),
            ("200::1", Reserved),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("fec0::1", LinkLocal),
            ("ff02::1", Multicast),
            ("100::1", Reserved),
        ];
        for (ip, want) in cases {
            assert_eq!(classify(ip.parse().unwrap()), Err(want), "{ip}");
        }
    }

    #[test]
    fn refusals_describe_the_kind_of_address() {
        let kind = |ip: &str| classify(ip.parse().unwrap()).unwrap_err().describe();
        assert_eq!(kind("10.1.2.3"), "a private address");
        assert_eq!(kind("169.254.169.254"), "a cloud metadata address");
        assert_eq!(kind("::1"), "a loopback address");
        assert_eq!(
            kind("64:ff9b::10.0.0.1"),
            "a NAT64 address of a non-public IPv4 address"
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn public_v4_is_global_unicast(n in any::<u32>()) {
            let ip = Ipv4Addr::from(n);
            if classify_v4(ip).is_ok() {
                prop_assert!(!ip.is_private() && !ip.is_loopback() && !ip.is_link_local()
                    && !ip.is_multicast() && !ip.is_broadcast() && !ip.is_unspecified()
                    && !ip.is_documentation(), "{}", ip);
                prop_assert!(!(ip.octets()[0] == 100 && (ip.octets()[1] & 0xc0) == 64), "CGNAT {}", ip);
                prop_assert!(ip.octets()[0] < 224, "class D/E {}", ip);
            }
        }

        #[test]
        fn public_v6_is_global_unicast(segs in any::<[u16; 8]>()) {
            let ip = Ipv6Addr::from(segs);
            if classify_v6(ip).is_ok() {
                prop_assert_eq!(segs[0] & 0xe000, 0x2000, "outside 2000::/3: {}", ip);
                prop_assert!(!ip.is_multicast() && !ip.is_loopback() && !ip.is_unspecified());
            }
        }

        #[test]
        fn embedded_v4_is_judged_like_v4(n in any::<u32>()) {
            let v4 = Ipv4Addr::from(n);
            let public = classify_v4(v4).is_ok();
            let mapped = v4.to_ipv6_mapped();
            prop_assert_eq!(classify_v6(mapped).is_ok(), public, "mapped {}", mapped);
            let o = v4.octets();
            let nat64 = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, u16::from_be_bytes([o[0], o[1]]), u16::from_be_bytes([o[2], o[3]]));
            prop_assert_eq!(classify_v6(nat64).is_ok(), public, "nat64 {}", nat64);
            let six2four = Ipv6Addr::new(0x2002, u16::from_be_bytes([o[0], o[1]]), u16::from_be_bytes([o[2], o[3]]), 0, 0, 0, 0, 1);
            prop_assert_eq!(classify_v6(six2four).is_ok(), public, "6to4 {}", six2four);
        }
    }
}
