//! The user a process instance runs as (the spec's `user`): resolved on this host, applied by
//! util-linux's `setpriv` (real and effective ids, supplementary groups cleared: never root's),
//! and given the replica's own directories. This crate forbids `unsafe`, so the change of user
//! happens in `setpriv`, which then execs the command (same pid).

use std::ffi::OsStr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::core::spec::user::Id;
use crate::node::runtime::users::WorkloadUsers;
use crate::node::runtime::{RuntimeError, StartRequest};

/// util-linux's `setpriv`.
const SETPRIV: &str = "setpriv";

/// A resolved user and group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    /// The user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
}

/// Who `request`'s instance runs as: its spec's `user` resolved on this host, or, without one,
/// the agent's workload user (`None`: the agent's own user). A root `user` where the agent does
/// not allow root is refused with the flag named.
pub(super) fn resolve(
    request: &StartRequest,
    users: &WorkloadUsers,
) -> Result<Option<RunAs>, RuntimeError> {
    let Some(text) = request.spec.user.as_deref() else {
        return Ok(users.default);
    };
    let failed = |why: String| RuntimeError::StartFailed {
        reason: format!("{}: user {text:?}: {why}", request.replica),
    };
    let run_as = resolve_user(text).map_err(failed)?;
    if let Some(reason) = users.refuse_root(&request.replica, text, run_as.uid) {
        return Err(RuntimeError::StartFailed { reason });
    }
    Ok(Some(run_as))
}

/// `text` (a `user` value: name or uid, optionally `:` group) resolved on this host, or why not.
pub fn resolve_user(text: &str) -> Result<RunAs, String> {
    let user = crate::core::spec::user::parse(text)?;
    if !on_path(SETPRIV) {
        return Err(
            "running as another user needs util-linux's setpriv on this host, and it \
             is not in the agent's PATH"
                .into(),
        );
    }
    let passwd = |name: &str| getent("passwd", name);
    let (uid, primary_gid) = match &user.user {
        Id::Num(uid) => (*uid, passwd(&uid.to_string()).and_then(|e| field(&e, 3))),
        Id::Name(name) => {
            let entry = passwd(name).ok_or_else(|| "no such user on this host".to_string())?;
            let uid = field(&entry, 2).ok_or_else(|| "unreadable passwd entry".to_string())?;
            (uid, field(&entry, 3))
        }
    };
    let gid = match &user.group {
        Some(Id::Num(gid)) => *gid,
        Some(Id::Name(name)) => getent("group", name)
            .and_then(|e| field(&e, 2))
            .ok_or_else(|| format!("no group {name:?} on this host"))?,
        None => primary_gid.ok_or_else(|| {
            format!(
                "uid {uid} has no entry in this host's user database, so it has no group: \
                 give one (\"{uid}:{uid}\")"
            )
        })?,
    };
    Ok(RunAs { uid, gid })
}

/// A command that runs `program` as `run_as` (through `setpriv`), or as the agent's user.
pub(super) fn command(
    run_as: Option<&RunAs>,
    program: impl AsRef<OsStr>,
) -> tokio::process::Command {
    let prefix = prefix(run_as);
    let Some((setpriv, args)) = prefix.split_first() else {
        return tokio::process::Command::new(program);
    };
    let mut command = tokio::process::Command::new(setpriv);
    command.args(args).arg(program);
    command
}

/// What goes before a command to run it as `run_as`: `setpriv` with the user, the group and the
/// supplementary groups cleared; nothing for the agent's user. Every command the runtime runs
/// for an instance takes it: its own, `shoal exec`, exec probes and reload hooks (a probe run as
/// root could run a script the instance's user wrote).
pub(super) fn prefix(run_as: Option<&RunAs>) -> Vec<String> {
    let Some(run_as) = run_as else {
        return Vec::new();
    };
    [
        SETPRIV,
        "--reuid",
        &run_as.uid.to_string(),
        "--regid",
        &run_as.gid.to_string(),
        "--clear-groups",
        "--",
    ]
    .map(str::to_string)
    .to_vec()
}

/// Makes `dir` (a replica's own directory under `data_dir`) its user's: the tree when its top is
/// not theirs yet, and every directory from `data_dir` down to it traversable (o+x: enter by
/// name, no listing), as the agent creates them 0700.
///
/// The tree may hold what the instance's previous user wrote (the spec's `user` changed), and
/// that user's processes may still run. So the walk is GNU `chown -R -P`'s, which never follows
/// a symbolic link, also one swapped in during the walk (a link is changed, not its target),
/// and from a user other than root only that user's entries change hands (`--from`): a hard
/// link it made to a file of root's stays root's.
pub(crate) fn give(dir: &Path, data_dir: &Path, run_as: &RunAs) -> Result<(), RuntimeError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let io = |what: &str, path: &Path, e: std::io::Error| {
        RuntimeError::io(format!("{what} {}", path.display()), e)
    };
    for parent in dir.ancestors().skip(1) {
        if !parent.starts_with(data_dir) {
            break;
        }
        let meta = std::fs::metadata(parent).map_err(|e| io("reading", parent, e))?;
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(mode | 0o001))
                .map_err(|e| io("letting the instance's user through", parent, e))?;
        }
    }
    let meta = std::fs::metadata(dir).map_err(|e| io("reading", dir, e))?;
    if (meta.uid(), meta.gid()) == (run_as.uid, run_as.gid) {
        return Ok(());
    }
    let from = (meta.uid() != 0).then_some(meta.uid());
    chown_tree(dir, run_as, from).map_err(|e| io("giving the instance's user", dir, e))
}

/// `chown -R -P --no-dereference [--from=FROM] UID:GID DIR`.
fn chown_tree(dir: &Path, run_as: &RunAs, from: Option<u32>) -> std::io::Result<()> {
    let mut command = std::process::Command::new("chown");
    command.args(["-R", "-P", "--no-dereference"]);
    if let Some(uid) = from {
        command.arg(format!("--from={uid}"));
    }
    let out = command
        .arg(format!("{}:{}", run_as.uid, run_as.gid))
        .arg("--")
        .arg(dir)
        .output()?;
    if out.status.success() {
        return Ok(());
    }
    let why = String::from_utf8_lossy(&out.stderr);
    Err(std::io::Error::other(format!(
        "chown (GNU coreutils) failed: {}",
        why.trim()
    )))
}

/// `getent DATABASE KEY`'s line (NSS: files, LDAP, ...), if any.
fn getent(database: &str, key: &str) -> Option<String> {
    let out = std::process::Command::new("getent")
        .args([database, key])
        .output()
        .ok()?;
    let line = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !line.trim().is_empty()).then(|| line.trim().to_string())
}

/// The numeric field `index` of a `:`-separated database line.
fn field(line: &str, index: usize) -> Option<u32> {
    line.split(':').nth(index)?.parse().ok()
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_lines_give_their_ids() {
        let line = "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin";
        assert_eq!((field(line, 2), field(line, 3)), (Some(65534), Some(65534)));
        assert_eq!(field("broken", 2), None);
    }

    #[test]
    fn the_command_goes_through_setpriv_with_groups_cleared() {
        let run_as = RunAs {
            uid: 65534,
            gid: 65534,
        };
        let command = command(Some(&run_as), "sleep");
        let std = command.as_std();
        assert_eq!(std.get_program(), SETPRIV);
        let args: Vec<_> = std
            .get_args()
            .map(|a| a.to_string_lossy().to_string())
            .collect();
        assert_eq!(
            args,
            [
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
                "sleep"
            ]
        );
        assert_eq!(
            super::command(None, "sleep").as_std().get_program(),
            "sleep"
        );
    }
}
