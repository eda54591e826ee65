//! [`CellSummary`]: all one cell tells the others. Per cell: its live members, the capacity
//! they declare in total and per zone and label value, what is free, a few contact addresses, a
//! version. Bounded: [`CellSummary::validate`] refuses a summary that is too large or whose
//! figures do not add up, so a hostile or broken peer can neither make an agent allocate without
//! bound nor feed placement nonsense.
//!
//! The capacities are the **ranked** ones: what the cell level weighs and fills cells by. A
//! cell's envoys publish them with hysteresis ([`summarize`](super::summarize)): they change only
//! when some figure moves by more than 1/16 (or the set of zones or labels changes), so one node
//! joining or failing does not re-rank the mesh, and agents holding summaries a version apart
//! still place alike. `free` is exact as of the version and only informs operators.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::placement::model::{Resource, NODE_CPU_MILLIS_MAX, NODE_MEMORY_BYTES_MAX};
use crate::resources::Resources;

/// Longest cell name: a DNS label.
pub const CELL_NAME_LEN_MAX: usize = 63;
/// Most members a cell may report.
pub const CELL_MEMBERS_MAX: u32 = 100_000;
/// Most zones a summary may list.
pub const CELL_ZONES_MAX: usize = 64;
/// Most label values a summary may list (the envoys keep those with the most capacity).
pub const CELL_LABELS_MAX: usize = 256;
/// Most contact addresses a summary may list.
pub const CELL_CONTACTS_MAX: usize = 8;
/// Longest zone name, label key or label value (what a constraint can name).
pub const CELL_TOKEN_LEN_MAX: usize = 63;
/// Longest contact address.
pub const CELL_CONTACT_LEN_MAX: usize = 253;
/// Largest encoding of a valid summary in any of the formats Shoal uses, with room to spare:
/// decode a peer's summary with this byte limit, then [`CellSummary::validate`] it.
pub const CELL_SUMMARY_BYTES_MAX: usize = 96 * 1024;

/// One zone a cell offers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ZoneOffer {
    /// The zone's name (the empty string is a zone like any other, which no constraint names).
    pub zone: String,
    /// Ranked capacity of the cell's live, non-draining members in the zone.
    pub capacity: Resources,
}

/// One label value a cell offers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct LabelOffer {
    /// The label's key.
    pub key: String,
    /// The value.
    pub value: String,
    /// Ranked capacity of the cell's live, non-draining members with this value.
    pub capacity: Resources,
}

/// What a cell publishes about itself for the rest of the mesh.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CellSummary {
    /// The cell's name, unique in the mesh (a DNS label).
    pub cell: String,
    /// Bumped by the cell's envoys with every change; a higher version replaces a lower one.
    pub version: u64,
    /// Live members.
    pub members: u32,
    /// Ranked capacity of the live, non-draining members (the zones' add up to it, unless the
    /// cell has more zones than a summary lists).
    pub capacity: Resources,
    /// The largest capacity of one member, per resource (an upper bound on what one replica can
    /// ask and still fit in this cell).
    pub largest: Resources,
    /// `capacity` minus what the cell's own placement assigned, as of this version.
    pub free: Resources,
    /// Zones with a live, non-draining member, sorted by name (at most [`CELL_ZONES_MAX`], those
    /// with the most capacity).
    pub zones: Vec<ZoneOffer>,
    /// Label values of live, non-draining members, sorted by (key, value) (at most
    /// [`CELL_LABELS_MAX`], those with the most capacity).
    pub labels: Vec<LabelOffer>,
    /// Where to reach the cell's envoys (for forwarded requests), at most [`CELL_CONTACTS_MAX`].
    pub contacts: Vec<String>,
    /// The other cells the publishing envoy holds up, sorted by name (at most
    /// [`CELLS_MAX`](super::CELLS_MAX)): a cell counts another toward its quorum of cells only
    /// when that one holds it up too (two ways, as members are counted inside a cell).
    #[serde(default)]
    pub sees: Vec<String>,
}

/// Why a summary was refused. Validation changes nothing: the summary is simply left out of
/// placement (and listed in its `rejected`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Error, Serialize, Deserialize)]
pub enum SummaryError {
    /// The name is empty, too long, or not made of lowercase letters, digits and `-`.
    #[error("cell name {name:?} is not a DNS label (1 to 63 of a-z, 0-9, -)")]
    NameInvalid {
        /// The name, cut to 64 bytes.
        name: String,
    },
    /// A list is longer than its limit.
    #[error("{field} lists {count} entries, more than {max}")]
    TooMany {
        /// The list.
        field: String,
        /// Its length.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// A string is empty where it may not be, or longer than its limit.
    #[error("a {field} is {len} bytes long, outside 1..={max} (zone names may be empty)")]
    BadLength {
        /// The field.
        field: String,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A list is not sorted or repeats an entry.
    #[error("{field} are not sorted, or repeat an entry")]
    NotCanonical {
        /// The list.
        field: String,
    },
    /// More members, or more capacity, than any real cell has.
    #[error("{members} members with {capacity:?} is more than a cell can have")]
    Absurd {
        /// Members reported.
        members: u32,
        /// Capacity reported.
        capacity: Resources,
    },
    /// Capacity without a member to hold it.
    #[error("{members} members with capacity {capacity:?}: capacity needs members")]
    MembersDisagree {
        /// Members reported.
        members: u32,
        /// Capacity reported.
        capacity: Resources,
    },
    /// More free than total, or one member larger than the whole cell.
    #[error("{field} exceeds the capacity in {resource:?}")]
    ExceedsCapacity {
        /// `free`, `largest`, a zone, or a label key (all its values together).
        field: String,
        /// The resource.
        resource: Resource,
    },
    /// The zones' capacities add up to more than the cell's.
    #[error("the zones' capacities add up to {sum:?}, more than the cell's {capacity:?}")]
    ZonesDisagree {
        /// What they add up to.
        sum: Resources,
        /// The cell's capacity.
        capacity: Resources,
    },
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= CELL_NAME_LEN_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn length(field: &str, s: &str, min: usize, max: usize) -> Result<(), SummaryError> {
    if s.len() < min || s.len() > max {
        return Err(SummaryError::BadLength {
            field: field.to_string(),
            len: s.len(),
            max,
        });
    }
    Ok(())
}

fn count(field: &str, count: usize, max: usize) -> Result<(), SummaryError> {
    if count > max {
        return Err(SummaryError::TooMany {
            field: field.to_string(),
            count,
            max,
        });
    }
    Ok(())
}

/// `part` fits in `whole` in every resource, or the error naming `field`.
fn within(field: &str, part: &Resources, whole: &Resources) -> Result<(), SummaryError> {
    let resource = if part.cpu_millis > whole.cpu_millis {
        Resource::Cpu
    } else if part.memory_bytes > whole.memory_bytes {
        Resource::Memory
    } else if part.ports > whole.ports {
        Resource::Ports
    } else {
        return Ok(());
    };
    Err(SummaryError::ExceedsCapacity {
        field: field.to_string(),
        resource,
    })
}

impl CellSummary {
    /// Checks sizes first (cheap, before anything is summed), then that the figures add up.
    pub fn validate(&self) -> Result<(), SummaryError> {
        if !valid_name(&self.cell) {
            let name = self.cell.chars().take(64).collect();
            return Err(SummaryError::NameInvalid { name });
        }
        count("zones", self.zones.len(), CELL_ZONES_MAX)?;
        count("labels", self.labels.len(), CELL_LABELS_MAX)?;
        count("contacts", self.contacts.len(), CELL_CONTACTS_MAX)?;
        for z in &self.zones {
            length("zone name", &z.zone, 0, CELL_TOKEN_LEN_MAX)?;
        }
        for l in &self.labels {
            length("label key", &l.key, 1, CELL_TOKEN_LEN_MAX)?;
            length("label value", &l.value, 1, CELL_TOKEN_LEN_MAX)?;
        }
        for c in &self.contacts {
            length("contact", c, 1, CELL_CONTACT_LEN_MAX)?;
        }
        count("sees", self.sees.len(), super::CELLS_MAX)?;
        if let Some(bad) = self
            .sees
            .iter()
            .find(|c| !valid_name(c) || **c == self.cell)
        {
            let name = bad.chars().take(64).collect();
            return Err(SummaryError::NameInvalid { name });
        }
        if !self.sees.windows(2).all(|p| p[0] < p[1]) {
            return Err(SummaryError::NotCanonical {
                field: "sees".into(),
            });
        }
        if !self.zones.windows(2).all(|p| p[0].zone < p[1].zone) {
            return Err(SummaryError::NotCanonical {
                field: "zones".into(),
            });
        }
        let label_key = |l: &LabelOffer| (l.key.clone(), l.value.clone());
        if !self
            .labels
            .windows(2)
            .all(|p| label_key(&p[0]) < label_key(&p[1]))
        {
            return Err(SummaryError::NotCanonical {
                field: "labels".into(),
            });
        }
        let members = u64::from(self.members);
        let cap = self.capacity;
        // Members may all be draining (no capacity); capacity needs a member.
        if self.members == 0 && cap != Resources::default() {
            return Err(SummaryError::MembersDisagree {
                members: self.members,
                capacity: cap,
            });
        }
        if self.members > CELL_MEMBERS_MAX
            || cap.cpu_millis > members.saturating_mul(NODE_CPU_MILLIS_MAX)
            || cap.memory_bytes > members.saturating_mul(NODE_MEMORY_BYTES_MAX)
        {
            return Err(SummaryError::Absurd {
                members: self.members,
                capacity: cap,
            });
        }
        within("free", &self.free, &cap)?;
        within("largest", &self.largest, &cap)?;
        let mut sum = Resources::default();
        for z in &self.zones {
            within(&format!("zone {:?}", z.zone), &z.capacity, &cap)?;
            sum = sum.saturating_add(&z.capacity);
        }
        // Every live member has a zone, but a cell with more zones than fit lists only those
        // with the most capacity: the listed ones add up to no more than the cell.
        if !sum.fits_in(&cap) {
            return Err(SummaryError::ZonesDisagree { sum, capacity: cap });
        }
        // A member has one value per key: a key's values add up to no more than the cell.
        for key in self.labels.chunk_by(|a, b| a.key == b.key) {
            let sum = key
                .iter()
                .fold(Resources::default(), |a, l| a.saturating_add(&l.capacity));
            within(&format!("label {:?}", key[0].key), &sum, &cap)?;
        }
        Ok(())
    }

    /// The ranked capacity of one zone (zero when the cell has none there).
    pub fn zone_capacity(&self, zone: &str) -> Resources {
        self.zones
            .binary_search_by(|z| z.zone.as_str().cmp(zone))
            .map_or(Resources::default(), |at| self.zones[at].capacity)
    }

    /// The label offers of one key, sorted by value.
    pub fn label_values(&self, key: &str) -> &[LabelOffer] {
        let from = self.labels.partition_point(|l| l.key.as_str() < key);
        let to = self.labels.partition_point(|l| l.key.as_str() <= key);
        &self.labels[from..to]
    }
}
