//! Criterion benches for placement's inner loops: the per-pair key, the log-free filter that
//! spares most pairs the log, a full placement, and an incremental node change (the replayed
//! capacity pass dominates it). The end-to-end figures at 10,000 nodes come from
//! `cargo run --release -p shoal --example placement_bench`.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use shoal_core::placement::hash::{
    certainly_above, key, node_hash, pair_hash, unit, workload_hash, RequestScale,
};
use shoal_core::placement::{place, Node, PlacementEngine, Spread, Workload};
use shoal_core::resources::Resources;
use xxhash_rust::xxh3::xxh3_64_with_seed;

const GIB: u64 = 1 << 30;

fn cluster(nodes: usize, workloads: usize) -> (Vec<Node>, Vec<Workload>) {
    let nodes: Vec<Node> = (0..nodes as u64)
        .map(|i| Node {
            id: format!("node-{i:05}"),
            capacity: Resources::new((8 << (i % 3)) * 1000, (32 << (i % 3)) * GIB),
            labels: BTreeMap::new(),
            zone: format!("zone-{:02}", i % 16),
            draining: false,
            down: false,
            caps: None,
        })
        .collect();
    let workloads: Vec<Workload> = (0..workloads as u64)
        .map(|i| Workload {
            id: format!("wl-{i:05}"),
            replicas: 1 + (i % 19) as u32,
            request: Resources::new(100 + (i * 37) % 900, (256 + (i * 53) % 2048) << 20),
            spread: if i % 3 == 0 {
                Spread::Zone
            } else {
                Spread::Node
            },
            constraints: vec![],
            exclusive: false,
            priority: (i % 4) as i32,
            sticky: Default::default(),
            needs: Default::default(),
            yields_when_short: false,
            yields_unplaced: false,
            cell_level_needs: false,
            ports_exclusive: false,
        })
        .collect();
    (nodes, workloads)
}

fn pairs(c: &mut Criterion) {
    let nodes: Vec<u64> = (0..1024).map(|i| node_hash(&format!("node-{i}"))).collect();
    let w = workload_hash("web");
    let scale = RequestScale::new(&Resources::new(250, 256 << 20));
    let weight = scale.weight(&Resources::new(16_000, 64 * GIB));
    let mut group = c.benchmark_group("pair");
    group.throughput(Throughput::Elements(nodes.len() as u64));
    group.bench_function("xxh3_16_bytes", |b| {
        b.iter(|| {
            let mut acc = 0u64;
            for &n in &nodes {
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&w.to_le_bytes());
                bytes[8..].copy_from_slice(&n.to_le_bytes());
                acc ^= xxh3_64_with_seed(&bytes, 1);
            }
            black_box(acc)
        })
    });
    group.bench_function("mix", |b| {
        b.iter(|| {
            nodes
                .iter()
                .fold(0u64, |acc, &n| acc ^ pair_hash(black_box(w), n))
        })
    });
    group.bench_function("key_with_log", |b| {
        b.iter(|| {
            nodes
                .iter()
                .map(|&n| key(unit(pair_hash(black_box(w), n)), weight))
                .sum::<f64>()
        })
    });
    group.bench_function("filter_without_log", |b| {
        b.iter(|| {
            nodes
                .iter()
                .filter(|&&n| !certainly_above(unit(pair_hash(black_box(w), n)), weight, 1e-4))
                .count()
        })
    });
    group.finish();
}

fn placement(c: &mut Criterion) {
    let (nodes, workloads) = cluster(1000, 1000);
    let mut group = c.benchmark_group("placement_1k_nodes_10k_replicas");
    group.sample_size(10);
    group.bench_function("full", |b| {
        b.iter(|| place(black_box(&nodes), black_box(&workloads)))
    });
    let mut engine = PlacementEngine::new(&nodes, &workloads);
    engine.placement();
    group.bench_function("node_removed_and_replay", |b| {
        b.iter_batched(
            || engine.clone(),
            |mut e| {
                e.handle_node_removed("node-00500").expect("known node");
                e.placement().assigned.len()
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, pairs, placement);
criterion_main!(benches);
