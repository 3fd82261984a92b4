//! The contention report: `cargo run --release` (or `stripecount` with
//! report options).
//!
//! Every implementation (see [`rows`]) is measured at each thread count with
//! all threads sharing ONE instance: the threads are created once, before any
//! timed region (`stripecount_baselines::harness`, the criterion benches'
//! harness too), released together by a barrier, run for a warm-up
//! and then for [`output::SAMPLES`] samples of a fixed time each (the point
//! is their median), each thread counting the operations it completed in
//! batches. The table on standard output gives, per thread
//! count, the ratio to one shared `AtomicU64` at the same thread count and
//! the operations per second. Progress goes to standard error.
//!
//! The default run spreads [`args::DEFAULT_BUDGET`] (40 s) over all points,
//! so it ends in well under a minute on a 2-core machine.

mod args;
mod output;
mod plot;
mod rows;

use args::Options;
use output::{fmt_ops, Point, Report, RowResult};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use stripecount_baselines::harness::{Panicked, Pool};

/// Exit code of a usage error (as clap uses).
const USAGE: u8 = 2;

/// Runs the report with `args` (the command line without the program name).
pub fn run(args: &[String]) -> ExitCode {
    let opts = match Options::parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(USAGE)
            } else {
                ExitCode::SUCCESS // --help, --version
            };
        }
    };
    let all = rows::all();
    if opts.list {
        for r in &all {
            println!("{:<8}  {:<11}  {}", r.group.name(), r.origin.name(), r.name);
        }
        return ExitCode::SUCCESS;
    }
    let selected: Vec<&rows::Row> = all
        .iter()
        .filter(|r| {
            r.is_reference() || opts.only.is_empty() || opts.only.iter().any(|p| r.matches(p))
        })
        .collect();
    if !opts.only.is_empty() && !all.iter().any(|r| opts.only.iter().any(|p| r.matches(p))) {
        eprintln!(
            "error: no row matches --only {:?}; the rows are (see --list):",
            opts.only
        );
        for r in &all {
            eprintln!("  {}", r.name);
        }
        return ExitCode::from(USAGE);
    }

    // Open the output files first: a bad path fails now, not after the run.
    let mut csv = match opts.csv.as_deref().map(File::create).transpose() {
        Ok(f) => f.map(BufWriter::new),
        Err(e) => return fail(&format!("cannot create the CSV file: {e}")),
    };
    if let Some(path) = &opts.svg {
        if let Err(e) = File::create(path) {
            return fail(&format!(
                "cannot create the SVG file {}: {e}",
                path.display()
            ));
        }
    }

    let threads = opts.thread_counts();
    let points = selected.len() * threads.len();
    let duration = opts.duration_per_point(points);
    let warm_up = args::warm_up(duration);
    let mut report = Report {
        threads: threads.clone(),
        duration,
        warm_up,
        cores: args::cores(),
        rows: Vec::new(),
    };
    eprintln!(
        "{} rows x {} thread counts ({:?}); {}; about {:.0} s",
        selected.len(),
        threads.len(),
        threads,
        report.setting(),
        (duration + warm_up).as_secs_f64() * points as f64
    );

    // Every thread is created here, once, outside every timed region.
    let pools: Vec<Pool> = threads.iter().map(|&t| Pool::new(t)).collect();
    let setup = rows::Setup::default();
    let started = Instant::now();
    for (i, row) in selected.iter().enumerate() {
        let mut result = RowResult {
            row,
            points: Vec::new(),
        };
        for pool in &pools {
            let t = pool.threads();
            let plural = if t == 1 { "" } else { "s" };
            eprint!(
                "[{:>2}/{}] {:<42} {t:>3} thread{plural:<1} ",
                i + 1,
                selected.len(),
                row.name,
            );
            let Ok(point) = measure(pool, row, &setup, warm_up, duration) else {
                eprintln!();
                return fail(&format!(
                    "{} panicked with {t} threads (a bug: please report it)",
                    row.name
                ));
            };
            let spread: Vec<String> = point.samples.iter().map(|&x| fmt_ops(x)).collect();
            eprintln!(
                "{:>8} ops/s  (samples {})",
                fmt_ops(point.measured.ops_per_sec()),
                spread.join(" ")
            );
            result.points.push(point);
        }
        report.rows.push(result);
    }
    drop(pools);
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());

    print!("{}", report.table());
    let _ = std::io::stdout().flush();
    if let Some(w) = csv.as_mut() {
        if let Err(e) = report.write_csv(w) {
            return fail(&format!("cannot write the CSV file: {e}"));
        }
    }
    if let Some(path) = &opts.svg {
        if let Err(e) = plot::write_svg(&report, path) {
            return fail(&format!(
                "cannot write the SVG file {}: {e}",
                path.display()
            ));
        }
    }
    ExitCode::SUCCESS
}

/// Measures one point: a fresh instance of `row` shared by the pool's
/// threads, a warm-up, then [`output::SAMPLES`] samples of
/// `duration / SAMPLES`.
fn measure(
    pool: &Pool,
    row: &rows::Row,
    setup: &rows::Setup,
    warm_up: Duration,
    duration: Duration,
) -> Result<Point, Panicked> {
    let job = (row.make)(setup, pool.threads());
    pool.run_for(&job, warm_up)?;
    let samples = (0..output::SAMPLES)
        .map(|_| pool.run_for(&job, duration / output::SAMPLES as u32))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Point::new(pool.threads(), samples))
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::FAILURE
}
