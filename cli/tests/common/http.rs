//! A file server on the loopback address for the data-fetch tests: serves the files under a
//! folder over HTTP/1.1 (one request per connection), honours `Range: bytes=A-B`, logs every
//! request, and injects faults: cut a file's next response short, or serve a file with one
//! byte changed. It stops when dropped, after 10 minutes, or after 1,000 connections.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The path asked for, without the leading `/`.
    pub path: String,
    /// The first byte of the `Range` header, when one was sent.
    pub range_start: Option<u64>,
}

/// What the server does wrong, by path.
#[derive(Debug, Default)]
pub struct Faults {
    /// The next response for the path sends its headers and only this many bytes of its body.
    pub cut_once: HashMap<String, usize>,
    /// The path is served with its first byte changed.
    pub corrupt: HashSet<String>,
}

/// The running server.
pub struct Server {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    log: Arc<Mutex<Vec<Request>>>,
    /// The faults to inject.
    pub faults: Arc<Mutex<Faults>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Serves the files under `root` on a free loopback port.
    pub fn start(root: &Path) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let faults = Arc::new(Mutex::new(Faults::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (root, l, f, s) = (
            root.to_path_buf(),
            log.clone(),
            faults.clone(),
            stop.clone(),
        );
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(600);
            let mut served = 0;
            while !s.load(Ordering::Relaxed) && Instant::now() < deadline && served < 1000 {
                match listener.accept() {
                    Ok((stream, _)) => {
                        served += 1;
                        let _ = answer(stream, &root, &l, &f);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Server {
            url,
            log,
            faults,
            stop,
            thread: Some(thread),
        }
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request on `stream`.
fn answer(
    mut stream: TcpStream,
    root: &Path,
    log: &Mutex<Vec<Request>>,
    faults: &Mutex<Faults>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let path = first
        .split_whitespace()
        .nth(1)
        .unwrap_or("/")
        .trim_start_matches('/')
        .to_string();
    let mut range: Option<(u64, Option<u64>)> = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("range") {
                let spec = value.trim().trim_start_matches("bytes=");
                if let Some((a, b)) = spec.split_once('-') {
                    range = a.parse().ok().map(|a| (a, b.parse().ok()));
                }
            }
        }
    }
    log.lock().unwrap().push(Request {
        path: path.clone(),
        range_start: range.map(|r| r.0),
    });
    let file = root.join(&path);
    let body = match (path.contains(".."), std::fs::read(&file)) {
        (false, Ok(b)) => b,
        _ => {
            return stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
        }
    };
    let (cut, corrupt) = {
        let mut f = faults.lock().unwrap();
        (f.cut_once.remove(&path), f.corrupt.contains(&path))
    };
    let mut body = body;
    if corrupt {
        body[0] ^= 0x01;
    }
    let len = body.len() as u64;
    let (status, start, end) = match range {
        Some((a, _)) if a >= len => {
            return stream.write_all(
                format!(
                    "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{len}\r\n\
                     Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
        }
        Some((a, b)) => ("206 Partial Content", a, b.unwrap_or(len - 1).min(len - 1)),
        None => ("200 OK", 0, len - 1),
    };
    let part = &body[start as usize..=end as usize];
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        part.len()
    );
    if range.is_some() {
        head.push_str(&format!("Content-Range: bytes {start}-{end}/{len}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    let sent = cut.unwrap_or(part.len()).min(part.len());
    stream.write_all(&part[..sent])?;
    stream.flush()?;
    stream.shutdown(std::net::Shutdown::Both)
}
