//! The mesh version, as CockroachDB's active cluster version: the highest wire version that every
//! known member speaks, recorded once reached and never moved back.
//!
//! Each agent gossips its build and the wire versions it speaks; [`assess`] turns what one agent
//! knows (every member of its cell, alive or dead but not yet forgotten, and each other cell's
//! lowest) into the version the mesh may move to, or who holds it back. Behaviour that other
//! agents must agree on (the placement algorithm, a spec field, a wire message) follows the
//! recorded mesh version, never the build: a mixed mesh computes one placement, and a spec that
//! sets a field an older member could not read is refused at apply ([`refuse_spec`]).

use crate::version::{WIRE_CUR, WIRE_MIN};

/// Most members an assessment names as holding the mesh back (the count is always exact).
pub const NAMED_MAX: usize = 16;

/// What one agent knows of one member's build (or of another cell's lowest member).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberBuild {
    /// The member's name (or `cell NAME` for another cell's summary).
    pub name: String,
    /// The oldest wire version it speaks.
    pub wire_min: u16,
    /// The newest wire version it speaks.
    pub wire_max: u16,
    /// False for a member known dead but not yet forgotten: it still holds the version back.
    pub alive: bool,
}

/// A member that keeps the mesh below a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its name.
    pub name: String,
    /// The newest wire version it speaks.
    pub wire_max: u16,
    /// Whether it is alive (a dead member holds the version back until forgotten).
    pub alive: bool,
}

/// What [`assess`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assessment {
    /// The mesh version recorded now.
    pub current: u16,
    /// The highest version every known member speaks, at most this build's [`WIRE_CUR`] and
    /// never below `current`.
    pub supported: u16,
    /// The version to record now: `supported` when it is above `current` and nothing holds it.
    pub move_to: Option<u16>,
    /// An operator holds the version (`shoal upgrade hold`).
    pub held: bool,
    /// Members that speak less than this build's newest version, oldest first, then by name (at
    /// most [`NAMED_MAX`]).
    pub waiting_for: Vec<Holder>,
    /// How many members speak less than this build's newest version.
    pub waiting_count: usize,
    /// Members that cannot speak the recorded mesh version (their oldest is above it): they were
    /// started from a build too new for this mesh and must be rolled back to join it.
    pub too_new: Vec<String>,
}

/// The mesh version a mesh with these members may run, from the recorded `current` (which never
/// moves back) and the operator's `held`.
pub fn assess(current: u16, members: &[MemberBuild], held: bool) -> Assessment {
    let current = current.clamp(WIRE_MIN, u16::MAX);
    let lowest_max = members.iter().map(|m| m.wire_max).min().unwrap_or(WIRE_CUR);
    let supported = lowest_max.min(WIRE_CUR).max(current);
    let move_to = (supported > current && !held).then_some(supported);
    let mut holders: Vec<Holder> = members
        .iter()
        .filter(|m| m.wire_max < WIRE_CUR)
        .map(|m| Holder {
            name: m.name.clone(),
            wire_max: m.wire_max,
            alive: m.alive,
        })
        .collect();
    holders.sort_by(|a, b| (a.wire_max, &a.name).cmp(&(b.wire_max, &b.name)));
    let waiting_count = holders.len();
    holders.truncate(NAMED_MAX);
    let mut too_new: Vec<String> = members
        .iter()
        .filter(|m| m.wire_min > current)
        .map(|m| m.name.clone())
        .collect();
    too_new.sort();
    too_new.truncate(NAMED_MAX);
    Assessment {
        current,
        supported,
        move_to,
        held,
        waiting_for: holders,
        waiting_count,
        too_new,
    }
}

/// The mesh version an agent may take from its peers' gossip (`reports`: the version each live
/// peer of its cell says it runs) before its store holds the record: the highest version that
/// more than half of the reporters run, so that a minority that lies cannot raise it, and never
/// above `supported` (the newest every member this agent knows speaks, [`Assessment::supported`]).
/// `None` when nobody reports or the floor is not above `current`.
///
/// What an honest peer runs was recorded (it read it from the store or wrote it), so taking it
/// is taking the record early: a freshly started agent whose store has not synced yet otherwise
/// runs the oldest version for seconds, and judges members as that version does.
pub fn gossiped_floor(current: u16, reports: &[u16], supported: u16) -> Option<u16> {
    let mut sorted = reports.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let floor = (*sorted.get(sorted.len() / 2)?)
        .min(supported)
        .min(WIRE_CUR);
    (floor > current).then_some(floor)
}

/// The placement algorithm every agent of a mesh at `mesh_version` runs. Each mesh version names
/// one; a build keeps every algorithm its supported mesh versions name.
pub fn placement_algorithm(mesh_version: u16) -> u32 {
    match mesh_version {
        ..=8 => 6,
        9 => 7,
        10 | 11 => 8,
        _ => crate::placement::PLACEMENT_ALGORITHM_VERSION,
    }
}

/// Why a spec cannot be applied at the recorded mesh version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecRefusal {
    /// The fields the spec sets that the mesh version lacks.
    pub fields: Vec<&'static str>,
    /// The version they need.
    pub needs: u16,
    /// The mesh version recorded now.
    pub mesh_version: u16,
}

/// Refuses a spec that sets fields (`(field path, version added)`, from the spec) added after the
/// mesh version.
pub fn refuse_spec(fields: &[(&'static str, u16)], mesh_version: u16) -> Option<SpecRefusal> {
    let newer: Vec<&(&'static str, u16)> =
        fields.iter().filter(|(_, v)| *v > mesh_version).collect();
    let needs = newer.iter().map(|(_, v)| *v).max()?;
    Some(SpecRefusal {
        fields: newer.iter().map(|(f, _)| *f).collect(),
        needs,
        mesh_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, min: u16, max: u16, alive: bool) -> MemberBuild {
        MemberBuild {
            name: name.into(),
            wire_min: min,
            wire_max: max,
            alive,
        }
    }

    #[test]
    fn the_mesh_moves_when_every_member_speaks_the_next_version() {
        let all_new = [
            member("n1", 7, WIRE_CUR, true),
            member("n2", 7, WIRE_CUR, true),
        ];
        let a = assess(7, &all_new, false);
        assert_eq!((a.supported, a.move_to), (WIRE_CUR, Some(WIRE_CUR)));
        assert!(a.waiting_for.is_empty());
    }

    #[test]
    fn an_old_member_alive_or_dead_holds_the_mesh_back_and_is_named() {
        let mixed = [
            member("n1", 7, WIRE_CUR, true),
            member("n3", 7, 7, false),
            member("n2", 7, 7, true),
        ];
        let a = assess(7, &mixed, false);
        assert_eq!((a.supported, a.move_to), (7, None));
        let names: Vec<&str> = a.waiting_for.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["n2", "n3"]);
        assert!(!a.waiting_for[1].alive);
        assert_eq!(a.waiting_count, 2);
    }

    #[test]
    fn a_hold_keeps_the_version_and_nothing_moves_it_back() {
        let all_new = [member("n1", 7, 8, true)];
        assert_eq!(assess(7, &all_new, true).move_to, None);
        let old_rejoined = [member("n1", 7, 8, true), member("n2", 7, 7, true)];
        let a = assess(8, &old_rejoined, false);
        assert_eq!((a.current, a.supported, a.move_to), (8, 8, None));
    }

    #[test]
    fn a_member_too_new_for_the_mesh_is_named() {
        let a = assess(
            7,
            &[member("n9", 8, 9, true), member("n1", 7, 8, true)],
            false,
        );
        assert_eq!(a.too_new, ["n9"]);
    }

    #[test]
    fn a_majority_of_peers_sets_the_gossiped_floor_and_a_minority_cannot_raise_it() {
        let cur = WIRE_CUR;
        assert_eq!(gossiped_floor(7, &[], cur), None);
        assert_eq!(gossiped_floor(7, &[cur], cur), Some(cur));
        // Two peers: both must run it.
        assert_eq!(gossiped_floor(7, &[cur, 8], cur), Some(8));
        // One liar of three cannot raise it; two honest of three set it.
        assert_eq!(gossiped_floor(7, &[cur, 9, 9], cur), Some(9));
        assert_eq!(gossiped_floor(7, &[9, cur, cur], cur), Some(cur));
        // Never above what every known member speaks, never back, never above this build.
        assert_eq!(gossiped_floor(7, &[cur, cur], 9), Some(9));
        assert_eq!(gossiped_floor(cur, &[cur, cur], cur), None);
        assert_eq!(gossiped_floor(9, &[8, 8, 8], cur), None);
        assert_eq!(
            gossiped_floor(7, &[u16::MAX, u16::MAX], u16::MAX),
            Some(cur)
        );
    }

    #[test]
    fn a_spec_field_newer_than_the_mesh_is_refused() {
        assert_eq!(refuse_spec(&[], 7), None);
        assert_eq!(refuse_spec(&[("user", 8)], 8), None);
        let refusal = refuse_spec(&[("user", 8)], 7).unwrap();
        assert_eq!((refusal.fields, refusal.needs), (vec!["user"], 8));
    }

    #[test]
    fn every_supported_mesh_version_names_a_placement_algorithm() {
        for v in WIRE_MIN..=WIRE_CUR {
            assert!(placement_algorithm(v) <= crate::placement::PLACEMENT_ALGORITHM_VERSION);
        }
        assert_eq!(placement_algorithm(7), 6);
        assert_eq!(placement_algorithm(8), 6);
        assert_eq!(placement_algorithm(9), 7);
        assert_eq!(placement_algorithm(10), 8);
        assert_eq!(placement_algorithm(11), 8);
        assert_eq!(placement_algorithm(12), 9);
    }
}
