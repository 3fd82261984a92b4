//! A Prometheus scrape endpoint on the standard library alone: a striped
//! counter and a window of request counts, served at `GET /metrics` with the
//! OpenMetrics content type.
//!
//! ```sh
//! cargo run --example prometheus_server --features prometheus            # serves on 127.0.0.1:9898
//! curl -i http://127.0.0.1:9898/metrics
//! cargo run --example prometheus_server --features prometheus -- --once  # serves one scrape, prints and checks it
//! ```

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use stripecount::prometheus::{ScrapeCollector, CONTENT_TYPE};
use stripecount::{SlidingWindow, StripedCounter};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let once = std::env::args().any(|a| a == "--once");
    let mut registry = Registry::default();
    let scrapes = Counter::<u64, StripedCounter>::default();
    registry.register("scrapes", "Scrapes served", scrapes.clone());
    let requests = Arc::new(SlidingWindow::new(Duration::from_secs(60), 60)?);
    let collector = ScrapeCollector::new();
    collector.sliding_window("http_requests", "HTTP requests", &[], Arc::clone(&requests))?;
    registry.register_collector(Box::new(collector));

    let listener = TcpListener::bind(if once {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:9898"
    })?;
    let addr = listener.local_addr()?;
    eprintln!("serving http://{addr}/metrics");
    if once {
        // Scrape ourselves once, as Prometheus would, and print what came back.
        let client = std::thread::spawn(move || scrape(addr));
        let (stream, _) = listener.accept()?;
        serve(stream, &registry, &scrapes, &requests)?;
        let response = client.join().expect("the scrape thread")?;
        print!("{response}");
        // What a scraper relies on: the status, the OpenMetrics content
        // type, and the body's terminator.
        let served = response.starts_with("HTTP/1.1 200 OK\r\n")
            && response.contains(&format!("\r\nContent-Type: {CONTENT_TYPE}\r\n"))
            && response.ends_with("# EOF\n");
        return if served {
            Ok(())
        } else {
            Err("the scrape was not served as OpenMetrics".into())
        };
    }
    for stream in listener.incoming() {
        serve(stream?, &registry, &scrapes, &requests)?;
    }
    Ok(())
}

/// Answers one request: the scrape body at `/metrics`, 404 elsewhere.
fn serve(
    mut stream: TcpStream,
    registry: &Registry,
    scrapes: &Counter<u64, StripedCounter>,
    requests: &SlidingWindow,
) -> std::io::Result<()> {
    // The request line, then the headers up to the empty line (read whole
    // before answering, so that closing the connection resets nothing).
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    requests.add(1);
    let (status, content_type, body) = if line.starts_with("GET /metrics ") {
        scrapes.inc();
        let mut body = String::new();
        encode(&mut body, registry).map_err(std::io::Error::other)?;
        ("200 OK", CONTENT_TYPE, body)
    } else {
        ("404 Not Found", "text/plain", String::from("not found\n"))
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn scrape(addr: std::net::SocketAddr) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr)?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes())?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    Ok(response)
}
