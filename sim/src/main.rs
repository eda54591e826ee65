//! `shoal-sim`: the chaos simulator. A skeleton until the simulator issue lands.
fn main() {
    eprintln!("shoal-sim: not built yet (see the simulator issue)");
    std::process::exit(2)
}
