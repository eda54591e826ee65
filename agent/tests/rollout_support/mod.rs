//! The client of the zero-downtime test: it finds every replica's endpoints the way a load
//! balancer would (endpoint files in a directory, or the Docker engine's events), requests each of
//! them every 50 ms, and keeps the figures: requests, failures, and the fewest replicas that
//! answered in one round.
//!
//! A failed request is one to an endpoint listed when its round began that did not answer 200.
//! An answering replica is a replica index with at least one endpoint that answered 200 in the
//! round.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Time between the starts of two rounds of requests.
pub const ROUND_INTERVAL: Duration = Duration::from_millis(50);
/// How long one request may take (connect, send, read the whole answer).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// The largest answer read; the workloads answer a line.
const ANSWER_BYTES_MAX: u64 = 4096;
/// The failures kept with their details (the count goes on past it).
const FAILURES_KEPT_MAX: usize = 20;

/// One place to send requests to: a copy of a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The replica index the copy says it serves (file name or container label).
    pub replica: u32,
    pub addr: SocketAddr,
    /// What names the copy: the endpoint file or the container id.
    pub name: String,
    /// The version it serves: from its endpoint file, or its answer when it was admitted.
    pub version: String,
}

/// Where the client learns the endpoints.
pub trait Discovery: Send + 'static {
    /// The endpoints listed now.
    fn endpoints(&mut self) -> Vec<Endpoint>;
}

/// Endpoint files `<workload>-<replica>-<pid>` holding `<port> <version>`, each written by a
/// process once it listens and removed by it before it stops listening. Names starting with `.`
/// are files still being written.
pub struct DirDiscovery {
    pub dir: PathBuf,
}

impl Discovery for DirDiscovery {
    fn endpoints(&mut self) -> Vec<Endpoint> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<Endpoint> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                if name.starts_with('.') {
                    return None;
                }
                let replica = name.rsplit('-').nth(1)?.parse().ok()?;
                let text = std::fs::read_to_string(e.path()).ok()?;
                let mut fields = text.split_whitespace();
                let port: u16 = fields.next()?.parse().ok()?;
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let version = fields.next()?.to_string();
                Some(Endpoint {
                    replica,
                    addr,
                    name,
                    version,
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// The containers of one workload, as a load balancer that follows the engine sees them: a
/// container that starts is a candidate (at its published port for `container_port`), admitted
/// once it answers the balancer's own request (not counted in the figures), and withdrawn as soon
/// as the engine sends it a signal (`kill`: what a stop starts with) or it dies. The container
/// serves on for a while after SIGTERM, so the requests already sent to it are answered.
///
/// Not the engine's health status: the engine runs its own health check on its own schedule
/// (only for exec probes), which may call a new copy healthy up to an interval after Shoal did and
/// after Shoal stopped the old one; a balancer that waited for it would not list the replica
/// for that time although it answers.
pub struct DockerDiscovery {
    copies: Arc<Mutex<BTreeMap<String, Copy>>>,
    events: Child,
    reader: Option<JoinHandle<()>>,
}

/// A running container and whether the balancer admitted it.
struct Copy {
    endpoint: Endpoint,
    admitted: bool,
}

impl DockerDiscovery {
    /// Follows the events of the containers labelled `shoal.workload=<workload>` from now on
    /// (from the start of this second: the engine replays what came before the stream opened).
    pub fn start(workload: &str, container_port: u16) -> DockerDiscovery {
        let now_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let mut events = Command::new("docker")
            .args(["events", "--format", "{{json .}}"])
            .args(["--since", &now_s.to_string()])
            .args(["--filter", "type=container"])
            .args(["--filter", &format!("label=shoal.workload={workload}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run docker events");
        let stdout = events.stdout.take().unwrap();
        let copies = Arc::new(Mutex::new(BTreeMap::new()));
        let shared = copies.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                follow_event(&shared, &line, container_port);
            }
        });
        DockerDiscovery {
            copies,
            events,
            reader: Some(reader),
        }
    }
}

/// Adds or withdraws a container after one event line.
fn follow_event(copies: &Mutex<BTreeMap<String, Copy>>, line: &str, container_port: u16) {
    let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
        return;
    };
    let (Some(action), Some(id)) = (event["Action"].as_str(), event["id"].as_str()) else {
        return;
    };
    match action {
        "start" => {
            let replica = event["Actor"]["Attributes"]["shoal.replica"].as_str();
            let replica = replica.and_then(|r| r.parse().ok());
            let (Some(replica), Some(addr)) = (replica, published_port(id, container_port)) else {
                return;
            };
            let name = id[..12.min(id.len())].to_string();
            let endpoint = Endpoint {
                replica,
                addr,
                name,
                version: String::new(),
            };
            let copy = Copy {
                endpoint,
                admitted: false,
            };
            copies.lock().unwrap().insert(id.to_string(), copy);
        }
        "kill" | "die" | "stop" | "destroy" => {
            copies.lock().unwrap().remove(id);
        }
        _ => {}
    }
}

/// The loopback address where the engine publishes `port` of container `id`.
fn published_port(id: &str, port: u16) -> Option<SocketAddr> {
    let out = Command::new("docker")
        .args(["port", id, &format!("{port}/tcp")])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let host_port = text
        .lines()
        .next()?
        .rsplit(':')
        .next()?
        .trim()
        .parse()
        .ok()?;
    Some(SocketAddr::from(([127, 0, 0, 1], host_port)))
}

impl Discovery for DockerDiscovery {
    fn endpoints(&mut self) -> Vec<Endpoint> {
        // Candidates are tried without the lock, so a withdrawal is never held up by them.
        let candidates: Vec<(String, SocketAddr)> = self
            .copies
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, c)| !c.admitted)
            .map(|(id, c)| (id.clone(), c.endpoint.addr))
            .collect();
        let answered: Vec<(String, Answer)> = candidates
            .into_iter()
            .filter_map(|(id, addr)| get(addr).ok().map(|answer| (id, answer)))
            .collect();
        let mut copies = self.copies.lock().unwrap();
        for (id, answer) in answered {
            if let Some(copy) = copies.get_mut(&id) {
                copy.admitted = true;
                copy.endpoint.version = answer.version;
            }
        }
        copies
            .values()
            .filter(|c| c.admitted)
            .map(|c| c.endpoint.clone())
            .collect()
    }
}

impl Drop for DockerDiscovery {
    fn drop(&mut self) {
        let _ = self.events.kill();
        let _ = self.events.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// What an endpoint answered: the version and replica its body names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub version: String,
    pub replica: u32,
}

/// `GET /` over HTTP/1.0: the answer when the status is 200 and the body names a version and a
/// replica (`version=V replica=R ...`), the reason otherwise.
pub fn get(addr: SocketAddr) -> Result<Answer, String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(REQUEST_TIMEOUT)).unwrap();
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: zero-downtime\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = String::new();
    stream
        .take(ANSWER_BYTES_MAX)
        .read_to_string(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let status = answer.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("status line {status:?}"));
    }
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let field = |key: &str| {
        body.split_whitespace()
            .find_map(|w| w.strip_prefix(key).map(str::to_string))
    };
    match (
        field("version="),
        field("replica=").and_then(|r| r.parse().ok()),
    ) {
        (Some(version), Some(replica)) => Ok(Answer { version, replica }),
        _ => Err(format!("200 without a version and replica: {body:?}")),
    }
}

/// One request that failed.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Since the client started.
    pub at: Duration,
    pub endpoint: Endpoint,
    pub reason: String,
}

/// One round: each listed endpoint and what it answered.
#[derive(Clone, Debug, Default)]
pub struct Round {
    /// Since the client started.
    pub at: Duration,
    pub answers: Vec<(Endpoint, Result<Answer, String>)>,
}

impl Round {
    /// Replica indexes with an endpoint that answered.
    pub fn answering(&self) -> BTreeSet<u32> {
        self.answers
            .iter()
            .filter(|(_, a)| a.is_ok())
            .map(|(e, _)| e.replica)
            .collect()
    }

    /// Whether exactly one endpoint per replica `0..replicas` is listed and each answered
    /// `version`: the update is over, as a client sees it.
    pub fn all_at(&self, version: &str, replicas: u32) -> bool {
        let replicas_seen: BTreeSet<u32> = self.answers.iter().map(|(e, _)| e.replica).collect();
        self.answers.len() == replicas as usize
            && replicas_seen == (0..replicas).collect()
            && self.answers.iter().all(|(e, a)| {
                a.as_ref()
                    .is_ok_and(|a| a.version == version && a.replica == e.replica)
            })
    }
}

/// What the client saw.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub rounds: u64,
    pub requests: u64,
    pub failed: u64,
    /// The first failures, in order.
    pub failures: Vec<Failure>,
    /// The fewest answering replicas in a round, and the first round with that few.
    pub min_answering: Option<(usize, Round)>,
    /// The most endpoints listed in a round (more than the replicas: a surge).
    pub max_listed: usize,
    pub last: Round,
    /// Since the client started: rounds that began before are not counted.
    pub counted_from: Duration,
}

impl Figures {
    fn record(&mut self, round: Round) {
        if round.at < self.counted_from {
            return;
        }
        self.rounds += 1;
        self.max_listed = self.max_listed.max(round.answers.len());
        self.requests += round.answers.len() as u64;
        for (endpoint, answer) in &round.answers {
            if let Err(reason) = answer {
                self.failed += 1;
                if self.failures.len() < FAILURES_KEPT_MAX {
                    self.failures.push(Failure {
                        at: round.at,
                        endpoint: endpoint.clone(),
                        reason: reason.clone(),
                    });
                }
            }
        }
        let answering = round.answering().len();
        if self
            .min_answering
            .as_ref()
            .is_none_or(|(n, _)| answering < *n)
        {
            self.min_answering = Some((answering, round.clone()));
        }
        self.last = round;
    }
}

/// The client: a thread running rounds until stopped.
pub struct Client {
    pub started: Instant,
    figures: Arc<Mutex<Figures>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Client {
    pub fn start(mut discovery: impl Discovery) -> Client {
        let started = Instant::now();
        let figures = Arc::new(Mutex::new(Figures::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopping) = (figures.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::SeqCst) {
                let began = Instant::now();
                let answers = discovery
                    .endpoints()
                    .into_iter()
                    .map(|e| {
                        let answer = get(e.addr);
                        (e, answer)
                    })
                    .collect();
                let at = began - started;
                shared.lock().unwrap().record(Round { at, answers });
                std::thread::sleep(ROUND_INTERVAL.saturating_sub(began.elapsed()));
            }
        });
        Client {
            started,
            figures,
            stop,
            thread: Some(thread),
        }
    }

    /// The figures so far.
    pub fn figures(&self) -> Figures {
        self.figures.lock().unwrap().clone()
    }

    /// Forgets the figures so far: only the rounds that begin from now on are counted.
    pub fn reset(&self) {
        *self.figures.lock().unwrap() = Figures {
            counted_from: self.started.elapsed(),
            ..Figures::default()
        };
    }

    /// Stops the rounds and returns the figures.
    pub fn finish(mut self) -> Figures {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("client thread");
        }
        self.figures()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
