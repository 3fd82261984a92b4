//! A TCP proxy between nodes and a redis-server that injects faults:
//! cut a request before it reaches Redis, cut the connection after Redis
//! executed a request but before its reply reaches the node, or refuse
//! every connection (an outage).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A one-shot fault, armed for the next request that contains a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Close both sides instead of forwarding the request: Redis never
    /// sees it.
    DropRequest(Vec<u8>),
    /// Forward the request, then close both sides when its reply comes
    /// back instead of forwarding it: Redis executed it, the node never
    /// learns.
    DropReply(Vec<u8>),
}

struct Shared {
    upstream: u16,
    fault: Mutex<Option<Fault>>,
    /// Faults that fired.
    fired: AtomicU64,
    /// Refuse every connection and cut the open ones.
    down: AtomicBool,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// A proxy on a free loopback port to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a proxy port");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared {
            upstream,
            fault: Mutex::new(None),
            fired: AtomicU64::new(0),
            down: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::spawn(move || {
            while !s.stop.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((client, _)) => {
                        if s.down.load(Ordering::Acquire) {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        }
                        let _ = client.set_nonblocking(false);
                        if let Ok(server) = TcpStream::connect(("127.0.0.1", s.upstream)) {
                            pipe(Arc::clone(&s), client, server);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Proxy {
            port,
            shared,
            accept: Some(accept),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Arms a one-shot fault.
    pub fn arm(&self, f: Fault) {
        *self.shared.fault.lock().unwrap() = Some(f);
    }

    /// Faults that fired so far.
    pub fn fired(&self) -> u64 {
        self.shared.fired.load(Ordering::Acquire)
    }

    /// Whether the armed fault is still waiting for its request.
    pub fn armed(&self) -> bool {
        self.shared.fault.lock().unwrap().is_some()
    }

    /// Cuts Redis off (`true`: every open connection is closed and new ones
    /// are refused) or restores it.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::Release);
        if down {
            for c in self.shared.conns.lock().unwrap().drain(..) {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.set_down(true);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// Whether `needle` occurs in `tail ++ chunk` ending inside `chunk` (so
/// bytes of an earlier request alone never match).
fn found(tail: &[u8], chunk: &[u8], needle: &[u8]) -> bool {
    if needle.is_empty() {
        return false;
    }
    let keep = tail.len().min(needle.len() - 1);
    let mut hay = tail[tail.len() - keep..].to_vec();
    hay.extend_from_slice(chunk);
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Pumps one connection both ways, applying the armed fault.
fn pipe(s: Arc<Shared>, client: TcpStream, server: TcpStream) {
    {
        let mut conns = s.conns.lock().unwrap();
        conns.push(client.try_clone().unwrap());
        conns.push(server.try_clone().unwrap());
    }
    let drop_reply = Arc::new(AtomicBool::new(false));
    // Client to server.
    {
        let (s, mut from, mut to) = (
            Arc::clone(&s),
            client.try_clone().unwrap(),
            server.try_clone().unwrap(),
        );
        let drop_reply = Arc::clone(&drop_reply);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            // The end of what came before, so a pattern split across two
            // reads is still found.
            let mut tail: Vec<u8> = Vec::new();
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                let mut fault = s.fault.lock().unwrap();
                match fault.clone() {
                    Some(Fault::DropRequest(p)) if found(&tail, chunk, &p) => {
                        *fault = None;
                        s.fired.fetch_add(1, Ordering::AcqRel);
                        let _ = from.shutdown(Shutdown::Both);
                        let _ = to.shutdown(Shutdown::Both);
                        return;
                    }
                    Some(Fault::DropReply(p)) if found(&tail, chunk, &p) => {
                        *fault = None;
                        drop_reply.store(true, Ordering::Release);
                    }
                    _ => {}
                }
                drop(fault);
                tail.extend_from_slice(chunk);
                let keep = tail.len().saturating_sub(256);
                tail.drain(..keep);
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Both);
        });
    }
    // Server to client.
    {
        let (s, mut from, mut to) = (Arc::clone(&s), server, client);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if drop_reply.swap(false, Ordering::AcqRel) {
                    s.fired.fetch_add(1, Ordering::AcqRel);
                    break;
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        });
    }
}
