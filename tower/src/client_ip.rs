//! [`ClientIp`]: the client's address behind proxies you trust.
//!
//! The model. Each proxy appends the address it received the request from
//! to the end of the forwarding header, so the header reads, left to
//! right, from what the client claims to what each proxy saw, and the
//! connection's peer is the last proxy. An entry is a fact only if a
//! trusted proxy wrote it; the entries a client sent are claims. Walking
//! from the peer to the left, the first address that is not a trusted
//! proxy was written by a trusted one (the entry's right neighbour, or the
//! peer): it is the client, and the key.
//!
//! Invariants the code keeps:
//! - An untrusted peer is the key, header or not: a client that reaches
//!   the service directly cannot choose its key by sending a header.
//! - Entries left of the chosen address are never read: not parsed, not
//!   validated, not counted toward the limits. A client controls them, so
//!   nothing about them (addresses, syntax, length, bytes that are not
//!   ASCII, a quote left open) may change its key. So the header is read
//!   from its end, byte by byte, never as a whole string, and the limits
//!   (`max_bytes`, `max_hops`) bound the part walked, not the header.
//! - Every failure in the walk (a malformed entry, `unknown` or an
//!   obfuscated `_name` where an address is needed, an element of
//!   `Forwarded` without `for`, a limit reached) gives the peer, never a
//!   header value: a failure can only merge clients under their proxy's
//!   key, never let one pick a key.
//! - No allocation per request: the header's bytes are read in place and
//!   addresses parsed from borrowed slices.

use crate::key::{ip_key, peer_addr};
use crate::KeyExtractor;
use http::header::{HeaderName, FORWARDED};
use http::request::Parts;
use http::HeaderMap;
use std::borrow::Cow;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The client's IP address, read from a proxy's forwarding header when the
/// connection comes from a proxy you trust.
///
/// The connection's peer address is found as [`PeerIp`](crate::PeerIp)
/// finds it (a request without one has no key). Then:
///
/// - a peer outside the trusted ranges is the key; its headers are ignored;
/// - from a trusted peer, the header's entries are walked right to left
///   (several header lines form one list, in order) and the first address
///   outside the trusted ranges is the key; if every entry is trusted, the
///   leftmost; without the header, the peer.
///
/// Entries left of the one chosen are never read, so a client gains
/// nothing by forging them. The walk gives up and keys on the peer when
/// it meets an entry that is not an address (`unknown`, an obfuscated
/// `_name`, anything malformed), reads more than
/// [`max_bytes`](Self::max_bytes) of the header or more than
/// [`max_hops`](Self::max_hops) entries: such requests share their
/// proxy's budget, and none chooses its key.
///
/// The header is `X-Forwarded-For` unless [`header`](Self::header) says
/// otherwise (see [`ProxyHeader`] for the syntax read). Addresses are
/// compared and keyed as [`PeerIp`](crate::PeerIp) keys them: an
/// IPv4-mapped IPv6 address as its IPv4 address, IPv6 cut to
/// [`ipv6_prefix`](Self::ipv6_prefix) bits. A trusted address that
/// connects directly is believed too: trust only the proxies' own ranges.
///
/// ```
/// use std::net::{IpAddr, SocketAddr};
/// use stripecount_tower::{ClientIp, KeyExtractor};
///
/// // The load balancers are in 10.0.0.0/8.
/// let client_ip = ClientIp::new(["10.0.0.0/8"])?;
/// let request = |peer: &str, xff: &str| {
///     let mut req = http::Request::get("/").header("x-forwarded-for", xff).body(()).unwrap();
///     req.extensions_mut().insert(peer.parse::<SocketAddr>().unwrap());
///     req.into_parts().0
/// };
/// let ip = |s: &str| s.parse::<IpAddr>().unwrap();
/// // 203.0.113.7 sent `X-Forwarded-For: 198.51.100.1`; the balancer
/// // appended the address it saw.
/// let via_proxy = request("10.0.0.2:40000", "198.51.100.1, 203.0.113.7");
/// assert_eq!(*client_ip.extract(&via_proxy).unwrap(), ip("203.0.113.7"));
/// // Directly, the header is the client's own word: ignored.
/// let direct = request("203.0.113.7:5000", "198.51.100.1");
/// assert_eq!(*client_ip.extract(&direct).unwrap(), ip("203.0.113.7"));
/// # Ok::<(), stripecount_tower::CidrError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientIp {
    trusted: Box<[Range]>,
    header: ProxyHeader,
    ipv6_prefix: u8,
    max_hops: usize,
    max_bytes: usize,
}

/// Which header [`ClientIp`] reads the proxies' chain from.
///
/// Entries are separated by commas, with optional spaces or tabs around
/// them; empty entries are skipped (RFC 9110 §5.6.1). An address may carry
/// a port: `192.0.2.60`, `192.0.2.60:8080`, `2001:db8::17`,
/// `[2001:db8::17]`, `[2001:db8::17]:4711`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `X-Forwarded-For: 203.0.113.7, 10.0.0.2`: the default, as the one
    /// load balancers and reverse proxies set most widely.
    #[default]
    XForwardedFor,
    /// `Forwarded: for=203.0.113.7;proto=https, for="[2001:db8::17]:4711"`
    /// (RFC 7239): each element's `for` parameter (name in any case, value
    /// a token or a quoted string), other parameters skipped. An element
    /// without `for`, or with `for=unknown` or an obfuscated `for=_name`,
    /// has no address: the walk keys on the peer if it reaches it.
    Forwarded,
}

/// A trusted-proxy range [`ClientIp::new`] could not read. Each variant
/// holds the range as given.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CidrError {
    /// Neither an IP address nor an address, `/` and a decimal prefix
    /// length.
    Malformed(String),
    /// A prefix length past the address's width (32 bits for IPv4, 128
    /// for IPv6).
    PrefixTooLong(String),
    /// Bits set past the prefix (`10.1.2.3/8`): the range is its network
    /// address and a length, so a typo cannot widen the trust silently.
    HostBitsSet(String),
}

impl fmt::Display for CidrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (range, what) = match self {
            CidrError::Malformed(r) => (r, "not an IP address or an address/prefix range"),
            CidrError::PrefixTooLong(r) => (r, "a prefix longer than the address"),
            CidrError::HostBitsSet(r) => (r, "bits set past the prefix"),
        };
        write!(f, "trusted proxy range {range:?}: {what}")
    }
}

impl std::error::Error for CidrError {}

/// One trusted range: an address matches if its bits under `mask` are
/// `net`. IPv4-mapped IPv6 ranges are stored as IPv4, as addresses are
/// compared in canonical form.
///
/// Written here rather than taken from a CIDR crate: the parsing must tell
/// its errors apart ([`CidrError`]), which a crate's single parse error
/// does not, and matching is one mask and one compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Range {
    V4 { net: u32, mask: u32 },
    V6 { net: u128, mask: u128 },
}

impl Range {
    fn parse(text: &str) -> Result<Range, CidrError> {
        let (addr, bits) = match text.split_once('/') {
            Some((addr, bits)) => (addr, Some(bits)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| CidrError::Malformed(text.to_owned()))?;
        let width = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => width,
            // Digits only: `u32::from_str` would take "+8" too.
            Some(b) if every(b, |c| c.is_ascii_digit()) => b.parse().unwrap_or(u32::MAX),
            Some(_) => return Err(CidrError::Malformed(text.to_owned())),
        };
        if bits > width {
            return Err(CidrError::PrefixTooLong(text.to_owned()));
        }
        // As a 128-bit address: IPv4 in the low 32 bits, mapped or not.
        let (net, mask): (u128, u128) = match addr {
            IpAddr::V4(v4) => (
                u32::from(v4).into(),
                u32::MAX.checked_shl(32 - bits).unwrap_or(0).into(),
            ),
            IpAddr::V6(v6) => (v6.into(), u128::MAX.checked_shl(128 - bits).unwrap_or(0)),
        };
        if net & !mask != 0 {
            return Err(CidrError::HostBitsSet(text.to_owned()));
        }
        Ok(match addr.to_canonical() {
            IpAddr::V4(_) if bits >= 96 || addr.is_ipv4() => Range::V4 {
                net: net as u32,
                mask: mask as u32,
            },
            _ => Range::V6 { net, mask },
        })
    }

    fn contains(self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Range::V4 { net, mask }, IpAddr::V4(a)) => u32::from(a) & mask == net,
            (Range::V6 { net, mask }, IpAddr::V6(a)) => u128::from(a) & mask == net,
            _ => false,
        }
    }
}

impl ClientIp {
    /// The default of [`max_hops`](Self::max_hops): 16 entries, far more
    /// than any real chain of proxies.
    pub const DEFAULT_MAX_HOPS: usize = 16;
    /// The default of [`max_bytes`](Self::max_bytes): 2048 bytes, 16
    /// `Forwarded` elements of over 100 bytes each.
    pub const DEFAULT_MAX_BYTES: usize = 2048;

    /// Trusts the proxies in `trusted`, each a range in CIDR notation
    /// (`"10.0.0.0/8"`, `"fd00::/8"`) or a single address (`"10.0.0.1"`,
    /// as /32, or /128 for IPv6). An empty list trusts no one: the key is
    /// always the peer.
    ///
    /// Errors: the first range that is malformed, whose prefix length is
    /// longer than its address, or with bits set past its prefix
    /// (`"10.0.0.1/8"`); see [`CidrError`].
    pub fn new<I>(trusted: I) -> Result<ClientIp, CidrError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let trusted = trusted
            .into_iter()
            .map(|r| Range::parse(r.as_ref().trim()))
            .collect::<Result<_, _>>()?;
        Ok(ClientIp {
            trusted,
            header: ProxyHeader::default(),
            ipv6_prefix: 128,
            max_hops: Self::DEFAULT_MAX_HOPS,
            max_bytes: Self::DEFAULT_MAX_BYTES,
        })
    }

    /// Reads the chain from `header` (`X-Forwarded-For` by default).
    pub fn header(mut self, header: ProxyHeader) -> Self {
        self.header = header;
        self
    }

    /// Keys IPv6 addresses by their first `bits` bits (at most 128; 64 is a
    /// usual choice), as [`PeerIp::ipv6_prefix`](crate::PeerIp::ipv6_prefix)
    /// does; IPv4 addresses stay whole. Trust is judged on whole addresses.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits.min(128);
        self
    }

    /// Examines at most `hops` entries of the header (empty ones not
    /// counted); a walk that needs more keys on the peer. Default
    /// [`DEFAULT_MAX_HOPS`](Self::DEFAULT_MAX_HOPS).
    pub fn max_hops(mut self, hops: usize) -> Self {
        self.max_hops = hops;
        self
    }

    /// Reads at most `bytes` bytes of the header, from its end (all its
    /// lines together, separators included); a walk that needs more keys
    /// on the peer. Default [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES).
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Whether `ip` (or, IPv4-mapped, its IPv4 address) is in a trusted
    /// range.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted.iter().any(|r| r.contains(ip))
    }

    /// The client's address from the header, walked right to left from a
    /// trusted peer; `None` where the key is the peer.
    fn walk(&self, headers: &HeaderMap) -> Option<IpAddr> {
        let name = match self.header {
            ProxyHeader::XForwardedFor => &X_FORWARDED_FOR,
            ProxyHeader::Forwarded => &FORWARDED,
        };
        let (mut budget, mut hops, mut leftmost) = (self.max_bytes, 0, None);
        for line in headers.get_all(name).iter().rev() {
            let mut rest = Some(line.as_bytes());
            while let Some(line) = rest {
                let (before, elem) = last_element(line, &mut budget)?;
                rest = before;
                let elem = elem.trim_ascii();
                if elem.is_empty() {
                    continue;
                }
                hops += 1;
                if hops > self.max_hops {
                    return None;
                }
                let node = match self.header {
                    ProxyHeader::XForwardedFor => elem,
                    ProxyHeader::Forwarded => forwarded_for(elem)?,
                };
                let ip = parse_node(node)?;
                if !self.is_trusted(ip) {
                    return Some(ip);
                }
                leftmost = Some(ip);
            }
        }
        leftmost
    }
}

impl KeyExtractor for ClientIp {
    type Key = IpAddr;
    type Ref = IpAddr;

    fn extract<'a>(&self, parts: &'a Parts) -> Option<Cow<'a, IpAddr>> {
        let peer = peer_addr(&parts.extensions)?;
        let ip = match self.is_trusted(peer) {
            true => self.walk(&parts.headers).unwrap_or(peer),
            false => peer,
        };
        Some(Cow::Owned(ip_key(ip, self.ipv6_prefix)))
    }
}

/// Splits the last list element off `line`: `(what is left of it, or None
/// at the line's start; the element)`, reading at most `budget` bytes
/// (charged for what it reads). Commas inside a quoted string do not
/// split. `None` if the budget runs out first or a quote is left open.
///
/// Read right to left, a `"` outside a quoted string closes one; inside,
/// it opens it unless it follows a `\` (a quoted-pair): exact for well-formed
/// lists, which is all a walk ever reads before it stops (the entries of
/// trusted proxies and the client's, as a trusted proxy wrote it).
fn last_element<'h>(line: &'h [u8], budget: &mut usize) -> Option<(Option<&'h [u8]>, &'h [u8])> {
    let floor = line.len().saturating_sub(*budget);
    let (mut i, mut quoted) = (line.len(), false);
    while i > floor {
        i -= 1;
        match line[i] {
            b'"' if !quoted => quoted = true,
            b'"' if i == 0 || line[i - 1] != b'\\' => quoted = false,
            b',' if !quoted => {
                *budget -= line.len() - i;
                return Some((Some(&line[..i]), &line[i + 1..]));
            }
            _ => {}
        }
    }
    if i > 0 || quoted {
        return None;
    }
    *budget -= line.len();
    Some((None, line))
}

/// The value of a `Forwarded` element's `for` parameter, unquoted (a
/// quoted-pair left escaped: no address has one). `None` if the element is
/// malformed, has no `for` or has two.
fn forwarded_for(mut elem: &[u8]) -> Option<&[u8]> {
    let mut found = None;
    loop {
        elem = elem.trim_ascii_start();
        if let Some(more) = elem.strip_prefix(b";") {
            elem = more; // an empty pair
            continue;
        }
        if elem.is_empty() {
            return found;
        }
        let eq = elem.iter().position(|&b| b == b'=')?;
        let name = elem[..eq].trim_ascii();
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return None;
        }
        let rest = elem[eq + 1..].trim_ascii_start();
        let (value, after) = match rest.strip_prefix(b"\"") {
            Some(q) => {
                let end = closing_quote(q)?;
                (&q[..end], &q[end + 1..])
            }
            None => {
                let end = rest.iter().position(|&b| b == b';').unwrap_or(rest.len());
                (rest[..end].trim_ascii_end(), &rest[end..])
            }
        };
        if name.eq_ignore_ascii_case(b"for") && found.replace(value).is_some() {
            return None;
        }
        elem = after.trim_ascii_start();
        if !elem.is_empty() && elem[0] != b';' {
            return None;
        }
    }
}

/// The index of the `"` that closes a quoted string whose content starts
/// `q`, skipping quoted-pairs.
fn closing_quote(q: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < q.len() {
        match q[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// A token character (RFC 9110 §5.6.2).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// An entry's address: `a.b.c.d`, `a.b.c.d:port`, an IPv6 address bare or
/// in brackets, `[v6]:port`. A port is decimal or obfuscated (`_name`,
/// RFC 7239). `None` for anything else (`unknown`, `_hidden`, garbage).
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(node).ok()?;
    // One parser per form: IPv4 has at most one colon (its port's).
    let (ip, port) = if let Some(v6) = s.strip_prefix('[') {
        let (ip, port) = v6.split_once(']')?;
        (IpAddr::V6(ip.parse::<Ipv6Addr>().ok()?), port)
    } else if s.bytes().filter(|&b| b == b':').nth(1).is_some() {
        (IpAddr::V6(s.parse().ok()?), "")
    } else {
        let (ip, port) = s.split_at(s.find(':').unwrap_or(s.len()));
        (IpAddr::V4(ip.parse().ok()?), port)
    };
    let ok = match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(p) => match p.strip_prefix('_') {
            Some(obf) => every(obf, |b| b.is_ascii_alphanumeric() || b"._-".contains(&b)),
            None => p.len() <= 5 && every(p, |b| b.is_ascii_digit()) && p.parse::<u16>().is_ok(),
        },
    };
    ok.then_some(ip)
}

/// `s` is not empty and each of its bytes passes `f`.
fn every(s: &str, f: impl Fn(u8) -> bool) -> bool {
    !s.is_empty() && s.bytes().all(f)
}
