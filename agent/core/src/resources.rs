//! Resource quantities: CPU in millicores and memory in bytes, parsed from the notation operators
//! know from Kubernetes ("250m", "0.5", "2"; "64Mi", "1Gi", "512M").

use serde::{Deserialize, Serialize};

/// A bundle of the resources placement accounts for: CPU and memory, declared by specs and
/// nodes, and host ports, which a replica needs one of for each port the agent allocates
/// (`ports = [{ name = "http" }]`) and a node has as many of as its `--port-range` holds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Resources {
    /// CPU in thousandths of a core.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Host ports: of a replica, how many the agent allocates for it; of a node, how many its
    /// port range holds. Specs never write it (a spec's `resources` has it 0): placement derives
    /// a replica's from its named ports.
    #[serde(default)]
    pub ports: u64,
}

impl Resources {
    /// A bundle of CPU and memory, without ports.
    pub const fn new(cpu_millis: u64, memory_bytes: u64) -> Self {
        Self {
            cpu_millis,
            memory_bytes,
            ports: 0,
        }
    }

    /// The same bundle with this many ports.
    pub const fn with_ports(self, ports: u64) -> Self {
        Self { ports, ..self }
    }

    /// True when `self` fits inside `room` in every resource.
    pub fn fits_in(&self, room: &Resources) -> bool {
        self.cpu_millis <= room.cpu_millis
            && self.memory_bytes <= room.memory_bytes
            && self.ports <= room.ports
    }

    /// Component-wise sum, saturating (capacities are bounded well below overflow by validation).
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            ports: self.ports.saturating_add(other.ports),
        }
    }

    /// Component-wise difference, saturating at zero.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            ports: self.ports.saturating_sub(other.ports),
        }
    }
}

/// Why a quantity did not parse. The message is for humans; callers add file and field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantityError(pub String);

impl std::fmt::Display for QuantityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for QuantityError {}

/// Parses a CPU quantity into millicores: "250m", "0.5", "2", "1.25". At most three decimals.
pub fn parse_cpu_millis(text: &str) -> Result<u64, QuantityError> {
    let bad = || {
        QuantityError(format!(
            "{text:?} is not a CPU quantity (examples: 250m, 0.5, 2)"
        ))
    };
    let t = text.trim();
    if t.is_empty() {
        return Err(bad());
    }
    if let Some(m) = t.strip_suffix('m') {
        if m.is_empty() || !m.bytes().all(|b| b.is_ascii_digit()) || m.len() > 12 {
            return Err(bad());
        }
        return m.parse::<u64>().map_err(|_| bad());
    }
    let (whole, frac) = match t.split_once('.') {
        Some((w, f)) => (w, f),
        None => (t, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) || whole.len() > 9 {
        return Err(bad());
    }
    if frac.len() > 3 {
        return Err(QuantityError(format!(
            "{text:?} is finer than a millicore (at most 3 decimals, or use e.g. 250m)"
        )));
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let mut frac_millis: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| bad())?
    };
    for _ in frac.len()..3 {
        frac_millis *= 10;
    }
    Ok(whole * 1000 + frac_millis)
}

/// Parses a memory quantity into bytes: "64Mi", "1Gi", "512M", "1000", "1.5Gi".
pub fn parse_memory_bytes(text: &str) -> Result<u64, QuantityError> {
    let bad = || {
        QuantityError(format!(
            "{text:?} is not a memory quantity (examples: 64Mi, 1Gi, 512M, 1048576)"
        ))
    };
    let t = text.trim();
    const UNITS: [(&str, u64); 10] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
    ];
    let (number, unit) = UNITS
        .iter()
        .find_map(|(suffix, mult)| t.strip_suffix(suffix).map(|n| (n, *mult)))
        .unwrap_or((t, 1));
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || whole.len() > 18 || frac.len() > 6 {
        return Err(bad());
    }
    if number.contains('.') && frac.is_empty() {
        return Err(bad());
    }
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let mut bytes = whole * unit as u128;
    if !frac.is_empty() {
        let f: u128 = frac.parse().map_err(|_| bad())?;
        let scale = 10u128.pow(frac.len() as u32);
        bytes += f * unit as u128 / scale;
    }
    u64::try_from(bytes).map_err(|_| QuantityError(format!("{text:?} is too large")))
}

/// Formats millicores the way operators write them: "250m", "2".
pub fn format_cpu_millis(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        format!("{}", millis / 1000)
    } else {
        format!("{millis}m")
    }
}

/// Formats bytes with the largest binary unit that divides them exactly: "64Mi", "1Gi", "1000".
pub fn format_memory_bytes(bytes: u64) -> String {
    for (suffix, shift) in [("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// CPU for people reading a table or a message: `500m` under one core, else cores with at most
/// one decimal, `1 core`, `1.2 cores`, `16 cores`. Not for specs: it rounds (use
/// [`format_cpu_millis`] where the value must parse back exactly).
pub fn human_cpu_millis(millis: u64) -> String {
    match millis {
        0..=999 => format!("{millis}m"),
        1000 => "1 core".to_string(),
        _ if millis.is_multiple_of(1000) => format!("{} cores", millis / 1000),
        _ => {
            let tenths = (millis + 50) / 100;
            match tenths % 10 {
                0 => format!("{} cores", tenths / 10),
                d => format!("{}.{d} cores", tenths / 10),
            }
        }
    }
}

/// Memory for people: the largest binary unit the amount reaches, exact when it divides
/// (`64Mi`), else with one decimal (`23.5Gi` for 24683792Ki); bytes under 1Ki as they are.
/// Not for specs (use [`format_memory_bytes`]).
pub fn human_memory_bytes(bytes: u64) -> String {
    for (suffix, shift) in [("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let unit = 1u64 << shift;
        if bytes >= unit {
            if bytes.is_multiple_of(unit) {
                return format!("{}{suffix}", bytes >> shift);
            }
            let tenths = (u128::from(bytes) * 10 + u128::from(unit / 2)) / u128::from(unit);
            return match tenths % 10 {
                0 => format!("{}{suffix}", tenths / 10),
                d => format!("{}.{d}{suffix}", tenths / 10),
            };
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_for_people() {
        assert_eq!(human_cpu_millis(0), "0m");
        assert_eq!(human_cpu_millis(500), "500m");
        assert_eq!(human_cpu_millis(1000), "1 core");
        assert_eq!(human_cpu_millis(1200), "1.2 cores");
        assert_eq!(human_cpu_millis(1250), "1.3 cores");
        assert_eq!(human_cpu_millis(1990), "2 cores");
        assert_eq!(human_cpu_millis(16_000), "16 cores");
        assert_eq!(human_memory_bytes(24_683_792 * 1024), "23.5Gi");
        assert_eq!(human_memory_bytes(24_651_024 * 1024), "23.5Gi");
        assert_eq!(human_memory_bytes(64 << 20), "64Mi");
        assert_eq!(human_memory_bytes((1 << 30) - 1), "1024Mi");
        assert_eq!(human_memory_bytes(1536 << 20), "1.5Gi");
        assert_eq!(human_memory_bytes(1000), "1000");
        assert_eq!(human_memory_bytes(1025), "1Ki");
        assert!(human_memory_bytes(u64::MAX).ends_with("Pi"), "no overflow");
    }

    #[test]
    fn cpu_quantities() {
        assert_eq!(parse_cpu_millis("250m"), Ok(250));
        assert_eq!(parse_cpu_millis("0.5"), Ok(500));
        assert_eq!(parse_cpu_millis("2"), Ok(2000));
        assert_eq!(parse_cpu_millis(".25"), Ok(250));
        assert_eq!(parse_cpu_millis("1.125"), Ok(1125));
        for bad in [
            "", "fast", "m", "1.2345", "-1", "1e3", "2 cores", "1..2", ".",
        ] {
            assert!(parse_cpu_millis(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            parse_cpu_millis("fast").unwrap_err().to_string(),
            "\"fast\" is not a CPU quantity (examples: 250m, 0.5, 2)"
        );
    }

    #[test]
    fn memory_quantities() {
        assert_eq!(parse_memory_bytes("64Mi"), Ok(64 << 20));
        assert_eq!(parse_memory_bytes("1Gi"), Ok(1 << 30));
        assert_eq!(parse_memory_bytes("512M"), Ok(512_000_000));
        assert_eq!(parse_memory_bytes("1000"), Ok(1000));
        assert_eq!(parse_memory_bytes("1.5Gi"), Ok(3 << 29));
        for bad in [
            "",
            "lots",
            "Mi",
            "-1Mi",
            "1.Gi",
            "1 Gi",
            "99999999999999999999",
        ] {
            assert!(parse_memory_bytes(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse_memory_bytes("99999Pi").is_err());
    }

    #[test]
    fn formatting_round_trips() {
        for m in [1u64, 250, 1000, 2500, 64000] {
            assert_eq!(parse_cpu_millis(&format_cpu_millis(m)), Ok(m));
        }
        for b in [1u64, 1000, 1 << 20, 3 << 29, 1 << 40] {
            assert_eq!(parse_memory_bytes(&format_memory_bytes(b)), Ok(b));
        }
    }
}
