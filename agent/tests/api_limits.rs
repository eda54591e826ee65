//! Answers that fit: every list the API answers comes in pages that fit a frame, whatever the
//! store or the mesh holds, and a write past the store's bounds says which bound and what to do.
//! In one process over the in-memory network (answers go through the same frame encoding as over
//! QUIC, with its 4 MiB limit), with paused time.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shoal::agent::mem::{call, mem_setup, start_mem_node, tokio_clock};
use shoal::agent::run::{start_node, RunningNode};
use shoal::identity::pki::Role;
use shoal::identity::tls::{Peer, ANY_MEMBER};
use shoal::node::host::events::{EventLog, EVENT_TEXT_BYTES_MAX};
use shoal::state::cells::CellView;
use shoal::state::mesh::node::PULL_PAGE_BYTES;
use shoal::state::mesh::record::NODE_RECORD_BYTES_MAX;
use shoal::state::mesh::view::encode_spec;
use shoal::state::store_db::{DesiredStore, MemDisk};
use shoal::transport::gossip::mem::{MemNetwork, MemRpcClient};
use shoal::transport::rpc::{call_with, RpcError};
use shoal::wire::api::{
    ErrorKind, InstanceView, NodeView, Request, Response, WorkloadSummary, WorkloadView,
    PAGE_ITEMS_MAX,
};
use shoal::wire::page::{encoded_len, PAGE_BYTES_MAX};
use shoal::wire::API_FRAME_MAX_BYTES;
use shoal_core::cells::{
    CellSummary, LabelOffer, ZoneOffer, CELLS_MAX, CELL_CONTACTS_MAX, CELL_CONTACT_LEN_MAX,
    CELL_LABELS_MAX, CELL_NAME_LEN_MAX, CELL_TOKEN_LEN_MAX, CELL_ZONES_MAX,
};
use shoal_core::placement::model::ReplicaId;
use shoal_core::reconcile::{Issue, IssueKind, Layer};
use shoal_core::spec::{Run, WorkloadSpec, ENV_VALUE_BYTES_MAX};
use shoal_core::store::{StoreConfig, BUCKETS};
use shoal_core::Resources;

const BASE_MS: u64 = 1_800_000_000_000;
/// The size of the tester's specs, encoded.
const SPEC_BYTES: usize = 248_000;

fn spec(name: &str, replicas: u32) -> WorkloadSpec {
    let text = format!(
        "name = \"{name}\"\nreplicas = {replicas}\n[process]\ncommand = [\"sleep\", \"9\"]\n\
         [resources]\ncpu = \"1m\"\nmemory = \"1Mi\"\n"
    );
    WorkloadSpec::from_toml_str(&text, "test.toml").unwrap()
}

/// A valid spec of `bytes` bytes encoded, made large by environment values (each under the
/// spec's bound of 32 KiB).
fn big_spec(name: &str, bytes: usize) -> WorkloadSpec {
    let mut spec = spec(name, 1);
    let base = encode_spec(&spec).len();
    let Run::Process(process) = &mut spec.run else {
        unreachable!("a process spec")
    };
    let value_max = ENV_VALUE_BYTES_MAX - 16;
    let mut left = bytes - base;
    for i in 0.. {
        // Each variable costs its name, its value and two length prefixes.
        let overhead = 6 + 3 + 1;
        let value = (left - overhead).min(value_max);
        process.env.insert(format!("FILL{i:02}"), "x".repeat(value));
        left -= value + overhead;
        if left <= overhead + 16 {
            break;
        }
    }
    spec.validate().unwrap();
    spec
}

/// Calls `node`'s API through the in-memory network as an operator: the answer is a frame, and a
/// frame over the limit comes back as the agent's reject.
async fn ask(client: &MemRpcClient, api: SocketAddr, req: Request) -> Result<Response, RpcError> {
    call_with(client, api, ANY_MEMBER, &req, Duration::from_secs(60)).await
}

fn operator(net: &MemNetwork) -> MemRpcClient {
    let addr = SocketAddr::from(([10, 0, 9, 1], 40000));
    net.rpc_client(addr, Peer::new("operator", Role::Client))
}

#[tokio::test(start_paused = true)]
async fn sixty_specs_of_248_kb_list_in_pages_and_each_comes_whole_by_name() {
    let net = MemNetwork::new(3);
    let setup = mem_setup(0, 0, "z");
    let api = setup.record.api_addr;
    let node = start_mem_node(&net, setup, &MemDisk::new(), tokio_clock(BASE_MS))
        .await
        .unwrap();
    let client = operator(&net);
    let mut specs = Vec::new();
    for i in 0..60 {
        let spec = big_spec(&format!("w{i:02}"), SPEC_BYTES);
        assert!((SPEC_BYTES - 64..=SPEC_BYTES).contains(&encode_spec(&spec).len()));
        let req = Request::Apply {
            specs: vec![spec.clone()],
        };
        match ask(&client, api, req).await {
            Ok(Response::Applied(_)) => {}
            other => panic!("apply {}: {other:?}", spec.name),
        }
        specs.push(spec);
    }
    // The list, 7 at a time: nine pages, every workload once, in name order.
    let mut listed = Vec::new();
    let mut after = None;
    let mut pages = 0;
    loop {
        let req = Request::List { after, limit: 7 };
        let Ok(Response::Workloads {
            workloads,
            next_after,
        }) = ask(&client, api, req).await
        else {
            panic!("list failed");
        };
        pages += 1;
        assert!(workloads.len() <= 7);
        if let Some(next) = &next_after {
            assert_eq!(Some(next), workloads.last().map(|w| &w.name));
        }
        listed.extend(workloads);
        match next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 9);
    let names: Vec<&str> = listed.iter().map(|w| w.name.as_str()).collect();
    let expected: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, expected);
    assert!(listed
        .iter()
        .all(|w| w.replicas == 1 && w.cpu_millis == 1 && w.memory_bytes == 1 << 20));

    // As `shoal get` asks: one page of summaries holds them all.
    let req = Request::List {
        after: None,
        limit: PAGE_ITEMS_MAX,
    };
    match ask(&client, api, req).await {
        Ok(Response::Workloads {
            workloads,
            next_after: None,
        }) => assert_eq!(workloads, listed),
        other => panic!("one page: {other:?}"),
    }

    // Each whole spec by name, one frame each.
    let mut whole = Vec::new();
    for spec in &specs {
        let req = Request::Get {
            name: spec.name.clone(),
        };
        match ask(&client, api, req).await {
            Ok(Response::Workload(w)) => {
                assert_eq!(w.spec, *spec);
                assert_eq!(w.name, spec.name);
                whole.push(w);
            }
            other => panic!("get {}: {other:?}", spec.name),
        }
    }
    // What `get` answered before: every whole spec in one answer, which no frame holds.
    assert!(encoded_len(&whole) > API_FRAME_MAX_BYTES);
    let req = Request::Get {
        name: "nothing".into(),
    };
    match ask(&client, api, req).await {
        Ok(Response::Error(e)) => assert_eq!(e.kind, ErrorKind::NotFound),
        other => panic!("get of an unknown name: {other:?}"),
    }
    drop(node);
}

#[tokio::test(start_paused = true)]
async fn status_of_2500_replicas_comes_in_pages_of_whole_replicas() {
    let net = MemNetwork::new(4);
    let setup = mem_setup(0, 0, "z");
    let api = setup.record.api_addr;
    let _node = start_mem_node(&net, setup, &MemDisk::new(), tokio_clock(BASE_MS))
        .await
        .unwrap();
    let client = operator(&net);
    let req = Request::Apply {
        specs: vec![spec("many", 2500)],
    };
    assert!(matches!(
        ask(&client, api, req).await,
        Ok(Response::Applied(_))
    ));
    let mut seen = Vec::new();
    let mut ends = Vec::new();
    let mut after = None;
    loop {
        let req = Request::Status {
            name: "many".into(),
            after,
            limit: PAGE_ITEMS_MAX,
        };
        let Ok(Response::Status { view, next_after }) = ask(&client, api, req).await else {
            panic!("status failed");
        };
        assert_eq!(view.desired, 2500);
        seen.extend(view.instances.iter().map(|i| i.replica));
        ends.push(next_after);
        match next_after {
            Some(last) => after = Some(last),
            None => break,
        }
    }
    assert_eq!(ends, [Some(999), Some(1999), None]);
    assert_eq!(seen, (0..2500).collect::<Vec<u32>>(), "every replica once");

    // A page of one replica, from the middle.
    let req = Request::Status {
        name: "many".into(),
        after: Some(41),
        limit: 0,
    };
    match ask(&client, api, req).await {
        Ok(Response::Status { view, next_after }) => {
            assert!(view.instances.iter().all(|i| i.replica == 42));
            assert_eq!(next_after, Some(42));
        }
        other => panic!("status page of one: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn nodes_and_cells_come_in_pages_by_name() {
    let net = MemNetwork::new(5);
    let mut nodes = Vec::new();
    for i in 0..3 {
        let setup = mem_setup(i, 0, "z");
        nodes.push(
            start_mem_node(&net, setup, &MemDisk::new(), tokio_clock(BASE_MS))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut names = Vec::new();
    let mut after = None;
    loop {
        let req = Request::Nodes { after, limit: 1 };
        let Response::Nodes { nodes, next_after } = call(&nodes[0], req).await else {
            panic!("nodes failed");
        };
        assert_eq!(nodes.len(), 1);
        names.push(nodes[0].name.clone());
        match next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(names, ["n1", "n2", "n3"]);
    let req = Request::CellList {
        after: None,
        limit: 1,
    };
    match call(&nodes[0], req).await {
        Response::CellList { cells, next_after } => {
            assert!(cells.len() <= 1);
            assert_eq!(next_after, None, "one cell, one page");
        }
        other => panic!("cell list: {other:?}"),
    }
}

/// A lone node whose store has `config`.
async fn node_with_store(net: &MemNetwork, config: StoreConfig) -> RunningNode {
    let setup = mem_setup(0, 0, "z");
    let store = DesiredStore::open_in_memory(&MemDisk::new(), &setup.name, config).unwrap();
    let rpc = Arc::new(net.rpc_client(
        setup.record.api_addr,
        Peer::new(setup.name.clone(), Role::Node),
    ));
    start_node(
        setup,
        store,
        &net.transport(),
        rpc,
        tokio_clock(BASE_MS),
        true,
        None,
    )
    .await
    .unwrap()
}

/// Applies `specs` one at a time until one is refused; returns how many were stored and the
/// refusal's message.
async fn apply_until_refused(node: &RunningNode, specs: Vec<WorkloadSpec>) -> (usize, String) {
    for (stored, spec) in specs.into_iter().enumerate() {
        let name = spec.name.clone();
        match call(node, Request::Apply { specs: vec![spec] }).await {
            Response::Applied(_) => {}
            Response::Error(e) => {
                assert_eq!(e.kind, ErrorKind::Invalid, "{}", e.message);
                assert!(e.message.contains(&name), "{}", e.message);
                return (stored, e.message);
            }
            other => panic!("apply {name}: {other:?}"),
        }
    }
    panic!("every spec was stored");
}

#[tokio::test(start_paused = true)]
async fn apply_past_the_store_entry_bound_names_the_bound_and_what_to_do() {
    let net = MemNetwork::new(6);
    let config = StoreConfig {
        entries_max: 5,
        ..StoreConfig::default()
    };
    let node = node_with_store(&net, config).await;
    let specs = (0..10).map(|i| spec(&format!("w{i}"), 1)).collect();
    let (stored, message) = apply_until_refused(&node, specs).await;
    assert!(stored <= 5, "{stored} stored");
    assert!(
        message.contains("the store is full: it holds its bound of 5 entries"),
        "{message}"
    );
    assert!(
        message.contains("delete workloads no longer needed"),
        "{message}"
    );
    // One apply of several specs that fills the store on the way says which it kept.
    let net = MemNetwork::new(16);
    let node = node_with_store(
        &net,
        StoreConfig {
            entries_max: 2,
            ..StoreConfig::default()
        },
    )
    .await;
    let specs = (0..4).map(|i| spec(&format!("v{i}"), 1)).collect();
    let Response::Error(e) = call(&node, Request::Apply { specs }).await else {
        panic!("four specs stored under a bound of two");
    };
    assert!(
        e.message
            .contains("already stored and kept, from this apply: v0, v1"),
        "{}",
        e.message
    );
}

#[tokio::test(start_paused = true)]
async fn apply_past_the_store_byte_bound_names_the_bound_and_what_to_do() {
    let net = MemNetwork::new(7);
    let config = StoreConfig {
        bytes_total_max: 1 << 20,
        ..StoreConfig::default()
    };
    let node = node_with_store(&net, config).await;
    let specs = (0..10)
        .map(|i| big_spec(&format!("w{i}"), SPEC_BYTES))
        .collect();
    let (stored, message) = apply_until_refused(&node, specs).await;
    assert_eq!(stored, 4, "four of 248 KB fit 1 MiB");
    assert!(
        message.contains("over the store's bound of 1048576 bytes"),
        "{message}"
    );
    assert!(
        message.contains("delete workloads no longer needed (their bytes are freed at once)"),
        "{message}"
    );
    // Which works: a delete frees its bytes, and the refused spec fits.
    let deleted = call(
        &node,
        Request::Delete {
            name: "w0".into(),
            purge_data: false,
        },
    )
    .await;
    assert!(matches!(deleted, Response::Deleted(_)), "{deleted:?}");
    let again = Request::Apply {
        specs: vec![big_spec("w4", SPEC_BYTES)],
    };
    let applied = call(&node, again).await;
    assert!(matches!(applied, Response::Applied(_)), "{applied:?}");
}

/// What a page may hold past its budget and still be a frame: the envelope, the page's other
/// fields and list lengths are far under this.
const PAGE_SLACK_BYTES: usize = 4096;

/// Whether a full page plus `item` fits a frame.
fn fits_past_a_full_page<T: serde::Serialize>(item: &T) -> bool {
    PAGE_BYTES_MAX + encoded_len(item) + PAGE_SLACK_BYTES <= API_FRAME_MAX_BYTES
}

#[test]
fn the_largest_item_of_each_list_fits_a_frame_past_a_full_page() {
    let long = |c: &str, n: usize| c.repeat(n);
    let addr = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535".to_string();
    let version = format!("{}.{}@{}", u64::MAX, u32::MAX, long("n", 63));
    let resources = Resources::new(u64::MAX, u64::MAX);

    // A member whose record (at most 16 KiB of JSON) is all zone and agent version.
    let node = NodeView {
        name: long("n", 63),
        alive: true,
        zone: long("z", NODE_RECORD_BYTES_MAX),
        cpu_millis: u64::MAX,
        memory_bytes: u64::MAX,
        draining: true,
        gossip_addr: addr.clone(),
        api_addr: Some(addr.clone()),
        agent_version: Some(long("v", NODE_RECORD_BYTES_MAX)),
        // Build facts at their bounds (a peer's record is refused past them).
        build: Some(shoal::state::mesh::build::BuildRecord {
            version: long("v", 64),
            commit: long("c", 64),
            wire_min: u16::MAX,
            wire_max: u16::MAX,
            layout: u32::MAX,
            placement_min: u32::MAX,
            placement_max: u32::MAX,
        }),
        runtimes: None,
        suspect: Some(true),
    };
    assert!(fits_past_a_full_page(&node));

    // A cell summary with every list at its bound and every string at its longest.
    let summary = CellSummary {
        cell: long("c", CELL_NAME_LEN_MAX),
        version: u64::MAX,
        members: u32::MAX,
        capacity: resources,
        largest: resources,
        free: resources,
        zones: (0..CELL_ZONES_MAX)
            .map(|i| ZoneOffer {
                zone: format!("{i:063}"),
                capacity: resources,
            })
            .collect(),
        labels: (0..CELL_LABELS_MAX)
            .map(|i| LabelOffer {
                key: format!("{i:063}"),
                value: long("v", CELL_TOKEN_LEN_MAX),
                capacity: resources,
            })
            .collect(),
        contacts: vec![long("a", CELL_CONTACT_LEN_MAX); CELL_CONTACTS_MAX],
        sees: (0..CELLS_MAX).map(|i| format!("{i:063}")).collect(),
    };
    let cell = CellView {
        summary,
        down: true,
        heard_ms_ago: u64::MAX,
        own: false,
        degraded: Some(false),
    };
    assert!(fits_past_a_full_page(&cell));

    // An issue as large as one node's whole gossiped issues value may be.
    let issue = Issue {
        id: long("f", 12),
        layer: Layer::Placement,
        kind: IssueKind::Missing,
        replica: Some(ReplicaId::new(&long("w", 63), u32::MAX)),
        node: long("n", 63),
        message: long("m", 512 * 1024),
        held: Some(long("h", 256)),
        approved: true,
        since_ms: u64::MAX,
    };
    assert!(fits_past_a_full_page(&issue));

    // A replica's instances in a status page: a copy on each of 1,000 nodes, every text long.
    let instance = InstanceView {
        replica: u32::MAX,
        node: Some(long("n", 63)),
        phase: "unschedulable".into(),
        healthy: Some(true),
        restarts: u32::MAX,
        spec_version: Some(version.clone()),
        since_ms: Some(u64::MAX),
        last_error: Some(long("e", 256)),
        reason: Some(long("r", 512)),
        fence_token: Some(u64::MAX),
        pull: Some(shoal::core::instance::PullProgress {
            image: long("i", shoal::core::spec::IMAGE_LEN_MAX),
            done_bytes: u64::MAX,
            total_bytes: u64::MAX,
        }),
        data_on: Some(long("d", 63)),
    };
    assert!(fits_past_a_full_page(&vec![instance; 1000]));

    // A workload summary; a whole workload (its spec as large as the store takes one).
    let summary = WorkloadSummary {
        name: long("w", 63),
        replicas: u32::MAX,
        version: version.clone(),
        cpu_millis: u64::MAX,
        memory_bytes: u64::MAX,
    };
    assert!(fits_past_a_full_page(&summary));
    let spec = big_spec("w", StoreConfig::default().body_bytes_max);
    let whole = Response::Workload(Box::new(WorkloadView {
        name: spec.name.clone(),
        replicas: spec.replicas,
        version,
        spec,
    }));
    assert!(encoded_len(&whole) + PAGE_SLACK_BYTES <= API_FRAME_MAX_BYTES);

    // Events are not paged by bytes: the most one call returns, each as large as the log keeps.
    let mut log = EventLog::new(1);
    let reason = long("r", 1 << 20);
    log.push(
        u64::MAX,
        &long("n", 63),
        "start-failed",
        Some(format!("{}/{}", long("w", 63), u32::MAX)),
        reason,
        Some(long("b", 1 << 20)),
    );
    let event = log.after(0, 1).remove(0);
    assert_eq!(event.reason.len(), EVENT_TEXT_BYTES_MAX);
    let answer = Response::Events(vec![event; 1000]);
    assert!(encoded_len(&answer) + PAGE_SLACK_BYTES <= API_FRAME_MAX_BYTES);
}

#[test]
fn a_pull_page_of_the_largest_entries_fits_a_frame() {
    let config = StoreConfig::default();
    let mut store = DesiredStore::open_in_memory(&MemDisk::new(), "n1", config.clone()).unwrap();
    for i in 0..12 {
        let body = vec![7u8; config.body_bytes_max];
        store.apply(&format!("w{i:02}"), body, BASE_MS).unwrap();
    }
    let buckets: Vec<u16> = (0..BUCKETS as u16).collect();
    let page = store.entries_in_buckets(&buckets, None, PULL_PAGE_BYTES);
    assert!(
        page.next_after.is_some(),
        "12 entries of 256 KiB are more than a page"
    );
    let answer = Response::Entries {
        entries: page.entries,
        next_after: page.next_after,
    };
    assert!(encoded_len(&answer) <= PULL_PAGE_BYTES + config.body_bytes_max + PAGE_SLACK_BYTES);
    assert!(encoded_len(&answer) + PAGE_SLACK_BYTES <= API_FRAME_MAX_BYTES);
}

#[test]
fn the_largest_endpoints_answer_fits_a_frame() {
    use shoal::node::dns::table::{PublishedPort, ENDPOINTS_PER_WORKLOAD_MAX};
    use shoal::node::dns::{Endpoint, WorkloadEndpoints};
    use shoal_core::spec::{NAMED_PORTS_MAX, PORT_NAME_LEN_MAX};
    // Every named port a spec may declare, each name as long as it may be, the largest numbers.
    let name = |i: usize| format!("{i:0>width$}", width = PORT_NAME_LEN_MAX);
    let endpoint = Endpoint {
        replica: u32::MAX,
        node: "n".repeat(63),
        addr: Some("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap()),
        phase: "unschedulable".to_string(),
        healthy: true,
        node_live: true,
        serving: true,
        ports: (0..NAMED_PORTS_MAX).map(|i| (name(i), u16::MAX)).collect(),
    };
    let port = PublishedPort {
        name: Some(name(0)),
        container: Some(u16::MAX),
        host: Some(u16::MAX),
        protocol: "tcp".to_string(),
    };
    let answer = Response::Endpoints(Box::new(WorkloadEndpoints {
        name: "w".repeat(63),
        replicas: u32::MAX,
        ports: vec![port; shoal_core::spec::PORTS_MAX],
        endpoints: vec![endpoint; ENDPOINTS_PER_WORKLOAD_MAX],
    }));
    assert!(encoded_len(&answer) + PAGE_SLACK_BYTES <= API_FRAME_MAX_BYTES);
}

#[test]
fn the_largest_logs_answer_fits_a_frame() {
    use shoal::node::runtime::logs::{
        LogCursor, LogLine, LogPage, Stream, PAGE_BYTES_MAX, PAGE_LINES_MAX,
    };
    use shoal::wire::api::LogsAnswer;
    // A full page: the most lines, together the most text, plus one line as long as a record
    // may be (a first line is always given whole), each with the largest stamp.
    let per_line = PAGE_BYTES_MAX as usize / PAGE_LINES_MAX;
    let mut lines = vec![
        LogLine {
            at_ns: u64::MAX,
            stream: Stream::Stderr,
            partial: true,
            text: "x".repeat(per_line),
        };
        PAGE_LINES_MAX
    ];
    lines.push(LogLine {
        at_ns: u64::MAX,
        stream: Stream::Stdout,
        partial: false,
        text: "\u{fffd}".repeat(shoal::node::runtime::logs::LINE_BYTES_MAX),
    });
    let answer = Response::Logs(Box::new(LogsAnswer {
        node: "n".repeat(63),
        replica: u32::MAX,
        page: LogPage {
            instance: "w".repeat(63 + 20),
            running: true,
            lines,
            cursor: LogCursor::File {
                file_id: u64::MAX,
                offset: u64::MAX,
            },
            more: true,
            skipped: true,
        },
    }));
    assert!(encoded_len(&answer) + PAGE_SLACK_BYTES <= API_FRAME_MAX_BYTES);
}
