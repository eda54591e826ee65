//! Arbitrary bytes through the frame decoders: never a panic, and never an allocation beyond the
//! frame limit. A counting allocator records the largest single allocation made on the test
//! thread while armed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use shoal::wire::{self, FrameKind, API_FRAME_MAX_BYTES};

struct PeakAlloc;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

fn record(size: usize) {
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(size)));
        }
    });
}

#[global_allocator]
static GLOBAL: PeakAlloc = PeakAlloc;

/// Runs `f` and returns the largest single allocation it made on this thread.
fn peak_allocation(f: impl FnOnce()) -> usize {
    PEAK.with(|p| p.set(0));
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    PEAK.with(|p| p.get())
}

/// A message shaped like the agent's: strings, byte buffers, nested sequences, maps.
#[derive(Debug, Serialize, Deserialize)]
enum Message {
    Apply {
        name: String,
        spec: Vec<u8>,
        labels: std::collections::BTreeMap<String, String>,
    },
    Nodes(Vec<(String, u64, Vec<String>)>),
    Sync {
        buckets: Vec<u64>,
        entries: Vec<Vec<u8>>,
    },
}

fn decode_everything(bytes: &[u8]) {
    if let Ok(frame) = wire::decode_frame(bytes, API_FRAME_MAX_BYTES) {
        let _ = wire::decode_body_at::<Message, API_FRAME_MAX_BYTES>(frame.version, frame.body);
    }
    let _ = wire::decode_body::<Message, API_FRAME_MAX_BYTES>(bytes);
}

fn in_a_frame(body: &[u8]) -> Vec<u8> {
    wire::encode_raw_frame(FrameKind::Request, body, API_FRAME_MAX_BYTES).unwrap()
}

/// Biases random bodies towards huge announced lengths: varint markers 251-255 followed by
/// large little-endian integers.
fn hostile_body() -> impl Strategy<Value = Vec<u8>> {
    let chunk = prop_oneof![
        any::<u8>().prop_map(|b| vec![b]),
        (251u8..=255, any::<u64>()).prop_map(|(marker, n)| {
            let mut v = vec![marker];
            v.extend_from_slice(&n.to_le_bytes());
            v
        }),
        Just(vec![0u8]),
        Just(vec![1u8]),
        Just(vec![2u8]),
    ];
    proptest::collection::vec(chunk, 0..64).prop_map(|chunks| chunks.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_nor_overallocate(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let peak = peak_allocation(|| decode_everything(&bytes));
        prop_assert!(peak <= API_FRAME_MAX_BYTES, "allocated {peak} bytes");
    }

    #[test]
    fn hostile_bodies_never_panic_nor_overallocate(body in hostile_body()) {
        let frame = in_a_frame(&body);
        let peak = peak_allocation(|| decode_everything(&frame));
        prop_assert!(peak <= API_FRAME_MAX_BYTES, "allocated {peak} bytes");
    }
}

#[test]
fn a_huge_string_length_is_refused_without_allocating_it() {
    // The instrument works: an unbounded allocation is seen.
    let seen = peak_allocation(|| drop(std::hint::black_box(vec![0u8; 2 * API_FRAME_MAX_BYTES])));
    assert!(seen >= 2 * API_FRAME_MAX_BYTES);
    // Variant 0 (Apply), then a name announcing 2^40 bytes.
    let mut body = vec![0u8, 253];
    body.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let frame = in_a_frame(&body);
    let peak = peak_allocation(|| decode_everything(&frame));
    assert!(peak <= API_FRAME_MAX_BYTES, "allocated {peak} bytes");
}
