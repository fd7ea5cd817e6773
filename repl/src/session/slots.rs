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
            if !try_lock(&file) {
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

    /// Seeds a cold slot, one with no up-to-date engine built from `engine` (the engine
    /// crate's directory, as the prelude's `:dep` names it; see [`built_for`]): as when
    /// several sessions start at once for the first time, a first build was cut short, the
    /// last engine built here was another clone's, or the engine's sources changed since
    /// and another slot has already rebuilt it. It copies the build directory of a slot
    /// that has it, replacing what this slot has, so that the first engine cell reuses
    /// that build (a copy of about 1 GB takes seconds; an engine build takes minutes on 2
    /// cores, and a cold one with the MLIR bindings far longer). cargo then rebuilds only
    /// what is stale (moving a build directory is fine for cargo; measured: only the
    /// engine's and the cell's crates rebuilt when their sources had changed).
    ///
    /// Donors: slots not held by a session first, then the one whose engine was built
    /// last. The copy is made under the donor's cargo build locks
    /// (`target/debug/.cargo-lock`, `target/<triple>/debug/.cargo-lock`, which cargo holds
    /// while it builds), so it never catches a half-finished build: while the donor's
    /// session builds (its start, a cell) the seed waits, at most [`SEED_WAIT`], and a
    /// build the donor starts meanwhile waits for the copy. The donor's slot itself is not
    /// locked, so a session may take it at once. `cp -a` keeps modification times, which
    /// cargo's freshness checks compare. Returns the donor's directory, or `None` when the
    /// slot is warm, no other slot is, the donor kept building, or the copy failed (the
    /// partial copy is removed and the slot builds from what it has).
    pub fn seed(&self, engine: &Path) -> Option<PathBuf> {
        let target = self.dir.join("target");
        if built_for(&self.dir, engine) {
            return None;
        }
        let root = self.dir.parent()?;
        // (held by a session, newest engine first, slot directory)
        let mut donors: Vec<(bool, std::cmp::Reverse<std::time::SystemTime>, PathBuf)> = vec![];
        for index in (0..MAX_SLOTS).filter(|&i| i != self.index) {
            let dir = root.join(format!("slot-{index}"));
            let Some((built, true)) = engine_built_at(&dir, engine) else { continue };
            let held = !OpenOptions::new()
                .read(true)
                .write(true)
                .open(root.join(format!("slot-{index}.lock")))
                // Released when the file closes, at once.
                .is_ok_and(|f| try_lock(&f));
            donors.push((held, std::cmp::Reverse(built), dir));
        }
        donors.sort();
        let (_, _, donor) = donors.into_iter().next()?;
        let _build_locks = cargo_locks(&donor.join("target"))?;
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
        let gone = |p: &Path| std::fs::remove_dir_all(p).map_or_else(|e| e.kind() == std::io::ErrorKind::NotFound, |_| true);
        if copied && gone(&target) && std::fs::rename(&partial, &target).is_ok() {
            prune(&self.dir);
            return Some(donor);
        }
        let _ = std::fs::remove_dir_all(&partial);
        None
    }
}

/// Whether slot directory `dir` holds an up-to-date engine built from the crate at
/// `engine` (see [`engine_built_at`]). Another clone's engine counts as not built: cargo
/// would rebuild it from scratch (its paths differ); so does one older than a source file
/// of the engine (cargo would rebuild it, where a copy of a fresh one takes seconds).
pub fn built_for(dir: &Path, engine: &Path) -> bool {
    engine_built_at(dir, engine).is_some_and(|(_, fresh)| fresh)
}

/// When the engine in slot directory `dir` was built, if it was built from the crate at
/// `engine`, and whether it is fresh: the modification time of the dylib evcxr loads,
/// `target/<triple>/debug/deps/libjax.so`, whose dep-info file beside it (`jax.d`, written
/// by rustc) lists `engine`'s `src/lib.rs`; fresh when no source file listed there is
/// newer than the dylib or missing (cargo's own test, by modification times). (evcxr's
/// `Cargo.toml` in the slot does not tell: a session rewrites it without the engine while
/// it starts, and a `--no-prelude` session leaves it so.)
fn engine_built_at(dir: &Path, engine: &Path) -> Option<(std::time::SystemTime, bool)> {
    let source = engine.join("src").join("lib.rs").display().to_string();
    std::fs::read_dir(dir.join("target")).ok()?.flatten().find_map(|e| {
        let deps = e.path().join("debug").join("deps");
        let built = std::fs::metadata(deps.join("libjax.so")).ok()?.modified().ok()?;
        let d = std::fs::read_to_string(deps.join("jax.d")).ok()?;
        let first = d.lines().next()?;
        let sources: Vec<&str> = first.split(' ').skip(1).filter(|w| !w.is_empty()).collect();
        if !sources.contains(&source.as_str()) {
            return None;
        }
        let fresh = sources.iter().all(|f| std::fs::metadata(f).and_then(|m| m.modified()).is_ok_and(|t| t <= built));
        Some((built, fresh))
    })
}

/// An exclusive `flock` on `file`, taken without waiting: whether it was taken (it is
/// released when the file closes).
fn try_lock(file: &File) -> bool {
    // SAFETY: flock on a descriptor the caller owns; no memory is involved.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// The profile directories of cargo build directory `target` that exist: `target/debug`
/// and `target/<triple>/debug` (evcxr builds for an explicit triple).
fn profile_dirs(target: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(target) else { return vec![] };
    let mut dirs = vec![target.join("debug")];
    dirs.extend(entries.flatten().map(|e| e.path().join("debug")));
    dirs.retain(|d| d.is_dir());
    dirs
}

/// How long [`Slot::seed`] waits for a donor's cargo to finish building (it would
/// otherwise build the engine itself, which takes as long).
pub const SEED_WAIT: std::time::Duration = std::time::Duration::from_secs(900);

/// Exclusive locks on cargo's build locks under build directory `target`
/// (`<profile dir>/.cargo-lock` of `target/debug` and of each `target/<triple>/debug`),
/// waiting (polling every 50 ms, all or none held, so that no lock order is imposed on
/// cargo) while cargo builds there, at most [`SEED_WAIT`]: `None` after that. The locks are
/// released when the returned files drop.
fn cargo_locks(target: &Path) -> Option<Vec<File>> {
    let paths: Vec<PathBuf> = profile_dirs(target).iter().map(|d| d.join(".cargo-lock")).filter(|l| l.is_file()).collect();
    let deadline = std::time::Instant::now() + SEED_WAIT;
    loop {
        let mut locks = vec![];
        for lock in &paths {
            let f = OpenOptions::new().read(true).write(true).open(lock).ok()?;
            if !try_lock(&f) {
                break;
            }
            locks.push(f);
        }
        if locks.len() == paths.len() {
            return Some(locks);
        }
        drop(locks);
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
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
    for profile in profile_dirs(&dir.join("target")) {
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
        // Two clones' engine sources, last edited 10 days ago.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(864_000);
        let (engine_dir, other_dir) = (root.join("engines/clone/engine"), root.join("engines/other/engine"));
        for e in [&engine_dir, &other_dir] {
            for f in ["src/lib.rs", "src/trace/mod.rs"] {
                std::fs::create_dir_all(e.join(f).parent().unwrap()).unwrap();
                std::fs::write(e.join(f), b"//").unwrap();
                File::options().write(true).open(e.join(f)).unwrap().set_modified(old).unwrap();
            }
        }
        let (engine, other) = (engine_dir.as_path(), other_dir.as_path());
        let deps = "target/x86_64-unknown-linux-gnu/debug/deps";
        let lib = format!("{deps}/libjax.so");
        // A slot as a session of the engine at `engine` leaves it: the dylib, rustc's
        // dep-info beside it, cargo's build locks.
        let build = |dir: &Path, engine: &Path, content: &[u8], age: u64| {
            std::fs::create_dir_all(dir.join(deps)).unwrap();
            std::fs::create_dir_all(dir.join("target/debug")).unwrap();
            std::fs::write(dir.join(&lib), content).unwrap();
            let src = engine.join("src");
            std::fs::write(dir.join(deps).join("jax.d"), format!("{}/jax.d: {}/lib.rs {}/trace/mod.rs\n\n", dir.display(), src.display(), src.display())).unwrap();
            for l in ["target/debug/.cargo-lock", "target/x86_64-unknown-linux-gnu/debug/.cargo-lock"] {
                std::fs::write(dir.join(l), b"").unwrap();
            }
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age);
            File::options().write(true).open(dir.join(&lib)).unwrap().set_modified(when).unwrap();
            when
        };
        let a = Slot::acquire(&root).unwrap();
        // No other slot has a build directory: nothing to seed from.
        assert_eq!(a.seed(engine), None);
        let when = build(a.dir(), engine, b"engine", 7200);
        assert!(built_for(a.dir(), engine) && !built_for(a.dir(), other));
        // Donor held by a live session.
        let b = Slot::acquire(&root).unwrap();
        assert_eq!(b.seed(engine).as_deref(), Some(a.dir()));
        assert_eq!(std::fs::read(b.dir().join(&lib)).unwrap(), b"engine");
        assert_eq!(std::fs::metadata(b.dir().join(&lib)).unwrap().modified().unwrap(), when);
        // A warm slot is left alone; no partial copy is left behind.
        assert_eq!(b.seed(engine), None);
        assert!(!std::fs::read_dir(b.dir()).unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with("target.seed-")));
        // Slot 1 now holds another clone's engine: neither warm for `engine` nor a donor.
        build(b.dir(), other, b"other", 10);
        let c = Slot::acquire(&root).unwrap();
        assert_eq!(c.index(), 2);
        // What a first build cut short left is replaced; while cargo builds in the donor
        // (its build lock held for 300 ms here), the seed waits.
        std::fs::create_dir_all(c.dir().join("target/debug/build/mlir-sys-0123")).unwrap();
        let building = File::options().write(true).open(a.dir().join("target/x86_64-unknown-linux-gnu/debug/.cargo-lock")).unwrap();
        // SAFETY: flock on a descriptor we own.
        assert_eq!(unsafe { libc::flock(building.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        let t0 = std::time::Instant::now();
        let builder = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(300));
            drop(building);
        });
        assert_eq!(c.seed(engine).as_deref(), Some(a.dir()));
        assert!(t0.elapsed() >= std::time::Duration::from_millis(300));
        builder.join().unwrap();
        assert_eq!(std::fs::read(c.dir().join(&lib)).unwrap(), b"engine");
        assert!(!c.dir().join("target/debug/build/mlir-sys-0123").exists());
        // Free donors come first, then the newest engine: slot 0 held (oldest), slot 2
        // free, slot 1 (another clone's) seeded from slot 2; the donor's slot stays free.
        drop(c);
        assert_eq!(b.seed(engine).as_deref(), Some(root.join("slot-2").as_path()));
        let d = Slot::acquire(&root).unwrap();
        assert_eq!(d.index(), 2);
        // The engine's sources change: every slot's engine is stale, and nothing is copied
        // until one slot has rebuilt it (slot 2 here); then a stale slot takes its copy.
        std::fs::write(engine_dir.join("src/trace/mod.rs"), b"// edited").unwrap();
        assert!(!built_for(a.dir(), engine) && !built_for(d.dir(), engine));
        assert_eq!(b.seed(engine), None);
        build(d.dir(), engine, b"rebuilt", 0);
        assert!(built_for(d.dir(), engine));
        assert_eq!(b.seed(engine).as_deref(), Some(d.dir()));
        assert_eq!(std::fs::read(b.dir().join(&lib)).unwrap(), b"rebuilt");
        // A stale partial copy is removed when its slot is next taken.
        drop(a);
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
