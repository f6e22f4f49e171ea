//! A local S3-compatible server for the tests: moto's `moto_server`, started on 127.0.0.1 and
//! stopped when dropped; and a server that refuses every request, to count what a client asks.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a server may take to answer after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The server program: `KILN_S3_SERVER`, else `moto_server` on the `PATH`.
pub fn server_program() -> Option<PathBuf> {
    if let Some(program) = std::env::var_os("KILN_S3_SERVER") {
        return Some(PathBuf::from(program));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("moto_server"))
            .find(|candidate| candidate.is_file())
    })
}

/// The server, or `None` (with a note) when none is installed and `KILN_REQUIRE_S3` is not
/// set; with it set, a missing server fails the test.
pub fn start_or_skip(test: &str) -> Option<S3Server> {
    match server_program() {
        Some(program) => Some(S3Server::start(program, free_port())),
        None if std::env::var_os("KILN_REQUIRE_S3").is_some_and(|value| value == "1") => {
            panic!(
                "KILN_REQUIRE_S3=1 but no S3-compatible server: set KILN_S3_SERVER or put moto_server on the PATH (pip install 'moto[server]')"
            )
        }
        None => {
            eprintln!(
                "{test}: skipped, no S3-compatible server (pip install 'moto[server]', or set \
                 KILN_S3_SERVER; KILN_REQUIRE_S3=1 makes this a failure)"
            );
            None
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port on 127.0.0.1")
}

/// Store options that point `object_store`'s S3 client at `endpoint`.
pub fn store_options(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("aws_endpoint", endpoint.to_owned()),
        ("aws_allow_http", "true".to_owned()),
        ("aws_access_key_id", "kiln-test".to_owned()),
        ("aws_secret_access_key", "kiln-test".to_owned()),
        ("aws_region", "us-east-1".to_owned()),
        ("aws_virtual_hosted_style_request", "false".to_owned()),
    ]
}

/// moto checks no signature, but routes a request to S3 by its credential scope.
const UNSIGNED: &str = "AWS4-HMAC-SHA256 Credential=kiln-test/20260101/us-east-1/s3/aws4_request, \
                        SignedHeaders=host, Signature=0";

/// A running moto server (in-memory: a restart loses its objects).
pub struct S3Server {
    program: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl S3Server {
    fn start(program: PathBuf, port: u16) -> Self {
        let mut server = Self {
            program,
            port,
            child: None,
        };
        server.restart();
        server
    }

    /// Starts the server (again) on its port and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new(&self.program)
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("starting {}: {error}", self.program.display()));
        self.child = Some(child);
        let started = Instant::now();
        while self.request("GET", "/", &[]).is_err() {
            assert!(
                started.elapsed() < START_TIMEOUT,
                "{} did not answer on port {} within {START_TIMEOUT:?}",
                self.program.display(),
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Kills the server: requests are refused from now on.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Store options that point `object_store` at this server.
    pub fn options(&self) -> Vec<(&'static str, String)> {
        store_options(&self.endpoint())
    }

    /// Creates a bucket (moto takes unsigned requests).
    pub fn create_bucket(&self, bucket: &str) {
        let status = self.request("PUT", &format!("/{bucket}"), &[]).unwrap();
        assert_eq!(status, 200, "creating bucket {bucket}");
    }

    /// Uploads one object.
    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        let status = self
            .request("PUT", &format!("/{bucket}/{key}"), body)
            .unwrap();
        assert_eq!(status, 200, "uploading {key}");
    }

    /// One HTTP/1.1 request; returns the status code.
    fn request(&self, method: &str, path: &str, body: &[u8]) -> std::io::Result<u16> {
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\n\
             Authorization: {UNSIGNED}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        )?;
        stream.write_all(body)?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer)?;
        let head = String::from_utf8_lossy(&answer[..answer.len().min(64)]).into_owned();
        head.split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {head:?}")))
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An HTTP server on 127.0.0.1 that answers every request `403 Forbidden` (as a store answers
/// credentials it denies) and records each request's first line; stopped when dropped.
pub struct RefusingServer {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RefusingServer {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let requests = Arc::clone(&requests);
            let stopping = Arc::clone(&stopping);
            move || {
                for stream in listener.incoming() {
                    if stopping.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(mut stream) = stream else { continue };
                    refuse(&mut stream, &requests);
                }
            }
        });
        Self {
            port,
            requests,
            stopping,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The first line of every request so far (`HEAD /bucket/key HTTP/1.1`), in order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one request's head (a client keeps the connection open for its next request, so only
/// one is answered per connection), records its first line in `requests`, then answers 403:
/// recorded before the client can see the answer and look.
fn refuse(stream: &mut TcpStream, requests: &Mutex<Vec<String>>) {
    if stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .is_err()
    {
        return;
    }
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let line = String::from_utf8_lossy(&head)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    requests.lock().unwrap().push(line);
    let body = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
    let _ = write!(
        stream,
        "HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
}

impl Drop for RefusingServer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
