//! Who workloads run as when their spec does not say, and whether root is allowed: the agent's
//! `--workload-user` (default `nobody`) and `--allow-root-workloads` (off). Both runtimes take
//! it: a process with no `user` runs as the workload user, a container with no `user` as its
//! numeric `uid:gid`; a spec whose `user` is root runs only where root is allowed.

pub use super::process::RunAs;

/// The agent's rules for workload users.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadUsers {
    /// Who a workload with no `user` runs as; `None`: the agent's own user (embedding and tests;
    /// `shoal agent` always sets one).
    pub default: Option<RunAs>,
    /// A spec asking for root (`root`, `0`, `0:G`, or a name that is uid 0 on this host) runs.
    pub root_allowed: bool,
}

impl WorkloadUsers {
    /// Workloads without `user` run as the agent's user, and root is allowed: what a runtime
    /// embedded in tests or tools does unless told otherwise.
    pub fn agents() -> WorkloadUsers {
        WorkloadUsers {
            default: None,
            root_allowed: true,
        }
    }

    /// The rules `shoal agent --workload-user USER [--allow-root-workloads]` sets, or what is
    /// wrong with them: `user` must resolve on this host, and be root only with root allowed.
    pub fn of_flags(user: &str, root_allowed: bool) -> Result<WorkloadUsers, String> {
        let run_as = super::process::resolve_user(user)
            .map_err(|why| format!("--workload-user {user:?}: {why}"))?;
        if run_as.uid == 0 && !root_allowed {
            return Err(format!(
                "--workload-user {user:?} is root (uid 0): every workload without a `user` would \
                 run as root; choose an unprivileged user (the default is nobody) or add \
                 --allow-root-workloads"
            ));
        }
        Ok(WorkloadUsers {
            default: Some(run_as),
            root_allowed,
        })
    }

    /// Why a workload of `replica` asking for `user` (which is uid `uid`) does not run here, if
    /// it does not.
    pub fn refuse_root(
        &self,
        replica: &impl std::fmt::Display,
        user: &str,
        uid: u32,
    ) -> Option<String> {
        (uid == 0 && !self.root_allowed).then(|| root_refusal(replica, user))
    }
}

/// The reason a host gives for a root workload it does not run.
pub fn root_refusal(replica: &impl std::fmt::Display, user: &str) -> String {
    format!(
        "{replica}: user {user:?} is root, and this agent does not run root workloads (start it \
         with --allow-root-workloads)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_are_checked_with_the_flag_named() {
        let err = WorkloadUsers::of_flags("no-such-user-here", false).unwrap_err();
        assert!(
            err.contains("--workload-user") && err.contains("no such user"),
            "{err}"
        );
        let err = WorkloadUsers::of_flags("root", false).unwrap_err();
        assert!(err.contains("--allow-root-workloads"), "{err}");
        let root = WorkloadUsers::of_flags("0:0", true).unwrap();
        assert_eq!(root.default, Some(RunAs { uid: 0, gid: 0 }));
        let nobody = WorkloadUsers::of_flags("65534:65534", false).unwrap();
        assert_eq!(
            nobody.default,
            Some(RunAs {
                uid: 65534,
                gid: 65534
            })
        );
        assert!(nobody
            .refuse_root(&"w/0", "0", 0)
            .unwrap()
            .contains("--allow-root-workloads"));
        assert_eq!(nobody.refuse_root(&"w/0", "1000", 1000), None);
        assert_eq!(root.refuse_root(&"w/0", "0", 0), None);
    }
}
