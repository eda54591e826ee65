//! The process's random source, replaced for determinism (see docs/sim.md).
//!
//! std's hash keys call `getrandom` directly; getrandom 0.4 (rand's thread rng, which chitchat
//! uses to pick gossip peers) finds it by `dlsym`; tokio seeds its scheduler and `select!` from
//! std's `RandomState`. Defining `getrandom` and `getentropy` in this binary makes every one of
//! them read a ChaCha stream keyed by the run's seed. It lives in the binary itself, not the
//! library: a linker may drop an unreferenced symbol from a library silently, so [`check`]
//! proves at start that both paths reached it.
#![allow(unsafe_code)]

use std::cell::RefCell;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::{Rng, SeedableRng};

/// Calls that reached the override (the start check reads it).
static CALLS: AtomicU64 = AtomicU64::new(0);
/// The run's seed; every thread's stream is keyed by it and by the thread's name.
static SEED: AtomicU64 = AtomicU64::new(0);
/// Set by `SHOAL_SIM_ENTROPY=os`: read the OS instead (to measure what the override buys).
static FROM_OS: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread's stream, keyed on first use. One stream per thread keeps a helper thread
    /// (the progress bar) from shifting the simulation thread's draws.
    static STREAM: RefCell<Option<rand::rngs::ChaCha12Rng>> = const { RefCell::new(None) };
}

/// Sets the run's seed: every later request for OS randomness reads a stream keyed by it and
/// the requesting thread's name, in order. Call before spawning the simulation thread.
pub fn reseed(seed: u64) {
    SEED.store(seed, Ordering::Relaxed);
    FROM_OS.store(
        std::env::var("SHOAL_SIM_ENTROPY").is_ok_and(|v| v == "os"),
        Ordering::Relaxed,
    );
    STREAM.with(|s| *s.borrow_mut() = None);
}

fn fill(buf: &mut [u8]) {
    CALLS.fetch_add(1, Ordering::Relaxed);
    if FROM_OS.load(Ordering::Relaxed) {
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            if f.read_exact(buf).is_ok() {
                return;
            }
        }
    }
    let filled = STREAM.try_with(|s| {
        let mut s = s.borrow_mut();
        let rng = s.get_or_insert_with(|| {
            let name = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .to_string();
            let key = SEED.load(Ordering::Relaxed) ^ xxhash_rust::xxh3::xxh3_64(name.as_bytes());
            rand::rngs::ChaCha12Rng::seed_from_u64(key)
        });
        rng.fill_bytes(buf);
    });
    if filled.is_err() {
        // A thread being torn down: a fixed stream, still deterministic.
        let key = SEED.load(Ordering::Relaxed) ^ 0xdead;
        rand::rngs::ChaCha12Rng::seed_from_u64(key).fill_bytes(buf);
    }
}

/// `getrandom(2)` as glibc exports it: fills `len` bytes, never blocks, never fails.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes (the libc contract).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getrandom(buf: *mut u8, len: usize, _flags: u32) -> isize {
    if len == 0 {
        CALLS.fetch_add(1, Ordering::Relaxed);
        return 0;
    }
    // SAFETY: the caller hands a buffer valid for `len` bytes, as getrandom(2) requires.
    let slice = unsafe { std::slice::from_raw_parts_mut(buf, len) };
    fill(slice);
    len as isize
}

/// `getentropy(3)`: at most 256 bytes, 0 on success.
///
/// # Safety
/// `buf` must be valid for writes of `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getentropy(buf: *mut u8, len: usize) -> i32 {
    if len > 256 {
        return -1;
    }
    // SAFETY: as for `getrandom`.
    unsafe { getrandom(buf, len, 0) };
    0
}

/// Proves, on a fresh thread, that std's hash keys and rand's thread rng both read the override;
/// an error means the run could not replay and must not pretend to.
pub fn check() -> Result<(), String> {
    let check = std::thread::Builder::new()
        .name("entropy-check".into())
        .spawn(|| {
            let before = CALLS.load(Ordering::Relaxed);
            let _ = std::collections::hash_map::RandomState::new();
            let after_std = CALLS.load(Ordering::Relaxed);
            let _ = rand::rng().next_u64();
            let after_rand = CALLS.load(Ordering::Relaxed);
            match (after_std > before, after_rand > after_std) {
                (true, true) => Ok(()),
                (false, _) => Err("std's hash keys did not read the entropy override".to_string()),
                (_, false) => Err(
                    "rand's thread rng did not read the entropy override (getrandom \
                               found libc's symbol by dlsym: is the binary linked with \
                               --export-dynamic-symbol=getrandom?)"
                        .to_string(),
                ),
            }
        });
    check
        .map_err(|e| e.to_string())?
        .join()
        .unwrap_or_else(|_| Err("entropy check thread panicked".to_string()))
}
