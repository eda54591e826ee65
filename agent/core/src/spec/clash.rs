//! Host ports two workloads both fix. Before placement algorithm 8 placement does not keep them
//! apart (docs/operations.md, "Named ports"): a host given replicas of both starts only the
//! first, the other's start fails there with a reason. Since 8 (mesh version 10) it does, so
//! together they need distinct hosts. An apply says so at once, as a note.

use super::WorkloadSpec;

/// Each host port `spec` fixes that one of `others` (by name, `spec` itself skipped) fixes too,
/// for the same protocol: one line per port, naming the other workloads. At most
/// [`CLASHES_MAX`] lines, in port order; the last says how many more were left out.
/// `apart`: placement keeps replicas fixing one port on distinct hosts (algorithm 8 and later).
pub fn fixed_port_clashes<'a>(
    spec: &WorkloadSpec,
    others: impl IntoIterator<Item = &'a WorkloadSpec>,
    apart: bool,
) -> Vec<String> {
    let mine = spec.fixed_host_ports();
    if mine.is_empty() {
        return Vec::new();
    }
    let mut by_port: std::collections::BTreeMap<(u16, &'static str), Vec<&str>> =
        std::collections::BTreeMap::new();
    for other in others.into_iter().filter(|o| o.name != spec.name) {
        for (port, protocol) in other.fixed_host_ports() {
            if mine.contains(&(port, protocol)) {
                let names = by_port.entry((port, protocol.as_str())).or_default();
                if !names.contains(&other.name.as_str()) {
                    names.push(&other.name);
                }
            }
        }
    }
    let total = by_port.len();
    let mut lines: Vec<String> = by_port
        .into_iter()
        .take(CLASHES_MAX)
        .map(|((port, protocol), mut names)| {
            names.sort_unstable();
            if apart {
                format!(
                    "host port {port}/{protocol} is also fixed by {}: their replicas never share a \
                     host, so together they need as many hosts as they have replicas (where hosts \
                     run short, the higher priority keeps them)",
                    names.join(", ")
                )
            } else {
                format!(
                    "host port {port}/{protocol} is also fixed by {}: a host given replicas of \
                     both starts only one of them (keep them apart with placement constraints)",
                    names.join(", ")
                )
            }
        })
        .collect();
    if total > CLASHES_MAX {
        lines.push(format!(
            "and {} more ports fixed by other workloads",
            total - CLASHES_MAX
        ));
    }
    lines
}

/// Lines [`fixed_port_clashes`] writes before it summarizes.
pub const CLASHES_MAX: usize = 4;

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> WorkloadSpec {
        let text = format!("{text}\n[resources]\ncpu = \"1\"\nmemory = \"1Gi\"\n");
        WorkloadSpec::from_toml_str(&text, "t.toml").unwrap()
    }

    #[test]
    fn names_every_other_workload_that_fixes_the_same_port_and_protocol() {
        let web = spec(
            "name = \"web\"\n[container]\nimage = \"nginx\"\n\
             ports = [{ container = 80, host = 80 }, { container = 53, host = 53, protocol = \"udp\" }]",
        );
        let ingress = spec(
            "name = \"ingress\"\n[process]\ncommand = [\"i\"]\n\
             ports = [{ name = \"http\", port = 80 }, { name = \"dns\", port = 53 }]",
        );
        let admin = spec(
            "name = \"admin\"\n[container]\nimage = \"a\"\nports = [{ container = 8080, host = 80 }]",
        );
        let free =
            spec("name = \"free\"\n[process]\ncommand = [\"f\"]\nports = [{ name = \"http\" }]");
        let lines = fixed_port_clashes(&web, [&web, &ingress, &admin, &free], false);
        assert_eq!(
            lines,
            vec![
                "host port 80/tcp is also fixed by admin, ingress: a host given replicas of both \
                 starts only one of them (keep them apart with placement constraints)"
            ],
            "53/tcp of ingress is not 53/udp of web; web itself and a port left to the agent \
             do not count"
        );
        assert!(fixed_port_clashes(&free, [&web, &ingress], false).is_empty());
        let apart = fixed_port_clashes(&web, [&admin], true);
        assert_eq!(
            apart,
            vec![
                "host port 80/tcp is also fixed by admin: their replicas never share a host, so \
                 together they need as many hosts as they have replicas (where hosts run short, \
                 the higher priority keeps them)"
            ]
        );
    }

    #[test]
    fn many_clashes_are_summarized() {
        let ports = |name: &str| {
            let list: Vec<String> = (1..=6)
                .map(|i| format!("{{ name = \"p{i}\", port = {} }}", 9000 + i))
                .collect();
            spec(&format!(
                "name = \"{name}\"\n[process]\ncommand = [\"x\"]\nports = [{}]",
                list.join(", ")
            ))
        };
        let (a, b) = (ports("a"), ports("b"));
        let lines = fixed_port_clashes(&a, [&b], false);
        assert_eq!(lines.len(), CLASHES_MAX + 1);
        assert!(lines[0].starts_with("host port 9001/tcp is also fixed by b:"));
        assert_eq!(
            lines[CLASHES_MAX],
            "and 2 more ports fixed by other workloads"
        );
    }
}
