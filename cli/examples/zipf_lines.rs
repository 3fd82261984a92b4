//! Writes the input of `scripts/hotkeys-throughput.sh` to stdout: `N`
//! lines `<millis> k:<16 hex digits>`, the benchmarks' Zipf(1.0) stream
//! over 1M keys (`stripecount_baselines::zipf`) at 1,000 lines a
//! millisecond of stream time.
//!
//! ```sh
//! cargo run --release -p stripecount-cli --example zipf_lines -- 20000000 > lines.txt
//! ```

use std::io::{self, BufWriter, Write};
use stripecount_baselines::zipf::ZipfStream;

fn main() -> io::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(20_000_000, |s| s.parse().expect("a line count"));
    let z = ZipfStream::new();
    let mut out = BufWriter::with_capacity(1 << 20, io::stdout().lock());
    for i in 0..n {
        writeln!(out, "{} k:{:016x}", i / 1000, z.key(i))?;
    }
    out.flush()
}
