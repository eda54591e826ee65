//! The engine's events (`docker events`) of containers starting, dying, joining and leaving
//! networks, read on a thread and kept, with the engine's own timestamps.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// A container's `start` or `die`, or its `connect` to or `disconnect` from a network: the
/// container, the action, the engine's timestamp and the container's labels (none for network
/// events).
#[derive(Clone, Debug)]
pub struct ContainerEvent {
    pub id: String,
    pub action: String,
    pub time_ns: u128,
    pub labels: BTreeMap<String, String>,
}

impl ContainerEvent {
    pub fn is_start(&self) -> bool {
        self.action == "start"
    }
}

/// `docker events` for container starts and deaths and containers joining and leaving networks,
/// read on a thread; every event is kept.
pub struct DockerEvents {
    child: Child,
    rx: mpsc::Receiver<ContainerEvent>,
    seen: std::cell::RefCell<Vec<ContainerEvent>>,
}

impl DockerEvents {
    pub fn start() -> anyhow::Result<DockerEvents> {
        let mut child = Command::new("docker")
            .args(["events", "--format", "{{json .}}"])
            .args(["--filter", "type=container", "--filter", "type=network"])
            .args(["--filter", "event=start", "--filter", "event=die"])
            .args(["--filter", "event=connect", "--filter", "event=disconnect"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("docker events")?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(event) = parse_event(&line) {
                    if tx.send(event).is_err() {
                        return;
                    }
                }
            }
        });
        // The subscription is live once the engine answers it; give it a moment.
        std::thread::sleep(Duration::from_millis(300));
        Ok(DockerEvents {
            child,
            rx,
            seen: Default::default(),
        })
    }

    /// The first event received so far that `pred` accepts.
    pub fn received(&self, pred: impl Fn(&ContainerEvent) -> bool) -> Option<ContainerEvent> {
        self.seen.borrow_mut().extend(self.rx.try_iter());
        self.seen.borrow().iter().find(|e| pred(e)).cloned()
    }

    /// The first event, received so far or within `limit`, that `pred` accepts.
    pub fn wait(
        &self,
        pred: impl Fn(&ContainerEvent) -> bool,
        limit: Duration,
    ) -> anyhow::Result<ContainerEvent> {
        let began = Instant::now();
        loop {
            if let Some(e) = self.seen.borrow().iter().find(|e| pred(e)) {
                return Ok(e.clone());
            }
            let left = limit.saturating_sub(began.elapsed());
            match self.rx.recv_timeout(left) {
                Ok(event) => self.seen.borrow_mut().push(event),
                Err(_) => bail!("no matching container event within {limit:?}"),
            }
        }
    }
}

impl Drop for DockerEvents {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse_event(line: &str) -> Option<ContainerEvent> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let attributes = v["Actor"]["Attributes"].as_object()?;
    let (id, labels) = match v["Type"].as_str() {
        // The actor is the network; the container is an attribute.
        Some("network") => (attributes.get("container")?.as_str()?, BTreeMap::new()),
        _ => {
            let labels = attributes
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect();
            (v["Actor"]["ID"].as_str()?, labels)
        }
    };
    Some(ContainerEvent {
        id: id.to_string(),
        action: v["Action"].as_str()?.to_string(),
        time_ns: u128::from(v["timeNano"].as_u64()?),
        labels,
    })
}
