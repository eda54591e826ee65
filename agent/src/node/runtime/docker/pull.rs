//! Image pulls through the engine (`POST /images/create?fromImage=`), once per image at a time.
//!
//! A start that needs an image ([`PullPolicy`]: `always`, or `if-not-present` and the engine
//! answered 404) asks [`Pulls::pull`]. Concurrent starts of one reference on this host share one
//! pull (single flight: the first starts it in its own task, the others wait for its outcome),
//! and each reports its replica as pulling, with the bytes done over the layers the engine has
//! sized, for `status`. A failed pull is remembered per reference: until its backoff (5 s,
//! doubling to 5 min, reset by a success) has passed, a start gets the same failure without the
//! registry being asked again, so many replicas, or a restart loop, never make a pull storm.
//! The reconciler's own start backoff comes on top.
//!
//! Credentials come from [`RegistryAuth`]; the engine gets them in its `X-Registry-Auth` header,
//! and they appear in no message.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::auth::RegistryAuth;
use super::body::{engine_error, error_chain};
use crate::core::instance::{PullProgress, ReplicaId};
use crate::core::spec::{ContainerSpec, ImageRef, PullPolicy};
use crate::node::runtime::RuntimeError;

/// First wait after a failed pull of a reference before the registry is asked again.
pub const PULL_BACKOFF_INITIAL: Duration = Duration::from_secs(5);
/// Longest wait between pulls of a reference that keeps failing.
pub const PULL_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A pull whose engine stream says nothing for this long is abandoned (as a failure).
pub const PULL_STALL: Duration = Duration::from_secs(120);
/// Most references whose failure is remembered (the oldest is forgotten first).
const FAILURES_MAX: usize = 1024;
/// Most layers whose progress is tracked per pull (an image has tens).
const LAYERS_MAX: usize = 512;

/// How far one pull has come, and how it ended.
#[derive(Clone, Debug, Default)]
struct Flight {
    done_bytes: u64,
    total_bytes: u64,
    /// `Some` once over: `Err` carries the engine's reason.
    outcome: Option<Result<(), String>>,
}

/// A reference that failed to pull, and when it may be tried again.
#[derive(Clone, Debug)]
struct Failure {
    reason: String,
    at: Instant,
    attempts: u32,
}

impl Failure {
    fn retry_at(&self) -> Instant {
        let doublings = self.attempts.saturating_sub(1).min(16);
        self.at + (PULL_BACKOFF_INITIAL * 2u32.pow(doublings)).min(PULL_BACKOFF_MAX)
    }
}

#[derive(Default)]
struct State {
    flights: HashMap<String, watch::Receiver<Flight>>,
    failures: HashMap<String, Failure>,
    /// The starts waiting on a pull, by replica, for `status`.
    waiting: BTreeMap<ReplicaId, PullProgress>,
}

/// This host's pulls: in flight, failed recently, and who waits for them.
pub(crate) struct Pulls {
    auth: Option<Arc<RegistryAuth>>,
    state: Mutex<State>,
    /// Pulls sent to the engine since the runtime was made (tests count them).
    attempts: std::sync::atomic::AtomicU64,
}

impl Pulls {
    pub(crate) fn new(auth: Option<Arc<RegistryAuth>>) -> Arc<Pulls> {
        Arc::new(Pulls {
            auth,
            state: Mutex::new(State::default()),
            attempts: Default::default(),
        })
    }

    /// Whether a start of `spec` must pull before creating its container (`always`); with
    /// `if-not-present` it pulls only after the engine answered that the image is missing.
    pub(crate) fn pull_first(spec: &ContainerSpec) -> bool {
        spec.pull == PullPolicy::Always
    }

    /// Whether a start of `spec` may pull once the image turned out missing.
    pub(crate) fn may_pull(spec: &ContainerSpec) -> bool {
        spec.pull != PullPolicy::Never
    }

    /// The replicas whose start waits for a pull, with its progress.
    pub(crate) fn waiting(&self) -> BTreeMap<ReplicaId, PullProgress> {
        self.state.lock().expect("pulls lock").waiting.clone()
    }

    /// Pulls sent to the engine so far.
    pub(crate) fn attempts(&self) -> u64 {
        self.attempts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes sure the engine has `image`, for `replica`'s start: joins a pull in flight, starts
    /// one, or repeats a recent failure while its backoff lasts.
    pub(crate) async fn pull(
        self: &Arc<Self>,
        docker: &Docker,
        image: &str,
        replica: &ReplicaId,
    ) -> Result<(), RuntimeError> {
        let mut flight = {
            let mut state = self.state.lock().expect("pulls lock");
            match state.flights.get(image) {
                Some(flight) => flight.clone(),
                None => {
                    if let Some(failed) = state.failures.get(image) {
                        let now = Instant::now();
                        if now < failed.retry_at() {
                            return Err(failed_recently(image, failed, now));
                        }
                    }
                    let flight = self.launch(docker.clone(), image.to_string());
                    state.flights.insert(image.to_string(), flight.clone());
                    flight
                }
            }
        };
        let _waiting = Waiting::new(self, replica, image);
        loop {
            let now = flight.borrow_and_update().clone();
            if let Some(outcome) = now.outcome {
                return outcome.map_err(|reason| RuntimeError::PullFailed {
                    image: image.to_string(),
                    reason,
                });
            }
            self.report(replica, image, &now);
            if flight.changed().await.is_err() {
                // The pull task ended without an outcome: it panicked or was aborted.
                return Err(RuntimeError::PullFailed {
                    image: image.to_string(),
                    reason: "the pull ended without an answer from the engine".into(),
                });
            }
        }
    }

    fn report(&self, replica: &ReplicaId, image: &str, flight: &Flight) {
        let mut state = self.state.lock().expect("pulls lock");
        state.waiting.insert(
            replica.clone(),
            PullProgress {
                image: image.to_string(),
                done_bytes: flight.done_bytes,
                total_bytes: flight.total_bytes,
            },
        );
    }

    /// Starts the pull in its own task, so that it completes (and is remembered) even if the
    /// start that asked for it goes away.
    fn launch(self: &Arc<Self>, docker: Docker, image: String) -> watch::Receiver<Flight> {
        let (tx, rx) = watch::channel(Flight::default());
        let credentials = self.auth.as_ref().and_then(|a| a.for_image(&image));
        self.attempts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pulls = self.clone();
        tokio::spawn(async move {
            let outcome = run(&docker, &image, credentials, &tx).await;
            {
                let mut state = pulls.state.lock().expect("pulls lock");
                state.flights.remove(&image);
                match &outcome {
                    Ok(()) => {
                        state.failures.remove(&image);
                    }
                    Err(reason) => remember(&mut state.failures, &image, reason),
                }
            }
            match &outcome {
                Ok(()) => tracing::info!(%image, "image pulled"),
                Err(reason) => tracing::warn!(%image, %reason, "image pull failed"),
            }
            tx.send_modify(|f| f.outcome = Some(outcome));
        });
        rx
    }
}

/// Takes a replica off the waiting list when its start stops waiting, however it stops.
struct Waiting<'a> {
    pulls: &'a Pulls,
    replica: ReplicaId,
}

impl<'a> Waiting<'a> {
    fn new(pulls: &'a Pulls, replica: &ReplicaId, image: &str) -> Self {
        pulls.report(replica, image, &Flight::default());
        Waiting {
            pulls,
            replica: replica.clone(),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = self.pulls.state.lock().expect("pulls lock");
        state.waiting.remove(&self.replica);
    }
}

fn failed_recently(image: &str, failed: &Failure, now: Instant) -> RuntimeError {
    let wait = failed.retry_at().saturating_duration_since(now);
    RuntimeError::PullFailed {
        image: image.to_string(),
        reason: format!(
            "{} ({} failed attempt(s); the next pull of this image is in {} s at the earliest)",
            failed.reason,
            failed.attempts,
            wait.as_secs().max(1)
        ),
    }
}

fn remember(failures: &mut HashMap<String, Failure>, image: &str, reason: &str) {
    let attempts = failures.get(image).map_or(0, |f| f.attempts) + 1;
    if failures.len() >= FAILURES_MAX && !failures.contains_key(image) {
        let oldest = failures
            .iter()
            .min_by_key(|(_, f)| f.at)
            .map(|(k, _)| k.clone());
        if let Some(oldest) = oldest {
            failures.remove(&oldest);
        }
    }
    let failure = Failure {
        reason: reason.to_string(),
        at: Instant::now(),
        attempts,
    };
    failures.insert(image.to_string(), failure);
}

/// One pull, start to end: the engine's stream, its progress into `tx`, its error as the reason.
async fn run(
    docker: &Docker,
    image: &str,
    credentials: Option<bollard::auth::DockerCredentials>,
    tx: &watch::Sender<Flight>,
) -> Result<(), String> {
    let reference = ImageRef::parse(image).map_err(|e| format!("image {e}"))?;
    // An untagged reference means `latest`; with no tag at all the engine would pull every tag.
    let mut options = CreateImageOptionsBuilder::default().from_image(image);
    if reference.tag.is_none() && reference.digest.is_none() {
        options = options.tag("latest");
    }
    let mut stream = docker.create_image(Some(options.build()), None, credentials);
    let mut layers: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut last_sent = Instant::now();
    loop {
        let step = match tokio::time::timeout(PULL_STALL, stream.next()).await {
            Err(_) => {
                return Err(format!(
                    "the engine reported no progress for {} s",
                    PULL_STALL.as_secs()
                ))
            }
            Ok(None) => return Ok(()),
            Ok(Some(step)) => step,
        };
        let info = step.map_err(|e| reason_of(e, image))?;
        let (Some(id), Some(status)) = (info.id, info.status) else {
            continue;
        };
        let detail = info.progress_detail.unwrap_or_default();
        let total = detail.total.unwrap_or(0).max(0) as u64;
        let current = detail.current.unwrap_or(0).max(0) as u64;
        if layers.len() >= LAYERS_MAX && !layers.contains_key(&id) {
            continue;
        }
        let layer = layers.entry(id).or_default();
        match status.as_str() {
            "Downloading" if total > 0 => *layer = (current.min(total), total),
            "Download complete" | "Pull complete" | "Already exists" => layer.0 = layer.1,
            _ => continue,
        }
        // A few updates a second are plenty for `status`.
        if last_sent.elapsed() >= Duration::from_millis(200) {
            last_sent = Instant::now();
            let (done, total) = layers
                .values()
                .fold((0, 0), |(d, t), (ld, lt)| (d + ld, t + lt));
            tx.send_modify(|f| {
                f.done_bytes = done;
                f.total_bytes = total;
            });
        }
    }
}

/// The engine's reason for a failed pull, as it said it but for the image reference, which the
/// error names already (statuses and issues keep 256 bytes of it: a long reference said twice
/// would push the reason out).
fn reason_of(e: bollard::errors::Error, image: &str) -> String {
    reason_text(e).replace(image, "the image")
}

fn reason_text(e: bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message,
        bollard::errors::Error::DockerStreamError { error } => error,
        other => match engine_error("pull image", other) {
            RuntimeError::EngineUnavailable { detail } => {
                format!("the engine connection failed during the pull: {detail}")
            }
            other => error_chain(&other),
        },
    }
}
