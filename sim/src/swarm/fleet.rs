//! Mixed fleets in swarm scenarios (issue 26): for some seeds, each host runs host processes
//! only, containers only, or both (`[[hosts]]` with `runtimes`), and each workload runs as a
//! process or a container. Drawn from a generator of its own, so a seed that draws no mixed fleet
//! derives exactly the scenario it derived before mixed fleets existed.

use std::fmt::Write as _;

use rand::{RngExt, SeedableRng};

/// The share of seeds that draw a mixed fleet.
const MIXED_SHARE: f64 = 0.25;

/// What one host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Processes,
    Containers,
    Both,
}

#[cfg(test)]
impl Class {
    fn runs_processes(self) -> bool {
        self != Class::Containers
    }

    fn runs_containers(self) -> bool {
        self != Class::Processes
    }
}

/// A mixed fleet: every host's class, and the generator that picks each workload's kind.
pub(super) struct Fleet {
    rng: rand::rngs::ChaCha8Rng,
    classes: Vec<Class>,
}

impl Fleet {
    /// The fleet of swarm seed `seed` with `nodes` hosts, when it draws one. Every kind of
    /// workload has at least two hosts that run it, and there is at least one host of each
    /// single kind.
    pub(super) fn draw(seed: u64, nodes: u32) -> Option<Fleet> {
        let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(seed ^ 0x666c_6565_7400_0000);
        if rng.random::<f64>() >= MIXED_SHARE {
            return None;
        }
        let mut classes = vec![Class::Processes, Class::Containers, Class::Both];
        while classes.len() < nodes as usize {
            let class = match rng.random_range(0..5) {
                0 | 1 => Class::Processes,
                2 | 3 => Class::Containers,
                _ => Class::Both,
            };
            classes.push(class);
        }
        for i in (1..classes.len()).rev() {
            let j = rng.random_range(0..=i);
            classes.swap(i, j);
        }
        Some(Fleet { rng, classes })
    }

    /// Whether the next workload runs as a container (half of them).
    pub(super) fn container(&mut self) -> bool {
        self.rng.random::<f64>() < 0.5
    }

    /// The `[[hosts]]` tables of the fleet.
    pub(super) fn hosts_toml(&self) -> String {
        let mut s = String::new();
        for (class, runtimes) in [
            (Class::Processes, "\"process\""),
            (Class::Containers, "\"container\""),
            (Class::Both, "\"process\", \"container\""),
        ] {
            let names: Vec<String> = (self.classes.iter().enumerate())
                .filter(|(_, c)| **c == class)
                .map(|(i, _)| format!("\"n{}\"", i + 1))
                .collect();
            if !names.is_empty() {
                let _ = write!(
                    s,
                    "\n[[hosts]]\nnodes = [{}]\nruntimes = [{runtimes}]\n",
                    names.join(", ")
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_seeds_draw_a_fleet_where_every_kind_has_two_hosts() {
        let mut mixed = 0;
        for seed in 0..400 {
            let Some(f) = Fleet::draw(seed, 3 + (seed % 10) as u32) else {
                continue;
            };
            mixed += 1;
            let count = |p: fn(Class) -> bool| f.classes.iter().filter(|c| p(**c)).count();
            assert!(count(Class::runs_processes) >= 2, "seed {seed}");
            assert!(count(Class::runs_containers) >= 2, "seed {seed}");
            assert_eq!(f.classes.len(), 3 + (seed % 10) as usize);
        }
        assert!((60..=140).contains(&mixed), "{mixed} of 400");
    }
}
