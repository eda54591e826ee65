//! A local busybox image, made without a registry or a builder.
//!
//! Debian's `busybox-static` ships one static binary, `/bin/busybox`. A tar holding it as
//! `bin/busybox` (mode 755) plus links like `bin/sh -> busybox`, sent to the engine's image create
//! endpoint with `fromSrc=-` and `CMD ["/bin/sh"]`, is what `docker import` does. (Not
//! `import_image`: that is `docker load`, which expects a saved image, not a root filesystem.)

use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;

use super::body::{engine_error, status_of};
use crate::node::runtime::RuntimeError;

/// Where Debian's `busybox-static` installs the binary (merged-/usr systems have both).
pub const BUSYBOX_PATHS: [&str; 2] = ["/bin/busybox", "/usr/bin/busybox"];

/// The applets linked in the image: a shell, the usual tools, and servers for probe tests.
pub const BUSYBOX_APPLETS: &[&str] = &[
    "sh", "ash", "sleep", "httpd", "nc", "wget", "cat", "echo", "ls", "ps", "kill", "true",
    "false", "env", "test", "[", "mkdir", "rm", "touch", "printf", "grep", "sed", "head", "tail",
    "id", "hostname", "date", "seq", "wc", "pwd", "uname", "timeout", "sort", "yes",
];

/// Makes sure `repo:tag` exists in the engine, importing it from the host's static busybox when
/// it does not. Returns the image id. Idempotent: an existing image is left alone.
pub async fn ensure_busybox_image(
    docker: &Docker,
    repo: &str,
    tag: &str,
) -> Result<String, RuntimeError> {
    // Concurrent imports would each make an image and leave all but the last one untagged.
    static IMPORTING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = IMPORTING.lock().await;
    let reference = format!("{repo}:{tag}");
    match docker.inspect_image(&reference).await {
        Ok(image) => return Ok(image.id.unwrap_or(reference)),
        Err(e) if status_of(&e) == Some(404) => {}
        Err(e) => return Err(engine_error("inspect image", e)),
    }
    import_busybox(docker, repo, tag, busybox_rootfs(None)?).await
}

/// Imports a busybox image as `repo:tag` whose layer is unlike any other: it also holds
/// `etc/shoal-marker` with `marker` in it. A registry test pushes it and removes it locally, so
/// that a pull has a whole layer (~2 MB) to download. Returns the image id.
pub async fn import_marked_busybox_image(
    docker: &Docker,
    repo: &str,
    tag: &str,
    marker: &str,
) -> Result<String, RuntimeError> {
    import_busybox(docker, repo, tag, busybox_rootfs(Some(marker))?).await
}

async fn import_busybox(
    docker: &Docker,
    repo: &str,
    tag: &str,
    tarball: Vec<u8>,
) -> Result<String, RuntimeError> {
    let reference = format!("{repo}:{tag}");
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .changes(vec!["CMD [\"/bin/sh\"]".to_string()])
        .build();
    let body = bollard::body_full(tarball.into());
    let mut progress = docker.create_image(Some(options), Some(body), None);
    while let Some(step) = progress.next().await {
        step.map_err(|e| engine_error("import image", e))?;
    }
    let image = docker
        .inspect_image(&reference)
        .await
        .map_err(|e| engine_error("inspect imported image", e))?;
    Ok(image.id.unwrap_or(reference))
}

/// The root filesystem tarball: `bin/busybox`, its applet links, an empty `tmp`, and with a
/// marker `etc/shoal-marker`.
fn busybox_rootfs(marker: Option<&str>) -> Result<Vec<u8>, RuntimeError> {
    let (path, binary) = BUSYBOX_PATHS
        .iter()
        .find_map(|p| std::fs::read(p).ok().map(|bytes| (*p, bytes)))
        .ok_or_else(|| RuntimeError::StartFailed {
            reason: format!(
                "no busybox binary at {}: install Debian's busybox-static",
                BUSYBOX_PATHS.join(" or ")
            ),
        })?;
    if has_interpreter(&binary) {
        return Err(RuntimeError::StartFailed {
            reason: format!("{path} is dynamically linked: install busybox-static, not busybox"),
        });
    }
    let io = |e: std::io::Error| RuntimeError::io("building the busybox image tarball", e);
    let mut tar = tar::Builder::new(Vec::new());
    for (dir, mode) in [("bin/", 0o755), ("tmp/", 0o1777), ("etc/", 0o755)] {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(mode);
        header.set_size(0);
        tar.append_data(&mut header, dir, std::io::empty())
            .map_err(io)?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o755);
    header.set_size(binary.len() as u64);
    tar.append_data(&mut header, "bin/busybox", binary.as_slice())
        .map_err(io)?;
    for applet in BUSYBOX_APPLETS {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_mode(0o777);
        header.set_size(0);
        tar.append_link(&mut header, format!("bin/{applet}"), "busybox")
            .map_err(io)?;
    }
    if let Some(marker) = marker {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_size(marker.len() as u64);
        tar.append_data(&mut header, "etc/shoal-marker", marker.as_bytes())
            .map_err(io)?;
    }
    tar.into_inner().map_err(io)
}

/// Whether an ELF binary asks for a dynamic loader (has a `PT_INTERP` program header). Anything
/// that is not a 64-bit little-endian ELF is assumed static and left for the engine to judge.
fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return false;
    }
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (entry_size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).any(|i| {
        let at = phoff.saturating_add(i.saturating_mul(entry_size));
        elf.get(at..at + 4)
            .is_some_and(|t| u32::from_le_bytes(t.try_into().expect("4 bytes")) == PT_INTERP)
    })
}

#[cfg(test)]
mod tests {
    use super::has_interpreter;

    #[test]
    fn tells_static_from_dynamic_binaries() {
        let own = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(
            has_interpreter(&own),
            "test binaries are dynamically linked"
        );
        assert!(!has_interpreter(b"#!/bin/sh\necho not elf\n"));
        if let Ok(busybox) = std::fs::read("/bin/busybox") {
            assert!(!has_interpreter(&busybox), "busybox-static is static");
        }
    }
}
