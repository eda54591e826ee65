//! Selectors: which hosts an event is about, in the words of Chaos Mesh and Jepsen.
//!
//! | text | hosts |
//! | --- | --- |
//! | `one` | one, at random |
//! | `3` | three, at random |
//! | `10%` | ten percent (at least one), at random |
//! | `zone=eu-1a` | every host of a zone |
//! | `cell=c3` | every host of a cell (scenarios with `[mesh] cells`) |
//! | `node=n3,n7` | those hosts |
//! | `owner=db` | the hosts running a copy of workload `db` (replica 0 first) |
//! | `minority` / `majority` | a random strict minority / majority |
//! | `all` | every host |
//!
//! Random picks draw from the run's generator among the hosts the event can act on (for a crash,
//! the live ones), so a seed fixes them.

use rand::seq::SliceRandom;
use rand::Rng;

/// Which hosts an event is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    /// One at random.
    One,
    /// This many at random.
    Count(u32),
    /// This percentage (at least one) at random.
    Percent(u32),
    /// Every host of the zone.
    Zone(String),
    /// Every host of cell `c{cell + 1}` of a scenario with `cells` cells (host `i` is in cell
    /// `i % cells`).
    Cell {
        /// The cell's index (c1 is 0).
        cell: u32,
        /// How many cells the scenario has.
        cells: u32,
    },
    /// These hosts (indices, from `node=n1,n2`: n1 is index 0).
    Nodes(Vec<u32>),
    /// The hosts running a copy of this workload.
    Owner(String),
    /// A random strict minority.
    Minority,
    /// A random strict majority.
    Majority,
    /// Every host.
    All,
}

impl std::fmt::Display for Selector {
    /// The text form `parse` reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selector::One => f.write_str("one"),
            Selector::Count(n) => write!(f, "{n}"),
            Selector::Percent(p) => write!(f, "{p}%"),
            Selector::Zone(z) => write!(f, "zone={z}"),
            Selector::Cell { cell, .. } => write!(f, "cell=c{}", cell + 1),
            Selector::Nodes(list) => f.write_str(&Selector::concrete(list)),
            Selector::Owner(w) => write!(f, "owner={w}"),
            Selector::Minority => f.write_str("minority"),
            Selector::Majority => f.write_str("majority"),
            Selector::All => f.write_str("all"),
        }
    }
}

/// What a selector picks from.
pub struct Pool<'a> {
    /// Hosts the event may act on, sorted.
    pub hosts: &'a [u32],
    /// Every host of the mesh (for minority and majority sizes).
    pub mesh_size: u32,
    /// A host's zone.
    pub zone_of: &'a dyn Fn(u32) -> String,
    /// Hosts running a copy of a workload.
    pub owners_of: &'a dyn Fn(&str) -> Vec<u32>,
}

impl Selector {
    /// Parses the text form (see the module doc) for a mesh of `mesh_size` hosts in `cells`
    /// cells (0: no cells).
    pub fn parse(text: &str, mesh_size: u32, cells: u32) -> Result<Selector, String> {
        let text = text.trim();
        let bad = || {
            format!(
                "{text:?} is not a selector (one, 3, 10%, zone=NAME, cell=cN, node=n1,n2, \
                 owner=WORKLOAD, minority, majority, all)"
            )
        };
        Ok(match text {
            "one" => Selector::One,
            "minority" => Selector::Minority,
            "majority" => Selector::Majority,
            "all" => Selector::All,
            _ => {
                if let Some(p) = text.strip_suffix('%') {
                    let p: u32 = p.trim().parse().map_err(|_| bad())?;
                    if p == 0 || p > 100 {
                        return Err(format!("{text:?}: a percentage is 1% to 100%"));
                    }
                    Selector::Percent(p)
                } else if let Ok(n) = text.parse::<u32>() {
                    if n == 0 || n > mesh_size {
                        return Err(format!("{text:?}: the mesh has {mesh_size} hosts"));
                    }
                    Selector::Count(n)
                } else if let Some(cell) = text.strip_prefix("cell=") {
                    parse_cell(cell.trim(), cells)?
                } else if let Some(zone) = text.strip_prefix("zone=") {
                    Selector::Zone(zone.trim().to_string())
                } else if let Some(w) = text.strip_prefix("owner=") {
                    Selector::Owner(w.trim().to_string())
                } else if let Some(list) = text.strip_prefix("node=") {
                    Selector::Nodes(parse_nodes(list, mesh_size)?)
                } else {
                    return Err(bad());
                }
            }
        })
    }

    /// The hosts this selector picks from `pool`, sorted; may be empty.
    pub fn resolve(&self, pool: &Pool<'_>, rng: &mut impl Rng) -> Vec<u32> {
        let mut hosts = pool.hosts.to_vec();
        let mut pick = |n: usize| {
            hosts.shuffle(rng);
            hosts.truncate(n);
            hosts.sort_unstable();
            std::mem::take(&mut hosts)
        };
        let minority = (pool.mesh_size.saturating_sub(1) / 2).max(1) as usize;
        match self {
            Selector::One => pick(1),
            Selector::Count(n) => pick(*n as usize),
            Selector::Percent(p) => pick(((pool.hosts.len() * *p as usize) / 100).max(1)),
            Selector::Minority => pick(minority),
            Selector::Majority => pick(pool.mesh_size as usize / 2 + 1),
            Selector::All => pick(usize::MAX),
            Selector::Zone(z) => pool
                .hosts
                .iter()
                .copied()
                .filter(|h| (pool.zone_of)(*h) == *z)
                .collect(),
            Selector::Cell { cell, cells } => pool
                .hosts
                .iter()
                .copied()
                .filter(|h| h % cells == *cell)
                .collect(),
            Selector::Nodes(list) => list
                .iter()
                .copied()
                .filter(|h| pool.hosts.contains(h))
                .collect(),
            Selector::Owner(w) => {
                let owners = (pool.owners_of)(w);
                owners
                    .into_iter()
                    .filter(|h| pool.hosts.contains(h))
                    .take(1)
                    .collect()
            }
        }
    }

    /// How many hosts the selector asks for, when it names a number: a resolution that finds
    /// fewer could not do what the event says.
    pub fn wanted(&self, mesh_size: u32) -> Option<usize> {
        match self {
            Selector::One => Some(1),
            Selector::Count(n) => Some(*n as usize),
            Selector::Nodes(list) => Some(list.len()),
            Selector::Minority => Some((mesh_size.saturating_sub(1) / 2).max(1) as usize),
            Selector::Majority => Some(mesh_size as usize / 2 + 1),
            _ => None,
        }
    }

    /// The text form of a concrete host list (what the report writes back).
    pub fn concrete(hosts: &[u32]) -> String {
        let names: Vec<String> = hosts.iter().map(|h| format!("n{}", h + 1)).collect();
        format!("node={}", names.join(","))
    }
}

/// Resolves a selector without a running mesh (the model tier): every host is a candidate,
/// `zone=` picks nothing (the model has no zones in selectors) and `owner=` picks one host at
/// random.
pub fn resolve_static(sel: &Selector, mesh_size: u32, rng: &mut impl Rng) -> Vec<u32> {
    let hosts: Vec<u32> = (0..mesh_size).collect();
    let zone_of = |_: u32| String::new();
    let owners_of = |_: &str| Vec::new();
    let pool = Pool {
        hosts: &hosts,
        mesh_size,
        zone_of: &zone_of,
        owners_of: &owners_of,
    };
    match sel {
        Selector::Owner(_) => Selector::One.resolve(&pool, rng),
        other => other.resolve(&pool, rng),
    }
}

fn parse_cell(name: &str, cells: u32) -> Result<Selector, String> {
    if cells == 0 {
        return Err(format!(
            "cell={name}: the scenario has no cells (set `[mesh] cells = N`)"
        ));
    }
    match name.strip_prefix('c').and_then(|n| n.parse::<u32>().ok()) {
        Some(k) if k >= 1 && k <= cells => Ok(Selector::Cell { cell: k - 1, cells }),
        _ => Err(format!(
            "cell={name}: the scenario's cells are c1 .. c{cells}"
        )),
    }
}

fn parse_nodes(list: &str, mesh_size: u32) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in list.split(',') {
        let part = part.trim();
        let n: u32 = part
            .strip_prefix('n')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("{part:?} is not a host name (n1 .. n{mesh_size})"))?;
        if n == 0 || n > mesh_size {
            return Err(format!("{part:?}: hosts are n1 .. n{mesh_size}"));
        }
        out.push(n - 1);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn parses_every_form_and_refuses_nonsense() {
        assert_eq!(Selector::parse("one", 5, 0), Ok(Selector::One));
        assert_eq!(Selector::parse("3", 5, 0), Ok(Selector::Count(3)));
        assert_eq!(Selector::parse("20%", 5, 0), Ok(Selector::Percent(20)));
        assert_eq!(
            Selector::parse("node=n2,n1", 5, 0),
            Ok(Selector::Nodes(vec![0, 1]))
        );
        assert_eq!(
            Selector::parse("zone=a", 5, 0),
            Ok(Selector::Zone("a".into()))
        );
        assert_eq!(
            Selector::parse("cell=c2", 5, 2),
            Ok(Selector::Cell { cell: 1, cells: 2 })
        );
        assert!(Selector::parse("cell=c3", 5, 2)
            .unwrap_err()
            .contains("c1 .. c2"));
        assert!(Selector::parse("cell=c1", 5, 0)
            .unwrap_err()
            .contains("no cells"));
        assert!(Selector::parse("9", 5, 0).is_err());
        assert!(Selector::parse("node=n9", 5, 0).is_err());
        assert!(Selector::parse("some", 5, 0)
            .unwrap_err()
            .contains("not a selector"));
    }

    #[test]
    fn minority_and_majority_sizes() {
        let hosts: Vec<u32> = (0..7).collect();
        let zone = |_: u32| String::new();
        let owners = |_: &str| Vec::new();
        let pool = Pool {
            hosts: &hosts,
            mesh_size: 7,
            zone_of: &zone,
            owners_of: &owners,
        };
        let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(1);
        assert_eq!(Selector::Minority.resolve(&pool, &mut rng).len(), 3);
        assert_eq!(Selector::Majority.resolve(&pool, &mut rng).len(), 4);
        assert_eq!(Selector::Percent(10).resolve(&pool, &mut rng).len(), 1);
        let c2 = Selector::Cell { cell: 1, cells: 3 };
        assert_eq!(c2.resolve(&pool, &mut rng), vec![1, 4]);
    }
}
