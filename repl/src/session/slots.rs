//! Persistent evcxr build directories ("slots"), one per live session.
//!
//! evcxr compiles every cell, and every `:dep` crate (our engine above all), inside one
//! directory (`EVCXR_TMPDIR`). A throw-away directory means the engine is rebuilt from
//! scratch by every new session (tens of seconds); a shared one breaks when two sessions
//! build into it at once. So we keep a small pool of directories,
//! `<cache>/evcxr/slot-0`, `slot-1`, ..., each guarded by an exclusive `flock` on
//! `slot-N.lock` that is held for as long as the session lives. A new session takes the
//! first slot whose lock it can get, so a warm slot (the engine already built there) is
//! reused whenever no other session holds it.

use anyhow::{Context, Result, bail};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// How many slots a cache directory may hold before [`Slot::acquire`] gives up.
pub const MAX_SLOTS: usize = 64;

/// The cache directory: `$JAXREPL_CACHE_DIR`, else `$XDG_CACHE_HOME/jaxrepl`, else
/// `~/.cache/jaxrepl`, else `<tmp>/jaxrepl-cache` when no home directory is known.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("JAXREPL_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("jaxrepl");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(home) => PathBuf::from(home).join(".cache").join("jaxrepl"),
        None => std::env::temp_dir().join("jaxrepl-cache"),
    }
}

/// One evcxr build directory, exclusively locked while this value lives.
#[derive(Debug)]
pub struct Slot {
    index: usize,
    dir: PathBuf,
    // The open lock file holds the flock; closing it (on drop) releases the slot.
    _lock: File,
}

impl Slot {
    /// Takes the first free slot under `root` (normally `cache_dir()/evcxr`), creating
    /// directories as needed.
    ///
    /// Errors: the directory cannot be created, or all [`MAX_SLOTS`] slots are held by
    /// live sessions.
    pub fn acquire(root: &Path) -> Result<Slot> {
        std::fs::create_dir_all(root)
            .with_context(|| format!("creating the slot directory {}", root.display()))?;
        for index in 0..MAX_SLOTS {
            let lock_path = root.join(format!("slot-{index}.lock"));
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&lock_path)
                .with_context(|| format!("opening {}", lock_path.display()))?;
            // SAFETY: flock on a descriptor we own; no memory is involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                continue;
            }
            let dir = root.join(format!("slot-{index}"));
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("creating {}", dir.display()))?;
            return Ok(Slot {
                index,
                dir,
                _lock: file,
            });
        }
        bail!(
            "all {MAX_SLOTS} evaluation slots under {} are in use by other sessions",
            root.display()
        )
    }

    /// The slot number (0 is the one `jaxrepl --warm` prepares).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The directory evcxr builds in (`EVCXR_TMPDIR`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_gets_next_slot_and_release_frees_it() {
        let root = std::env::temp_dir().join(format!("jaxrepl-slots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let a = Slot::acquire(&root).unwrap();
        let b = Slot::acquire(&root).unwrap();
        assert_eq!((a.index(), b.index()), (0, 1));
        assert!(a.dir().ends_with("slot-0") && a.dir().is_dir());
        drop(a);
        let c = Slot::acquire(&root).unwrap();
        assert_eq!(c.index(), 0);
        drop((b, c));
        let _ = std::fs::remove_dir_all(&root);
    }
}
