//! Criterion bench of the member detector's tick in a mesh at rest (watching, every member
//! heard from and answering): what the verdict task pays 20 times a second on every agent when
//! nothing happens. It should not grow with the mesh: a tick walks the members that are not at
//! rest (the two it watches), not all of them. Figures in docs/measurements.md.
//!
//! ```text
//! cargo bench -p shoal-core --bench prober
//! ```

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use shoal_core::verdict::{Observed, ProbeConfig, ProbeMsg, Prober};

fn addr(i: usize) -> SocketAddr {
    SocketAddr::from((
        [
            10,
            (i / 62_500) as u8,
            (i / 250 % 250) as u8,
            (i % 250) as u8 + 1,
        ],
        7000,
    ))
}

fn member(i: usize) -> Observed {
    Observed {
        name: format!("n{i}"),
        generation: 1,
        addr: addr(i),
        heartbeat: 1,
        live: true,
        probes: true,
        leaving: false,
        suspected_by: 0,
    }
}

/// Every ping answered at once by the member it names.
fn answer(p: &mut Prober, t: u64, out: Vec<(SocketAddr, ProbeMsg)>) {
    for (to, msg) in out {
        if let ProbeMsg::Ping {
            nonce,
            target,
            target_gen,
        } = msg
        {
            let ack = ProbeMsg::Ack {
                nonce,
                name: target.clone(),
                generation: target_gen,
            };
            black_box(p.receive(t, to, Some(target.as_str()), ack));
        }
    }
}

/// A prober watching `n` members, run for 5 s of ticks so that every one was heard from.
fn at_rest(n: usize) -> (Prober, u64) {
    let mut p = Prober::new(ProbeConfig::default(), "n0", 1, 7);
    p.set_watching(true);
    let members: Vec<Observed> = (1..=n).map(member).collect();
    let mut t = 50;
    let out = p.tick(t, 0, 0, &members);
    answer(&mut p, t, out);
    while t < 5_000 {
        t += 50;
        let out = p.tick_with(t, 0, 0, None);
        answer(&mut p, t, out);
    }
    (p, t)
}

fn tick_at_rest(c: &mut Criterion) {
    let mut group = c.benchmark_group("prober_tick_at_rest");
    for n in [30usize, 200, 2_000] {
        let (mut p, mut t) = at_rest(n);
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                t += 50;
                let out = p.tick_with(t, 0, 0, None);
                answer(&mut p, t, out);
                black_box(p.next_due());
                black_box(p.suspects(t));
                black_box(p.held_dead());
            })
        });
    }
    group.finish();
}

criterion_group!(benches, tick_at_rest);
criterion_main!(benches);
