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
            // Under the lock: no build runs in the slot now, and a seed copy left by a
            // session that died while copying (see `seed`) is stale.
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("target.seed-")) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
            prune(&dir);
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

    /// Seeds a cold slot, one with no engine built from `engine` (the engine crate's
    /// directory, as the prelude's `:dep` names it; see [`built_for`]): as when several
    /// sessions start at once for the first time, a first build was cut short, or the last
    /// session here used another clone's engine. It copies the build directory of a slot
    /// that has it, replacing what this slot has, so that the first engine cell reuses
    /// that build (a copy of about 1 GB takes seconds; an engine build takes minutes on 2
    /// cores, and a cold one with the MLIR bindings far longer). cargo then rebuilds only
    /// what is stale. The donor is a free slot (its lock taken for the copy) if there is
    /// one, else the held slot whose `target/` is newest: what a live session is building
    /// at that moment (its cell crate) fails cargo's freshness check and is rebuilt.
    /// `cp -a` keeps modification times, which cargo's freshness checks compare. Returns
    /// the donor's directory, or `None` when the slot is warm, no other slot is, or the
    /// copy failed (the partial copy is removed and the slot builds from what it has).
    pub fn seed(&self, engine: &Path) -> Option<PathBuf> {
        let target = self.dir.join("target");
        if built_for(&self.dir, engine) {
            return None;
        }
        let root = self.dir.parent()?;
        let mut free: Option<(PathBuf, File)> = None;
        let mut held: Vec<(std::time::SystemTime, PathBuf)> = vec![];
        for index in (0..MAX_SLOTS).filter(|&i| i != self.index) {
            let dir = root.join(format!("slot-{index}"));
            if !built_for(&dir, engine) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(dir.join("target")) else { continue };
            let lock = OpenOptions::new().read(true).write(true).open(root.join(format!("slot-{index}.lock")));
            // SAFETY: flock on a descriptor we own; no memory is involved.
            let got = lock.as_ref().is_ok_and(|f| unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0);
            match lock {
                Ok(f) if got => {
                    free = Some((dir, f));
                    break;
                }
                _ => held.push((meta.modified().unwrap_or(std::time::UNIX_EPOCH), dir)),
            }
        }
        held.sort();
        let (donor, _donor_lock) = match free {
            Some((dir, f)) => (dir, Some(f)),
            None => (held.pop()?.1, None),
        };
        let partial = self.dir.join(format!("target.seed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(donor.join("target"))
            .arg(&partial)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if copied && std::fs::remove_dir_all(&target).map_or_else(|e| e.kind() == std::io::ErrorKind::NotFound, |_| true) && std::fs::rename(&partial, &target).is_ok() {
            // The manifest and lock file the copied build was made from (evcxr rewrites the
            // manifest at the next `:dep`; the lock file keeps cargo's resolution).
            for file in ["Cargo.toml", "Cargo.lock"] {
                let _ = std::fs::copy(donor.join(file), self.dir.join(file));
            }
            prune(&self.dir);
            Some(donor)
        } else {
            let _ = std::fs::remove_dir_all(&partial);
            None
        }
    }
}

/// Whether slot directory `dir` holds an engine built from the crate at `engine`: the
/// dylib evcxr loads (`target/<triple>/debug/deps/libjax.so`), and the slot's crate
/// manifest (evcxr's `Cargo.toml`, written by the last session's `:dep`) naming `engine`'s
/// path as the prelude does. Another clone's engine counts as not built: cargo would
/// rebuild it from scratch (its paths differ).
pub fn built_for(dir: &Path, engine: &Path) -> bool {
    let dep = format!("path = \"{}\"", engine.display().to_string().replace('\\', "\\\\").replace('"', "\\\""));
    std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains(&dep))
        && std::fs::read_dir(dir.join("target")).is_ok_and(|entries| entries.flatten().any(|e| e.path().join("debug/deps/libjax.so").is_file()))
}

/// The engine's crates as cargo names their artefacts in a slot: the engine dylib, its
/// derive macros, and evcxr's cell crate.
const ENGINE_CRATES: &[&str] = &["jax", "jax_derive", "ctx"];

/// Deletes stale build state in slot directory `dir` (its `target/`); returns the paths
/// deleted. cargo gives a path crate a new incremental directory
/// (`incremental/<crate>-<hash>`, ~270 MB for the engine) and new `deps/` files whenever
/// its source path or metadata hash changes (each clone, each worktree, each engine
/// version), and never deletes the old ones. Kept: for each crate the newest incremental
/// directory (by modification time); for each engine crate ([`ENGINE_CRATES`]) and file
/// kind the newest `deps/lib<crate>-<hash>.<ext>` / `deps/<crate>-<hash>.d`. Errors
/// (a file vanished, no permission) only skip that entry: pruning never fails a session.
pub fn prune(dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let target = dir.join("target");
    let Ok(entries) = std::fs::read_dir(&target) else { return removed };
    // `target/debug` and `target/<triple>/debug` (evcxr builds for an explicit triple).
    let mut profiles = vec![target.join("debug")];
    profiles.extend(entries.flatten().map(|e| e.path().join("debug")));
    for profile in profiles.into_iter().filter(|p| p.is_dir()) {
        prune_older(&profile.join("incremental"), |name, is_dir| is_dir.then(|| hashed_stem(name).map(str::to_string)).flatten(), &mut removed);
        prune_older(&profile.join("deps"), |name, is_dir| (!is_dir).then(|| engine_artefact(name)).flatten(), &mut removed);
    }
    removed
}

/// In directory `dir`, groups entries by `key(name, is_dir)` (`None`: not pruned) and
/// deletes all but the newest of each group, pushing their paths to `removed`.
fn prune_older(dir: &Path, key: impl Fn(&str, bool) -> Option<String>, removed: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut groups: std::collections::HashMap<String, Vec<(std::time::SystemTime, PathBuf)>> = Default::default();
    for entry in entries.flatten() {
        let (Some(name), Ok(meta)) = (entry.file_name().to_str().map(str::to_string), entry.metadata()) else { continue };
        let Some(k) = key(&name, meta.is_dir()) else { continue };
        let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        groups.entry(k).or_default().push((modified, entry.path()));
    }
    for (_, mut members) in groups {
        members.sort();
        members.pop(); // the newest stays
        for (_, path) in members {
            let gone = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
            if gone.is_ok() {
                removed.push(path);
            }
        }
    }
}

/// `jax` of `jax-17tqsu9sxz4qg` (a name, `-`, a hash of letters and digits).
fn hashed_stem(name: &str) -> Option<&str> {
    let (stem, hash) = name.rsplit_once('-')?;
    (!stem.is_empty() && !hash.is_empty() && hash.chars().all(|c| c.is_ascii_alphanumeric())).then_some(stem)
}

/// The group of an engine crate's hashed `deps/` file: `libjax.rmeta` for
/// `libjax-16f91eff14e02a10.rmeta`, `jax.d` for `jax-16f91eff14e02a10.d`; `None` for other
/// crates and for unhashed files (`libjax.so`, which evcxr loads).
fn engine_artefact(name: &str) -> Option<String> {
    let (base, ext) = name.split_once('.')?;
    let stem = hashed_stem(base)?;
    let krate = stem.strip_prefix("lib").filter(|_| ext != "d").unwrap_or(stem);
    ENGINE_CRATES.contains(&krate).then(|| format!("{stem}.{ext}"))
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

    #[test]
    fn a_cold_slot_is_seeded_from_a_warm_one_with_its_modification_times() {
        let root = std::env::temp_dir().join(format!("jaxrepl-seed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let engine = Path::new("/clone/engine");
        let lib = "target/x86_64-unknown-linux-gnu/debug/deps/libjax.so";
        // A slot as a session of the engine at `engine` leaves it.
        let build = |dir: &Path, engine: &Path, content: &[u8]| {
            std::fs::create_dir_all(dir.join(lib).parent().unwrap()).unwrap();
            std::fs::write(dir.join(lib), content).unwrap();
            std::fs::write(dir.join("Cargo.toml"), format!("[dependencies]\njax = {{ path = \"{}\" }}\n", engine.display())).unwrap();
        };
        let a = Slot::acquire(&root).unwrap();
        // No other slot has a build directory: nothing to seed from.
        assert_eq!(a.seed(engine), None);
        build(a.dir(), engine, b"engine");
        std::fs::write(a.dir().join("Cargo.lock"), b"lock").unwrap();
        let when = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        File::options().write(true).open(a.dir().join(lib)).unwrap().set_modified(when).unwrap();
        assert!(built_for(a.dir(), engine) && !built_for(a.dir(), Path::new("/other/engine")));
        // Donor held by a live session.
        let b = Slot::acquire(&root).unwrap();
        assert_eq!(b.seed(engine).as_deref(), Some(a.dir()));
        assert_eq!(std::fs::read(b.dir().join(lib)).unwrap(), b"engine");
        assert_eq!(std::fs::metadata(b.dir().join(lib)).unwrap().modified().unwrap(), when);
        assert_eq!(std::fs::read(b.dir().join("Cargo.lock")).unwrap(), b"lock");
        // A warm slot is left alone; no partial copy is left behind.
        assert_eq!(b.seed(engine), None);
        assert!(!std::fs::read_dir(b.dir()).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with("target.seed-")));
        // Slot 1 now holds another clone's engine: neither warm for `engine` nor a donor.
        build(b.dir(), Path::new("/other/engine"), b"other");
        drop(a);
        let c = Slot::acquire(&root).unwrap();
        assert_eq!(c.index(), 0);
        let d = Slot::acquire(&root).unwrap();
        assert_eq!(d.index(), 2);
        // What a first build cut short left is replaced.
        std::fs::create_dir_all(d.dir().join("target/debug/build/mlir-sys-0123")).unwrap();
        drop(c);
        // A free donor (slot 0, its lock taken for the copy).
        assert_eq!(d.seed(engine).as_deref(), Some(root.join("slot-0").as_path()));
        assert_eq!(std::fs::read(d.dir().join(lib)).unwrap(), b"engine");
        assert!(!d.dir().join("target/debug/build/mlir-sys-0123").exists());
        // The slot built for another engine is seeded too.
        assert_eq!(b.seed(engine).as_deref(), Some(root.join("slot-0").as_path()));
        assert_eq!(std::fs::read(b.dir().join(lib)).unwrap(), b"engine");
        // A stale partial copy is removed when its slot is next taken.
        let stale = root.join("slot-0/target.seed-1");
        std::fs::create_dir_all(&stale).unwrap();
        let e = Slot::acquire(&root).unwrap();
        assert_eq!(e.index(), 0);
        assert!(!stale.exists());
        drop((b, d, e));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn prune_keeps_the_newest_incremental_dir_and_engine_artefact_of_each_crate() {
        let slot = std::env::temp_dir().join(format!("jaxrepl-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&slot);
        let debug = slot.join("target/x86_64-unknown-linux-gnu/debug");
        let (inc, deps) = (debug.join("incremental"), debug.join("deps"));
        // Oldest first: each later entry gets a later modification time.
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let make = |path: PathBuf, age: u64| {
            if path.extension().is_none() && path.parent() == Some(inc.as_path()) {
                std::fs::create_dir_all(path.join("s-abc")).unwrap();
                std::fs::write(path.join("s-abc/dep-graph.bin"), b"x").unwrap();
            } else {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, b"x").unwrap();
            }
            let f = File::open(&path).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(age)).unwrap();
        };
        for (name, age) in [("jax-17tqsu9sxz4qg", 10), ("jax-3owr0hm2g3c47", 20), ("jax-0aaaaaaaaaaaa", 5), ("ctx-1c5fto1udg1dq", 30), ("ctx-32djvacg7bsg4", 1), ("jax_derive-9zz", 3)] {
            make(inc.join(name), age);
        }
        for (name, age) in [
            ("libjax-16f91eff14e02a10.rmeta", 10),
            ("libjax-a65cf6a967c4eb49.rmeta", 20),
            ("jax-16f91eff14e02a10.d", 10),
            ("jax-a65cf6a967c4eb49.d", 20),
            ("libjax.so", 1),
            ("libjax.rlib", 1),
            ("libndarray-0123456789abcdef.rlib", 1),
            ("libndarray-fedcba9876543210.rlib", 2),
            ("libjax_derive-0123456789abcdef.so", 1),
            ("libjax_derive-fedcba9876543210.so", 2),
        ] {
            make(deps.join(name), age);
        }
        let mut removed: Vec<String> = prune(&slot).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        removed.sort();
        assert_eq!(
            removed,
            [
                "ctx-32djvacg7bsg4",
                "jax-0aaaaaaaaaaaa",
                "jax-16f91eff14e02a10.d",
                "jax-17tqsu9sxz4qg",
                "libjax-16f91eff14e02a10.rmeta",
                "libjax_derive-0123456789abcdef.so",
            ]
        );
        let left = |d: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
            v.sort();
            v
        };
        assert_eq!(left(&inc), ["ctx-1c5fto1udg1dq", "jax-3owr0hm2g3c47", "jax_derive-9zz"]);
        assert!(left(&deps).contains(&"libndarray-0123456789abcdef.rlib".to_string()), "other crates' artefacts stay");
        // Nothing more to do the second time; a slot without a target is fine.
        assert!(prune(&slot).is_empty());
        assert!(prune(&slot.join("nothing-here")).is_empty());
        let _ = std::fs::remove_dir_all(&slot);
    }
}
