//! Pieces the benchmark examples share, one concept a file: the synthetic cluster of the placement
//! benches (`synth`), real `shoal agent` processes on loopback (`agents`), the API client
//! (`client`), running a bench until Ctrl-C (`run`), free ports (`addrs`), /proc readings
//! (`procfs`), docker containers (`docker`) and a median and a percentile (`stats`).
#![allow(dead_code)] // each example uses its own subset

pub mod addrs;
pub mod agents;
pub mod client;
pub mod docker;
pub mod procfs;
pub mod run;
pub mod stats;
pub mod synth;
