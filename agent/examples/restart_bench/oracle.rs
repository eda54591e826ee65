//! The series `docker_oracle` and `docker_oracle_precreated`: the bench restarts the container
//! itself on the engine's `die` event, the floor for any restarter outside the engine.

use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::engine::{container_pid, short};
use crate::events::DockerEvents;
use crate::{since_ns, wall_ns, BENCH_LABEL, IMAGE_REPO, IMAGE_TAG, RESTART_TIMEOUT};

/// Series `docker_oracle` and `docker_oracle_precreated`: the floor for a restarter outside the
/// engine. The bench restarts the container itself on the engine's `die` event, with the API
/// calls the agent makes (create, start); `precreated` creates the replacement before the kill
/// and only starts it after the `die`.
pub struct OracleRestarter {
    docker: bollard::Docker,
    label: String,
    marker: u64,
    network: String,
    precreated: bool,
    /// Starts and deaths of this restarter's containers.
    stream: OracleEvents,
    /// The container that runs now.
    current: String,
    /// The replacement created in advance (`precreated` only).
    standby: Option<String>,
}

impl OracleRestarter {
    pub async fn start(
        marker: u64,
        network: &str,
        precreated: bool,
    ) -> anyhow::Result<OracleRestarter> {
        let docker = bollard::Docker::connect_with_local_defaults()?
            .negotiate_version()
            .await?;
        let label = match precreated {
            false => format!("{BENCH_LABEL}={marker}-oracle"),
            true => format!("{BENCH_LABEL}={marker}-precreated"),
        };
        // The request goes out when the stream is first polled, so it asks from now on; once
        // the first start arrives on it, it is live.
        let stream = OracleEvents::subscribe(&docker, &label, wall_ns());
        let mut oracle = OracleRestarter {
            docker,
            label,
            marker,
            network: network.to_string(),
            precreated,
            stream,
            current: String::new(),
            standby: None,
        };
        oracle.current = oracle.create().await?;
        oracle.run(&oracle.current).await?;
        oracle.stream.next_of(&oracle.current, "start").await?;
        oracle.prepare().await?;
        Ok(oracle)
    }

    pub fn series(&self) -> &'static str {
        match self.precreated {
            false => "docker_oracle",
            true => "docker_oracle_precreated",
        }
    }

    /// Kills the container's main process and restarts it on its `die`; ms until the
    /// replacement's start event (as the `docker events` of the other series report it).
    pub async fn kill(&mut self, round: &str, events: &DockerEvents) -> anyhow::Result<f64> {
        let pid = container_pid(&self.current)?;
        let killed_ns = wall_ns();
        kill(Pid::from_raw(pid), Signal::SIGKILL).context("kill -9 of the container's process")?;
        self.stream.next_of(&self.current, "die").await?;
        let next = match self.standby.take() {
            Some(id) => id,
            None => self.create().await?,
        };
        self.run(&next).await?;
        let started = events.wait(|e| e.id == next && e.is_start(), RESTART_TIMEOUT)?;
        let ms = since_ns(killed_ns, started.time_ns);
        eprintln!(
            "{} {round}: killed pid {pid} of {}, {} started after {ms:.1} ms",
            self.series(),
            short(&self.current),
            short(&next)
        );
        self.stream.next_of(&next, "start").await?;
        // The dead container goes after its replacement started, as the agent removes it.
        let options = bollard::query_parameters::RemoveContainerOptionsBuilder::new()
            .force(true)
            .build();
        let _ = self
            .docker
            .remove_container(&self.current, Some(options))
            .await;
        self.current = next;
        self.prepare().await?;
        Ok(ms)
    }

    /// Creates the next replacement in advance (`precreated` only), a pause before the kill.
    async fn prepare(&mut self) -> anyhow::Result<()> {
        if self.precreated {
            self.standby = Some(self.create().await?);
        }
        Ok(())
    }

    /// What `docker run -d --cpus 0.1 --memory 64m --network NETWORK --label LABEL IMAGE sleep
    /// MARKER` creates.
    async fn create(&self) -> anyhow::Result<String> {
        let (key, value) = self.label.split_once('=').expect("key=value");
        let body = bollard::models::ContainerCreateBody {
            image: Some(format!("{IMAGE_REPO}:{IMAGE_TAG}")),
            cmd: Some(vec!["sleep".to_string(), self.marker.to_string()]),
            labels: Some([(key.to_string(), value.to_string())].into()),
            host_config: Some(bollard::models::HostConfig {
                nano_cpus: Some(100_000_000),
                memory: Some(64 << 20),
                network_mode: Some(self.network.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = None::<bollard::query_parameters::CreateContainerOptions>;
        let created = self
            .docker
            .create_container(options, body)
            .await
            .context("create container")?;
        Ok(created.id)
    }

    async fn run(&self, id: &str) -> anyhow::Result<()> {
        self.docker
            .start_container(id, None)
            .await
            .context("start container")
    }
}

/// An oracle's event subscription.
struct OracleEvents(
    std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                Item = Result<bollard::models::EventMessage, bollard::errors::Error>,
            >,
        >,
    >,
);

impl OracleEvents {
    /// Starts and deaths of the containers labelled `label`, from `since_ns` on.
    fn subscribe(docker: &bollard::Docker, label: &str, since_ns: u128) -> OracleEvents {
        let filters = std::collections::HashMap::from([
            ("label".to_string(), vec![label.to_string()]),
            ("type".to_string(), vec!["container".to_string()]),
            (
                "event".to_string(),
                vec!["start".to_string(), "die".to_string()],
            ),
        ]);
        let since = format!(
            "{}.{:09}",
            since_ns / 1_000_000_000,
            since_ns % 1_000_000_000
        );
        let options = bollard::query_parameters::EventsOptionsBuilder::new()
            .since(&since)
            .filters(&filters)
            .build();
        OracleEvents(Box::pin(docker.events(Some(options))))
    }

    /// Waits for the engine's `action` event of container `id`.
    async fn next_of(&mut self, id: &str, action: &str) -> anyhow::Result<()> {
        use futures_util::StreamExt;
        let wait = async {
            while let Some(event) = self.0.next().await {
                let event = event.context("docker events")?;
                let of = event.actor.as_ref().and_then(|a| a.id.as_deref());
                if of == Some(id) && event.action.as_deref() == Some(action) {
                    return Ok(());
                }
            }
            bail!("the engine closed the event stream")
        };
        let late = || {
            format!(
                "no {action} event of {} within {RESTART_TIMEOUT:?}",
                short(id)
            )
        };
        tokio::time::timeout(RESTART_TIMEOUT, wait)
            .await
            .with_context(late)?
    }
}
