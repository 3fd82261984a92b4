//! Which key a request is limited under: the [`KeyExtractor`] trait, any
//! closure `Fn(&Parts) -> Option<K>`, and ready-made extractors: [`PeerIp`]
//! and [`Header`] here, [`ClientIp`](crate::ClientIp) in its own module.
//!
//! An extractor sees the request's head ([`Parts`]: method, URI, headers,
//! extensions), never its body, and answers `None` when the request has no
//! key; the layer then does what [`MissingKey`](crate::MissingKey) says. It
//! may lend the key out of the head ([`Cow::Borrowed`]): a key the limiter
//! already holds is then looked up without an allocation (the owned key is
//! made only when the limiter first stores it).

use http::header::HeaderName;
use http::request::Parts;
use http::Extensions;
use std::borrow::{Borrow, Cow};
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use stripecount::keyed::Key;

/// Finds the key a request is limited under.
///
/// Implemented by every closure `Fn(&Parts) -> Option<K>` (an owned key
/// per request), by [`PeerIp`], [`ClientIp`](crate::ClientIp) and
/// [`Header`]. Implement it yourself to lend a key out of the request
/// without allocating.
///
/// ```
/// use http::request::Parts;
/// use std::borrow::Cow;
/// use stripecount_tower::KeyExtractor;
///
/// /// The first path segment (`/v1/users` -> `v1`), borrowed.
/// struct FirstSegment;
///
/// impl KeyExtractor for FirstSegment {
///     type Key = String;
///     type Ref = str;
///     fn extract<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, str>> {
///         let seg = parts.uri.path().trim_start_matches('/').split('/').next()?;
///         (!seg.is_empty()).then_some(Cow::Borrowed(seg))
///     }
/// }
///
/// let (parts, ()) = http::Request::get("/v1/users").body(()).unwrap().into_parts();
/// assert_eq!(FirstSegment.extract(&parts).as_deref(), Some("v1"));
/// // A closure is an extractor too: a route and a user id, owned.
/// let route_user = |p: &Parts| {
///     let user = p.headers.get("x-user-id")?.to_str().ok()?;
///     Some((p.uri.path().to_owned(), user.to_owned()))
/// };
/// assert_eq!(route_user.extract(&parts), None); // no x-user-id header
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key the limiter stores.
    type Key: Key + Borrow<Self::Ref>;
    /// The form the key is looked up by (`str` for a `String` key).
    type Ref: ?Sized + Hash + Eq + ToOwned<Owned = Self::Key>;

    /// The request's key, or `None` if it has none.
    fn extract<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, Self::Ref>>;
}

impl<F, K> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
    K: Key,
{
    type Key = K;
    type Ref = K;

    fn extract<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, K>> {
        self(parts).map(Cow::Owned)
    }
}

/// The client's IP address, from the connection.
///
/// Read from the request's extensions, first found of:
/// `axum::extract::ConnectInfo<SocketAddr>` (with the `axum` feature; an
/// axum server served with `into_make_service_with_connect_info`), a
/// [`SocketAddr`], an [`IpAddr`] (inserted by a hyper server's accept loop
/// or any layer before this one). A request with none has no key.
///
/// An IPv4-mapped IPv6 address counts as its IPv4 address. An IPv6 client
/// usually holds a whole /64: [`ipv6_prefix`](Self::ipv6_prefix) limits a
/// prefix instead of each address.
///
/// Behind a reverse proxy or a load balancer the connection's peer is the
/// proxy, so every client would share its key: use
/// [`ClientIp`](crate::ClientIp) there, which reads the client's address
/// from the proxy's `X-Forwarded-For` or `Forwarded` header when, and only
/// when, the peer is a proxy you trust.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use stripecount_tower::{KeyExtractor, PeerIp};
///
/// let mut req = http::Request::new(());
/// let peer: SocketAddr = "[2001:db8::1:2:3:4]:443".parse().unwrap();
/// req.extensions_mut().insert(peer);
/// let (parts, ()) = req.into_parts();
/// let ip = |s: &str| s.parse::<IpAddr>().unwrap();
/// assert_eq!(*PeerIp::new().extract(&parts).unwrap(), ip("2001:db8::1:2:3:4"));
/// assert_eq!(*PeerIp::new().ipv6_prefix(64).extract(&parts).unwrap(), ip("2001:db8::"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerIp {
    ipv6_prefix: u8,
}

impl PeerIp {
    /// Each address its own key.
    pub fn new() -> PeerIp {
        PeerIp { ipv6_prefix: 128 }
    }

    /// IPv6 addresses keyed by their first `bits` bits (at most 128; 64 is
    /// a usual choice); IPv4 addresses stay whole.
    pub fn ipv6_prefix(self, bits: u8) -> PeerIp {
        PeerIp {
            ipv6_prefix: bits.min(128),
        }
    }
}

impl Default for PeerIp {
    fn default() -> Self {
        Self::new()
    }
}

impl KeyExtractor for PeerIp {
    type Key = IpAddr;
    type Ref = IpAddr;

    fn extract<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, IpAddr>> {
        let ip = peer_addr(&parts.extensions)?;
        Some(Cow::Owned(ip_key(ip, self.ipv6_prefix)))
    }
}

/// The connection's peer address, as the request's extensions carry it,
/// first found of: axum's `ConnectInfo<SocketAddr>` (feature `axum`), a
/// [`SocketAddr`], an [`IpAddr`]. As inserted: not canonicalised.
pub(crate) fn peer_addr(ext: &Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    let axum = ext
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    #[cfg(not(feature = "axum"))]
    let axum = None;
    axum.or_else(|| ext.get::<SocketAddr>().map(SocketAddr::ip))
        .or_else(|| ext.get::<IpAddr>().copied())
}

/// The key of address `ip`: an IPv4-mapped IPv6 address as its IPv4
/// address, an IPv6 address cut to its first `ipv6_prefix` bits (at most
/// 128).
pub(crate) fn ip_key(ip: IpAddr, ipv6_prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) if ipv6_prefix < 128 => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(ipv6_prefix))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
        ip => ip,
    }
}

/// The value of one request header (an API key, a tenant id), borrowed:
/// keys are `String`s, looked up by `&str`. A request without the header,
/// with an empty value, or with a value that is not visible ASCII has no
/// key.
///
/// ```
/// use stripecount_tower::{Header, KeyExtractor};
///
/// let x = Header::new(http::HeaderName::from_static("x-api-key"));
/// let (parts, ()) = http::Request::get("/")
///     .header("x-api-key", "k-123")
///     .body(())
///     .unwrap()
///     .into_parts();
/// assert_eq!(x.extract(&parts).as_deref(), Some("k-123"));
/// ```
#[derive(Debug, Clone)]
pub struct Header {
    name: HeaderName,
}

impl Header {
    /// Keys requests by the value of header `name`.
    pub fn new(name: HeaderName) -> Header {
        Header { name }
    }
}

impl KeyExtractor for Header {
    type Key = String;
    type Ref = str;

    fn extract<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, str>> {
        let v = parts.headers.get(&self.name)?.to_str().ok()?;
        (!v.is_empty()).then_some(Cow::Borrowed(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(f: impl FnOnce(&mut http::Request<()>)) -> Parts {
        let mut req = http::Request::new(());
        f(&mut req);
        req.into_parts().0
    }

    #[test]
    fn peer_ip_reads_socket_addr_then_ip_addr_and_canonicalizes() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let p = PeerIp::new();
        assert_eq!(p.extract(&parts(|_| {})), None);
        let with_ip = parts(|r| {
            r.extensions_mut().insert(ip("10.0.0.7"));
        });
        assert_eq!(*p.extract(&with_ip).unwrap(), ip("10.0.0.7"));
        // A SocketAddr wins over an IpAddr; a mapped address is its IPv4.
        let both = parts(|r| {
            r.extensions_mut().insert(ip("10.0.0.7"));
            let mapped: SocketAddr = "[::ffff:192.0.2.1]:80".parse().unwrap();
            r.extensions_mut().insert(mapped);
        });
        assert_eq!(*p.extract(&both).unwrap(), ip("192.0.2.1"));
        let v6 = parts(|r| {
            r.extensions_mut().insert(ip("2001:db8:aaaa:bbbb:1:2:3:4"));
        });
        for (bits, want) in [
            (128, "2001:db8:aaaa:bbbb:1:2:3:4"),
            (200, "2001:db8:aaaa:bbbb:1:2:3:4"),
            (64, "2001:db8:aaaa:bbbb::"),
            (48, "2001:db8:aaaa::"),
            (0, "::"),
        ] {
            let got = *p.ipv6_prefix(bits).extract(&v6).unwrap();
            assert_eq!(got, ip(want), "/{bits}");
        }
        // IPv4 stays whole under a prefix.
        assert_eq!(*p.ipv6_prefix(8).extract(&with_ip).unwrap(), ip("10.0.0.7"));
    }

    #[test]
    fn header_borrows_visible_ascii_values_only() {
        let h = Header::new(HeaderName::from_static("x-api-key"));
        let with = |v: &[u8]| {
            parts(|r| {
                let v = http::HeaderValue::from_bytes(v).unwrap();
                r.headers_mut().insert("x-api-key", v);
            })
        };
        let p = with(b"abc");
        assert!(matches!(h.extract(&p), Some(Cow::Borrowed("abc"))));
        assert_eq!(h.extract(&with(b"")), None);
        assert_eq!(h.extract(&with(b"caf\xc3\xa9")), None);
        assert_eq!(h.extract(&parts(|_| {})), None);
    }
}
