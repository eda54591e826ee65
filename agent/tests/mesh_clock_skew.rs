//! Clock skew in a mesh of five in-memory agents with paused time: an agent refuses writes while
//! its clock is far from its peers', or when a write would lose to a newer version it refused as
//! too far ahead of its clock; it says so (error, issue, metric), and no acknowledged write is
//! lost.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shoal::agent::mem::{call, mem_setup, start_mem_node};
use shoal::agent::run::{MeshSetup, RunningNode};
use shoal::state::mesh::node::WallClock;
use shoal::state::store_db::MemDisk;
use shoal::transport::gossip::mem::MemNetwork;
use shoal::transport::rpc::TransportStats;
use shoal::wire::api::{ErrorKind, Request, Response, PAGE_ITEMS_MAX};
use shoal_core::reconcile::IssueKind;
use shoal_core::spec::WorkloadSpec;

const BASE_MS: u64 = 1_800_000_000_000;
const NODES: usize = 5;

fn gossip_addr(i: usize) -> SocketAddr {
    setup(i).gossip_addr
}

fn setup(i: usize) -> MeshSetup {
    mem_setup(i, 1, "z")
}

/// A wall clock following tokio's paused clock from `start`, off by an adjustable offset.
fn skewed_clock(start: tokio::time::Instant, offset_ms: Arc<AtomicI64>) -> WallClock {
    Arc::new(move || {
        let true_ms = BASE_MS + start.elapsed().as_millis() as u64;
        true_ms.saturating_add_signed(offset_ms.load(Ordering::Relaxed))
    })
}

fn spec(replicas: u32) -> WorkloadSpec {
    let text = format!(
        "name = \"web\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"9\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    );
    WorkloadSpec::from_toml_str(&text, "test.toml").unwrap()
}

async fn apply(node: &RunningNode, replicas: u32) -> Response {
    let specs = vec![spec(replicas)];
    call(node, Request::Apply { specs }).await
}

/// Every issue, in one page (a few nodes raise a few).
fn issues_request() -> Request {
    Request::Issues {
        after: None,
        limit: PAGE_ITEMS_MAX,
    }
}

/// The version of web each node holds.
async fn versions(nodes: &[RunningNode]) -> Vec<String> {
    let mut out = Vec::new();
    for node in nodes {
        let req = Request::Get { name: "web".into() };
        match call(node, req).await {
            Response::Workload(w) => out.push(w.version),
            other => panic!("unexpected {other:?}"),
        }
    }
    out
}

async fn refused_metric(node: &RunningNode, reason: &str) -> f64 {
    let stats = TransportStats::default();
    let families = shoal::state::mesh::metrics::mesh_families(&node.node, &stats, &stats).await;
    let family = families
        .iter()
        .find(|f| f.name == "shoal_writes_refused")
        .expect("refusal metric");
    family
        .samples
        .iter()
        .find(|(labels, _)| labels.iter().any(|(_, v)| v == reason))
        .map(|(_, v)| *v)
        .unwrap()
}

fn expect_clock_skew(answer: Response, words: &[&str]) -> String {
    match answer {
        Response::Error(e) => {
            assert_eq!(e.kind, ErrorKind::ClockSkew, "{e:?}");
            for w in words {
                assert!(e.message.contains(w), "{w:?} not in {}", e.message);
            }
            e.message
        }
        other => panic!("a write through a skewed agent answered {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_skewed_agent_refuses_writes_and_no_acknowledged_write_is_lost() {
    let net = MemNetwork::new(11);
    let offsets: Vec<Arc<AtomicI64>> = (0..NODES).map(|_| Arc::default()).collect();
    let disks: Vec<MemDisk> = (0..NODES).map(|_| MemDisk::new()).collect();
    let (start, mut nodes) = (tokio::time::Instant::now(), Vec::new());
    for i in 0..NODES {
        let clock = skewed_clock(start, offsets[i].clone());
        nodes.push(
            start_mem_node(&net, setup(i), &disks[i], clock)
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let Response::Applied(_) = apply(&nodes[0], 3).await else {
        panic!("apply with right clocks failed");
    };

    // n4's clock jumps 30 s back: it sees at once that most peers disagree, and refuses.
    offsets[3].store(-30_000, Ordering::Relaxed);
    let message = expect_clock_skew(apply(&nodes[3], 4).await, &["behind", "n4", "NTP"]);
    assert!(message.contains("30000 ms"), "{message}");
    assert_eq!(refused_metric(&nodes[3], "clock_offset").await, 1.0);
    // Deletes too.
    let delete = call(
        &nodes[3],
        Request::Delete {
            name: "web".into(),
            purge_data: false,
        },
    )
    .await;
    expect_clock_skew(delete, &["behind"]);
    // The others still accept writes (one wrong clock of five does not stop them).
    let Response::Applied(_) = apply(&nodes[1], 5).await else {
        panic!("a right clock was refused");
    };
    // Every agent lists n4's issue, from gossip.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let Response::Issues { issues, .. } = call(&nodes[0], issues_request()).await else {
        panic!("issues failed");
    };
    let issue = issues
        .iter()
        .find(|i| i.kind == IssueKind::ClockSkew)
        .expect("a clock-skew issue");
    assert_eq!(issue.node, "n4");
    assert!(issue.message.contains("behind"), "{}", issue.message);
    // NTP fixes n4: writes through it are accepted again, and the issue goes.
    offsets[3].store(0, Ordering::Relaxed);
    let Response::Applied(_) = apply(&nodes[3], 6).await else {
        panic!("a fixed clock was refused");
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let Response::Issues { issues, .. } = call(&nodes[0], issues_request()).await else {
        panic!("issues failed");
    };
    assert!(
        issues.iter().all(|i| i.kind != IssueKind::ClockSkew),
        "{issues:?}"
    );

    // n5, cut off alone long enough to forget its samples, runs 70 s ahead and writes: alone, it
    // has no evidence against its clock, and the write is durable on it only.
    let (a, b): (Vec<usize>, Vec<usize>) = ((0..4).collect(), vec![4]);
    // Faults are per host: the cut takes gossip and API alike.
    let hosts = |v: &[usize]| v.iter().map(|&i| gossip_addr(i).ip()).collect::<Vec<_>>();
    net.partition(&hosts(&a), &hosts(&b));
    tokio::time::sleep(Duration::from_secs(90)).await;
    offsets[4].store(70_000, Ordering::Relaxed);
    let Response::Applied(alone) = apply(&nodes[4], 7).await else {
        panic!("the lone agent refused");
    };
    assert_eq!(alone[0].durable_on, ["n5"]);
    let acknowledged = alone[0].version.clone();
    net.heal();
    tokio::time::sleep(Duration::from_secs(10)).await;

    // The others refuse n5's entry (more than 60 s ahead of their clocks): a write of web
    // through them would get a lower version and lose to it once their clocks catch up, so
    // they refuse it and name the newer version. Their own clocks are fine: n2's verdict is
    // not skewed, the refusal comes from the newer version.
    let message = expect_clock_skew(apply(&nodes[1], 8).await, &["newer write", " by n5", "NTP"]);
    let shown = shoal_core::hlc::format_version(&acknowledged);
    assert!(message.contains(&shown), "{message}");
    assert_eq!(refused_metric(&nodes[1], "newer_version").await, 1.0);
    assert_eq!(refused_metric(&nodes[1], "clock_offset").await, 0.0);

    // Once their clocks reach 60 s behind n5's write they store it: every agent ends on the last
    // acknowledged version, n5's.
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(versions(&nodes).await, vec![acknowledged.clone(); NODES]);
    for node in nodes {
        node.crash();
    }
}
