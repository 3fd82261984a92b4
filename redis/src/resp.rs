//! [`Request`]: a Redis request written straight in RESP (an array of
//! bulk strings), so that a batch's thousands of arguments are appended to
//! one buffer without an intermediate value each.

/// A RESP request being written: an array of bulk strings.
pub(crate) struct Request {
    pub(crate) bytes: Vec<u8>,
}

/// `n`'s decimal digits, at the end of a buffer: `(buffer, start)`.
fn digits(mut n: u64) -> ([u8; 20], usize) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    loop {
        i -= 1;
        d[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    (d, i)
}

/// Appends `n` in decimal.
fn decimal(out: &mut Vec<u8>, n: u64) {
    let (d, i) = digits(n);
    out.extend_from_slice(&d[i..]);
}

impl Request {
    pub(crate) fn new(args: usize) -> Request {
        let mut bytes = Vec::with_capacity(64);
        bytes.push(b'*');
        decimal(&mut bytes, args as u64);
        bytes.extend_from_slice(b"\r\n");
        Request { bytes }
    }

    pub(crate) fn arg(&mut self, a: &[u8]) -> &mut Self {
        self.arg2(a, &[])
    }

    /// A bulk string of `a` then `b` (a key name from its prefix and the
    /// key's bytes, without an intermediate buffer).
    pub(crate) fn arg2(&mut self, a: &[u8], b: &[u8]) -> &mut Self {
        self.bytes.push(b'$');
        decimal(&mut self.bytes, (a.len() + b.len()) as u64);
        self.bytes.extend_from_slice(b"\r\n");
        self.bytes.extend_from_slice(a);
        self.bytes.extend_from_slice(b);
        self.bytes.extend_from_slice(b"\r\n");
        self
    }

    /// A bulk string of `n` in decimal (no allocation: a request's numbers
    /// are most of its arguments).
    pub(crate) fn num(&mut self, n: u64) -> &mut Self {
        let (d, i) = digits(n);
        self.arg(&d[i..])
    }

    /// Appends arguments encoded before (`Request::args` of another
    /// request): counted in this one's length by its creator.
    pub(crate) fn raw(&mut self, encoded: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(encoded);
        self
    }

    /// The encoded arguments of a request built only to be appended with
    /// [`raw`](Self::raw): its bytes without the array header.
    pub(crate) fn args(&self) -> &[u8] {
        let header = self
            .bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        &self.bytes[header..]
    }

    /// Appends another request (a pipeline).
    pub(crate) fn then(&mut self, other: &Request) -> &mut Self {
        self.bytes.extend_from_slice(&other.bytes);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_resp_arrays_of_bulk_strings() {
        let mut r = Request::new(3);
        r.arg(b"GET").arg2(b"ns:", b"k").num(1207);
        assert_eq!(r.bytes, b"*3\r\n$3\r\nGET\r\n$4\r\nns:k\r\n$4\r\n1207\r\n");
        let mut d = Vec::new();
        decimal(&mut d, 0);
        decimal(&mut d, u64::MAX);
        assert_eq!(d, b"018446744073709551615");
    }
}
