//! An in-memory disk for the desired-state store, for tests and the simulator: it survives the
//! store being dropped and reopened (an agent restart), loses what was never synced on
//! [`MemDisk::crash`], and can be made to fail writes or run out of space.

use std::sync::{Arc, Mutex, MutexGuard};

use redb::StorageBackend;

/// A simulated disk. Clones share the same contents: keep one, hand another to
/// [`super::DesiredStore::open_in_memory`], and reopen after a drop or a crash.
#[derive(Clone, Debug, Default)]
pub struct MemDisk {
    inner: Arc<Mutex<Disk>>,
}

#[derive(Debug, Default)]
struct Disk {
    /// What reads see: every write so far.
    live: Vec<u8>,
    /// How to take `live` back to its contents at the last sync, newest last: what survives a
    /// crash. (A second copy of the disk cost as much as the disk, about 140 KB per simulated
    /// agent; the bytes a write replaced since the last sync are all a crash needs.)
    undo: Vec<Op>,
    /// Largest size the disk can grow to, if limited.
    capacity_bytes: Option<u64>,
    /// When set, every write, resize and sync fails.
    failing: bool,
}

#[derive(Debug)]
enum Op {
    Write { offset: usize, data: Vec<u8> },
    SetLen(usize),
}

impl MemDisk {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every later write, resize and sync fail (an I/O error), or work again.
    pub fn set_failing(&self, failing: bool) {
        self.lock().failing = failing;
    }

    /// Limits the disk's size: growing past it fails with "storage full". `None` lifts the limit.
    pub fn set_capacity_bytes(&self, capacity_bytes: Option<u64>) {
        self.lock().capacity_bytes = capacity_bytes;
    }

    /// Current size in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.lock().live.len() as u64
    }

    /// Power loss: everything written since the last sync is gone. Drop the store first (a
    /// crashed process holds nothing), then reopen.
    pub fn crash(&self) {
        let mut disk = self.lock();
        let Disk { live, undo, .. } = &mut *disk;
        while let Some(op) = undo.pop() {
            apply(live, &op);
        }
    }

    /// A redb backend over this disk.
    pub(super) fn backend(&self) -> MemBackend {
        MemBackend(self.clone())
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        // A panic while holding the lock leaves plain bytes behind, which are still usable.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Disk {
    /// Applies `op` to `live`, first recording in `undo` what takes it back.
    fn apply_undoably(&mut self, op: &Op) {
        let was = self.live.len();
        match *op {
            Op::Write { offset, ref data } => {
                let end = offset + data.len();
                if end > was {
                    self.undo.push(Op::SetLen(was));
                }
                if offset < was {
                    let old = self.live[offset..end.min(was)].to_vec();
                    self.undo.push(Op::Write { offset, data: old });
                }
            }
            Op::SetLen(len) if len < was => {
                let tail = self.live[len..].to_vec();
                self.undo.push(Op::Write {
                    offset: len,
                    data: tail,
                });
                self.undo.push(Op::SetLen(was));
            }
            Op::SetLen(len) if len > was => self.undo.push(Op::SetLen(was)),
            Op::SetLen(_) => {}
        }
        apply(&mut self.live, op);
    }

    fn check_writable(&self, grows_to: usize) -> std::io::Result<()> {
        if self.failing {
            return Err(std::io::Error::other("simulated I/O error"));
        }
        if self.capacity_bytes.is_some_and(|cap| grows_to as u64 > cap) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "simulated full disk",
            ));
        }
        Ok(())
    }
}

fn apply(bytes: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { offset, data } => {
            let end = offset + data.len();
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[*offset..end].copy_from_slice(data);
        }
        Op::SetLen(len) => bytes.resize(*len, 0),
    }
}

fn to_usize(n: u64) -> std::io::Result<usize> {
    usize::try_from(n).map_err(|_| std::io::Error::other("offset out of range"))
}

/// The redb side of a [`MemDisk`].
#[derive(Debug)]
pub(super) struct MemBackend(MemDisk);

impl StorageBackend for MemBackend {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.0.len_bytes())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let disk = self.0.lock();
        let start = to_usize(offset)?;
        let source = disk.live.get(start..start + out.len()).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past end")
        })?;
        out.copy_from_slice(source);
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut disk = self.0.lock();
        let len = to_usize(len)?;
        disk.check_writable(len)?;
        disk.apply_undoably(&Op::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        let mut disk = self.0.lock();
        disk.check_writable(0)?;
        disk.undo.clear();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut disk = self.0.lock();
        let offset = to_usize(offset)?;
        disk.check_writable(offset + data.len())?;
        disk.apply_undoably(&Op::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The undo log against the obvious model (a synced copy replayed at each sync): any mix
    /// of writes that overlap, extend and stay inside, truncations, growths, syncs and crashes
    /// reads the same.
    #[test]
    fn a_crash_takes_the_disk_back_to_its_last_sync() {
        let disk = MemDisk::new();
        let backend = disk.backend();
        let (mut model_live, mut model_synced) = (Vec::<u8>::new(), Vec::<u8>::new());
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for step in 0..5_000 {
            match next(10) {
                0..=4 => {
                    let offset = next(300) as usize;
                    let data: Vec<u8> = (0..next(64)).map(|_| next(255) as u8 + 1).collect();
                    backend.write(offset as u64, &data).unwrap();
                    let op = Op::Write { offset, data };
                    apply(&mut model_live, &op);
                }
                5 | 6 => {
                    let len = next(400) as usize;
                    backend.set_len(len as u64).unwrap();
                    apply(&mut model_live, &Op::SetLen(len));
                }
                7 | 8 => {
                    backend.sync_data().unwrap();
                    model_synced = model_live.clone();
                }
                _ => {
                    disk.crash();
                    model_live = model_synced.clone();
                }
            }
            assert_eq!(disk.lock().live, model_live, "after step {step}");
        }
    }
}
