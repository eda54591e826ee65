//! [`Freeze`]: the gate every task of one agent passes, so that the simulator can stop a whole
//! agent as SIGSTOP stops a process. While the gate is closed none of the agent's tasks is
//! polled (timers that fall due, messages that arrive and wakes wait); when it opens, each task
//! runs where it stopped, late, and sees the time it did not run as a real process does after
//! SIGCONT (the member probes count it as a stall of their own, `shoal_core::verdict`).
//!
//! A real agent's gate is absent ([`Freeze::none`]): its tasks are spawned as they are, with no
//! wrapper and no check. Only the simulator makes a gate ([`Freeze::switch`]) and closes it.
//!
//! Time and order are the runtime's: a closed gate keeps the tasks that met it in the order they
//! met it and wakes them in that order, so a simulated run still replays from its seed.
//!
//! Architecture Invariant: every task an agent spawns for itself (mesh, probes, host loop, the
//! actions and calls they start) goes through its node's `Freeze`; what runs outside the agent
//! process (the network's delayed messages, the instances, the guard) does not.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// One agent's freeze gate (a clone shares it). [`Freeze::none`] for a real agent.
#[derive(Clone, Default)]
pub struct Freeze {
    gate: Option<Arc<Gate>>,
}

/// Closes and opens the gate of one agent (the simulator's pause and starve).
pub struct FreezeSwitch {
    gate: Arc<Gate>,
}

struct Gate {
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    frozen: bool,
    /// The agent is gone ([`FreezeSwitch::kill`]): every task drops its future at the gate.
    killed: bool,
    /// The tasks that met the closed gate, in the order they met it (one waker per task: at
    /// most as many as the agent has tasks; emptied when the gate opens).
    waiting: Vec<Waker>,
}

/// What a task finds at the gate.
enum Pass {
    Open,
    Closed,
    Killed,
}

impl Gate {
    /// Whether a task passes now (`cx` remembered while the gate is closed).
    fn pass(&self, cx: &Context<'_>) -> Pass {
        let mut state = self.state.lock().expect("freeze gate lock");
        if state.killed {
            return Pass::Killed;
        }
        if !state.frozen {
            return Pass::Open;
        }
        if !state.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            state.waiting.push(cx.waker().clone());
        }
        Pass::Closed
    }
}

impl Freeze {
    /// No gate: a real agent.
    pub fn none() -> Freeze {
        Freeze::default()
    }

    /// A gate, open, and the switch that closes it.
    pub fn switch() -> (Freeze, FreezeSwitch) {
        let gate = Arc::new(Gate {
            state: Mutex::new(GateState::default()),
        });
        (
            Freeze {
                gate: Some(gate.clone()),
            },
            FreezeSwitch { gate },
        )
    }

    /// Whether the gate is closed now.
    pub fn is_frozen(&self) -> bool {
        self.gate
            .as_ref()
            .is_some_and(|g| g.state.lock().expect("freeze gate lock").frozen)
    }

    /// Runs `fut`, polled only while the gate is open. Once the gate is killed, `fut` is
    /// dropped (what it held, a socket say, is released) and this never completes.
    pub async fn gate<F: Future>(&self, fut: F) -> F::Output {
        let Some(gate) = &self.gate else {
            return fut.await;
        };
        let mut fut = std::pin::pin!(Some(fut));
        std::future::poll_fn(|cx| match gate.pass(cx) {
            Pass::Closed => Poll::Pending,
            Pass::Killed => {
                fut.set(None);
                Poll::Pending
            }
            Pass::Open => match fut.as_mut().as_pin_mut() {
                Some(f) => f.poll(cx),
                None => Poll::Pending,
            },
        })
        .await
    }

    /// Spawns a task of this agent: it stops while the gate is closed. Without a gate, exactly
    /// `tokio::spawn`.
    pub fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if self.gate.is_none() {
            return tokio::spawn(fut);
        }
        let freeze = self.clone();
        tokio::spawn(async move { freeze.gate(fut).await })
    }
}

impl std::fmt::Debug for Freeze {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.gate {
            None => f.write_str("Freeze(none)"),
            Some(_) => write!(f, "Freeze(frozen: {})", self.is_frozen()),
        }
    }
}

impl FreezeSwitch {
    /// The agent died (a crash while it started, before its tasks could be aborted one by one):
    /// every task of it drops its future at the gate, now if it waits there, else at its next
    /// poll, and never runs again.
    pub fn kill(&self) {
        let woken = {
            let mut state = self.gate.state.lock().expect("freeze gate lock");
            state.killed = true;
            std::mem::take(&mut state.waiting)
        };
        for waker in woken {
            waker.wake();
        }
    }

    /// Closes (`true`) or opens the gate; opening wakes every task that met it, in order.
    pub fn set(&self, frozen: bool) {
        let woken = {
            let mut state = self.gate.state.lock().expect("freeze gate lock");
            state.frozen = frozen;
            if frozen {
                return;
            }
            std::mem::take(&mut state.waiting)
        };
        for waker in woken {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_frozen_task_runs_late_and_a_real_one_is_never_held() {
        let (freeze, switch) = Freeze::switch();
        let ticks = Arc::new(AtomicU32::new(0));
        let counted = ticks.clone();
        let task = freeze.spawn(async move {
            let mut planned = tokio::time::Instant::now();
            let mut lateness = Vec::new();
            for _ in 0..3 {
                planned = planned.max(tokio::time::Instant::now()) + Duration::from_millis(100);
                tokio::time::sleep_until(planned).await;
                lateness.push(planned.elapsed().as_millis() as u64);
                counted.fetch_add(1, Ordering::Relaxed);
            }
            lateness
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(ticks.load(Ordering::Relaxed), 1);
        switch.set(true);
        assert!(freeze.is_frozen());
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(ticks.load(Ordering::Relaxed), 1, "no progress while frozen");
        switch.set(false);
        // Thawed at 650 ms: the tick planned at 200 ms runs 450 ms late, the next on time.
        assert_eq!(task.await.unwrap(), vec![0, 450, 0]);

        let real = Freeze::none();
        assert!(!real.is_frozen());
        assert_eq!(real.spawn(async { 7 }).await.unwrap(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn a_killed_gate_drops_what_its_tasks_hold_and_runs_them_no_more() {
        struct Held(Arc<AtomicU32>);
        impl Drop for Held {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (freeze, switch) = Freeze::switch();
        let (dropped, ticks) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let (held, counted) = (Held(dropped.clone()), ticks.clone());
            tasks.push(freeze.spawn(async move {
                let _held = held;
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(ticks.load(Ordering::Relaxed), 2);
        // One task waits at the closed gate when the kill comes, the other is past it.
        switch.set(true);
        tokio::time::sleep(Duration::from_millis(100)).await;
        switch.kill();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(dropped.load(Ordering::Relaxed), 2, "both futures dropped");
        assert_eq!(
            ticks.load(Ordering::Relaxed),
            2,
            "no task ran after the kill"
        );
        assert!(tasks.iter().all(|t| !t.is_finished()));
    }
}
