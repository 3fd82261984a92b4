//! `hotkeys --threads N`: the reader hands each key's records to one worker
//! (a hash of the key), in batches, so a key's records stay in order.
//!
//! A barrier at each new slice of stream time keeps the output independent
//! of the thread count: every record before the first one of a newer slice
//! is counted before it, so the workers meet the detector's ring of slices
//! (`stripecount`'s per-key engine drops adds older than the newest slice's
//! window, and opens a slice by dropping the one a window older) exactly as
//! one thread would.

use super::{ns, write_hot, write_top, Detect, KeyRef, Opts, Reader};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

/// Bytes of records a batch holds before it is sent to its worker.
const BATCH_BYTES: usize = 64 * 1024;

/// A batch: records `millis (8 bytes LE) | key length (4 bytes LE) | key`.
struct Batch {
    records: Vec<u8>,
}

pub(super) fn run_threads<D: Detect>(
    detector: &Arc<D>,
    opts: &Opts,
    reader: &mut Reader,
) -> io::Result<()> {
    let n = opts.threads;
    let hasher = std::hash::RandomState::new();
    // Each worker counts the batches it finished; `sent` counts the ones
    // sent to it.
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let mut sent = vec![0u64; n];
    let mut senders = Vec::with_capacity(n);
    let mut workers = Vec::with_capacity(n);
    for w in 0..n {
        let (tx, rx) = mpsc::sync_channel::<Batch>(4);
        senders.push(tx);
        let (detector, done) = (detector.clone(), done.clone());
        workers.push(std::thread::spawn(move || -> io::Result<()> {
            let mut out = Vec::with_capacity(4096);
            for batch in rx {
                let mut r = &batch.records[..];
                while r.len() >= 12 {
                    let ms = u64::from_le_bytes(r[..8].try_into().expect("8 bytes"));
                    let len = u32::from_le_bytes(r[8..12].try_into().expect("4 bytes")) as usize;
                    let key = &r[12..12 + len];
                    if let Some(sum) = detector.became_hot_at(KeyRef::new(key), ns(ms), 1) {
                        write_hot(&mut out, ms, key, sum)?;
                    }
                    r = &r[12 + len..];
                }
                if !out.is_empty() {
                    io::stdout().lock().write_all(&out)?;
                    out.clear();
                }
                done[w].fetch_add(1, Ordering::Release);
            }
            Ok(())
        }));
    }
    let mut buffers: Vec<Vec<u8>> = (0..n)
        .map(|_| Vec::with_capacity(BATCH_BYTES + 256))
        .collect();
    let window_ms = opts.window.as_millis().min(u64::MAX as u128) as u64;
    let mut last_evict = 0u64;
    let mut newest_slice = 0u64;
    // The slice of a time is its nanoseconds over the slice length.
    let slice_nanos = detector.slice_len().as_nanos() as u64;
    let send = |w: usize, buffers: &mut Vec<Vec<u8>>, sent: &mut [u64]| -> io::Result<()> {
        let records = std::mem::replace(&mut buffers[w], Vec::with_capacity(BATCH_BYTES + 256));
        sent[w] += 1;
        senders[w]
            .send(Batch { records })
            .map_err(|_| io::Error::other("a worker stopped"))
    };
    let mut failed = None;
    reader.for_each_record(Reader::stdin(), |ms, key| {
        // A slice barrier: every record before the first one of a newer
        // slice is counted before that one is, so each worker's adds meet
        // the detector's ring of slices as one thread's would (a key's own
        // records stay in order: they all go to one worker), and the
        // output does not depend on the thread count.
        let slice = ns(ms).as_nanos() / slice_nanos;
        if slice > newest_slice {
            for w in 0..n {
                if !buffers[w].is_empty() {
                    if let Err(e) = send(w, &mut buffers, &mut sent) {
                        failed = Some(e);
                        return Ok(false);
                    }
                }
            }
            for w in 0..n {
                while done[w].load(Ordering::Acquire) < sent[w] {
                    if workers[w].is_finished() {
                        failed = Some(io::Error::other("a worker stopped"));
                        return Ok(false);
                    }
                    std::thread::yield_now();
                }
            }
            newest_slice = slice;
            // Once per window of stream time, with every worker idle:
            // drop the slices that left the window.
            if ms >= last_evict.saturating_add(window_ms) {
                last_evict = ms;
                detector.evict_idle_at(ns(ms));
            }
        }
        let mut h = hasher.build_hasher();
        h.write(key);
        let w = (h.finish() % n as u64) as usize;
        let buf = &mut buffers[w];
        buf.extend_from_slice(&ms.to_le_bytes());
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(key);
        if buf.len() >= BATCH_BYTES {
            if let Err(e) = send(w, &mut buffers, &mut sent) {
                failed = Some(e);
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    for w in 0..n {
        if !buffers[w].is_empty() && failed.is_none() {
            if let Err(e) = send(w, &mut buffers, &mut sent) {
                failed = Some(e);
            }
        }
    }
    drop(senders);
    let mut result = Ok(());
    for worker in workers {
        match worker.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(_) => result = Err(io::Error::other("a worker panicked")),
        }
    }
    if let Some(e) = failed {
        result = result.and(Err(e));
    }
    result?;
    let mut out = BufWriter::new(io::stdout().lock());
    write_top(&mut out, &**detector, reader.newest, opts.top)?;
    out.flush()
}
