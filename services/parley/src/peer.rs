//! Who a peer is: its network address, as far as the server can tell without credentials, and
//! the identity a credential proves ([`PeerIdentity`]: a client certificate under mutual TLS).
//!
//! Per-address limits count by it (`server::admission`). An address is an IPv4 address, or an
//! IPv6 address's /64 prefix (an IPv4-mapped IPv6 address counts as its IPv4 address): one IPv6
//! host commonly owns a whole /64 and may use any address in it.
//!
//! A request's [`Caller`] is its address and the principal its credentials resolved to
//! (`crate::access`): an authenticated peer's conversations and agreements are its own,
//! recorded as `peer:<id>`, wherever it connects from; an anonymous peer's are its address's.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use crate::access::Principal;
use crate::error::ApiError;

/// Who sent a request: its socket address and the principal its credentials name.
#[derive(Debug, Clone)]
pub struct Caller {
    pub addr: SocketAddr,
    pub principal: Arc<Principal>,
}

impl Caller {
    pub fn new(addr: SocketAddr, principal: Arc<Principal>) -> Caller {
        Caller { addr, principal }
    }

    /// How records name this caller: `peer:<id>` for an authenticated principal, else its
    /// address (see [`PeerAddress`]).
    pub fn party(&self) -> String {
        self.principal
            .party()
            .unwrap_or_else(|| PeerAddress::of(self.addr).to_string())
    }

    /// Whether `recorded` (a record's peer) names this caller: its principal's `peer:<id>`, or
    /// for an anonymous caller its address (a socket address or an IP address, as records
    /// name addresses).
    pub fn is(&self, recorded: &str) -> bool {
        match self.principal.party() {
            Some(party) => recorded == party,
            None => PeerAddress::parse(recorded) == Some(PeerAddress::of(self.addr)),
        }
    }

    /// Whether the principal may do `action`; the `forbidden` error saying what it may do
    /// instead when not.
    pub fn check(&self, action: parley_auth::Action<'_>) -> Result<(), ApiError> {
        self.principal.check(action)
    }
}

/// A peer's address, as limits and conversation bindings count it (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PeerAddress {
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6Prefix([u8; 8]),
}

impl PeerAddress {
    pub fn of(peer: SocketAddr) -> PeerAddress {
        PeerAddress::of_ip(peer.ip())
    }

    pub fn of_ip(ip: IpAddr) -> PeerAddress {
        match ip {
            IpAddr::V4(v4) => PeerAddress::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => PeerAddress::V4(v4.octets()),
                None => {
                    let mut prefix = [0u8; 8];
                    prefix.copy_from_slice(&v6.octets()[..8]);
                    PeerAddress::V6Prefix(prefix)
                }
            },
        }
    }

    /// Reads what [`PeerAddress`]'s `Display` wrote, or a socket address or IP address (how
    /// earlier records name their peer).
    pub fn parse(text: &str) -> Option<PeerAddress> {
        if let Some(prefix) = text.strip_suffix("/64") {
            return prefix
                .parse::<Ipv6Addr>()
                .ok()
                .map(|ip| Self::of_ip(ip.into()));
        }
        if let Ok(socket) = text.parse::<SocketAddr>() {
            return Some(Self::of(socket));
        }
        text.parse::<IpAddr>().ok().map(Self::of_ip)
    }
}

impl fmt::Display for PeerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerAddress::V4(octets) => Ipv4Addr::from(*octets).fmt(f),
            PeerAddress::V6Prefix(prefix) => {
                let mut octets = [0u8; 16];
                octets[..8].copy_from_slice(prefix);
                write!(f, "{}/64", Ipv6Addr::from(octets))
            }
        }
    }
}

/// Who a peer proved to be on its connection: the subject a verified client certificate names
/// (see `tls::identity_of`). The listener puts it in every request's extensions next to the
/// peer's address; what a peer may do by it is not decided here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PeerIdentity {
    name: String,
    scheme: IdentityScheme,
}

/// The credential an identity was proved with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdentityScheme {
    /// A client certificate verified against `tls.client_ca`.
    ClientCertificate,
}

impl PeerIdentity {
    pub fn client_certificate(name: String) -> PeerIdentity {
        PeerIdentity {
            name,
            scheme: IdentityScheme::ClientCertificate,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn scheme(&self) -> IdentityScheme {
        self.scheme
    }
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("a socket address")
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_bit_prefix_and_mapped_ipv4_as_ipv4() {
        let a = PeerAddress::of(addr("[2001:db8:1:2::1]:1"));
        let b = PeerAddress::of(addr("[2001:db8:1:2:ffff::9]:2"));
        let c = PeerAddress::of(addr("[2001:db8:1:3::1]:1"));
        assert_eq!(a, b, "one /64");
        assert_ne!(a, c, "another /64");
        assert_eq!(
            PeerAddress::of(addr("[::ffff:192.0.2.7]:1")),
            PeerAddress::of(addr("192.0.2.7:9"))
        );
        assert_ne!(
            PeerAddress::of(addr("192.0.2.7:1")),
            PeerAddress::of(addr("192.0.2.8:1"))
        );
    }

    #[test]
    fn an_address_reads_back_as_written_and_from_a_socket_address() {
        for text in ["192.0.2.7", "2001:db8:1:2::/64"] {
            let peer = PeerAddress::parse(text).expect(text);
            assert_eq!(peer.to_string(), text);
        }
        assert_eq!(
            PeerAddress::parse("192.0.2.7:4711"),
            PeerAddress::parse("192.0.2.7")
        );
        assert_eq!(
            PeerAddress::parse("[2001:db8:1:2::9]:80"),
            PeerAddress::parse("2001:db8:1:2::/64")
        );
        assert_eq!(PeerAddress::parse("not an address"), None);
    }
}
