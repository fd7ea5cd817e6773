//! The persistent compilation cache (JAX's `jax_compilation_cache_dir`): native code
//! written to disk by one process and linked, without MLIR or LLVM's optimiser, by the
//! next.
//!
//! Key: a blake3 hash of the lowered module text, the LLVM optimisation level, the
//! argument and result dtypes, the engine version, this module's pipelines (the MLIR pass
//! pipelines, the entry wrapper's format), the parallel pipeline's thread count, and the
//! host's target triple, CPU name and CPU features. Config that changes lowering (matmul
//! precision, x64, donation) changes the text. An entry is the file
//! `<dir>/jit_<name>-<hex64>-cache` (JAX's naming): a magic line, one JSON header line
//! (key, engine version, donated-argument aliases, whether the code calls libomp, the
//! symbol of the packed entry, compile seconds, object size and blake3) and the
//! position-independent relocatable object the shared JIT linked (`orc::compile_object`;
//! with `JAXREPL_SHARED_JIT=0` the ExecutionEngine's, `mlirExecutionEngineDumpToObjectFile`;
//! an entry without `entry` in its header names `PACKED_ENTRY`). A hit links that object
//! into an LLJIT of its own with ORC (`orc.rs`).
//!
//! Writes are atomic (a temporary file in the same directory, then `rename`). An entry
//! that cannot be read, whose header or object hash does not match, or that does not link
//! is ignored with a warning naming the reason, recompiled and overwritten; never a crash.
//! With tiered compilation the optimised tier's code is what is written (its compile is
//! started at once on a miss); a hit runs optimised code from the first call.
//!
//! Thresholds (JAX's flags and defaults): `jax_persistent_cache_min_compile_time_secs`
//! (1.0: quick compiles are not written) and `jax_persistent_cache_min_entry_size_bytes`
//! (0 or -1: no minimum). Like JAX's, the cache is trusted: anyone who can write to the
//! directory can make this process run their code.

use super::{load_executable, Executable};
use crate::config;
use crate::lower::LoweredModule;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// First line of every entry (the format's version is part of it).
const MAGIC: &[u8] = b"JAXREPL-PERSISTENT-CACHE 1\n";

static HITS: AtomicU64 = AtomicU64::new(0);
static WRITES: AtomicU64 = AtomicU64::new(0);

/// Executables this process loaded from the persistent cache.
pub fn hits() -> u64 {
    HITS.load(Ordering::Relaxed)
}
/// Entries this process wrote to the persistent cache.
pub fn writes() -> u64 {
    WRITES.load(Ordering::Relaxed)
}

/// What the persistent layer did for one compile (shown by `%explain`).
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The executable was loaded from disk.
    pub hit: bool,
    /// `hit (...)`, `miss (...); written ...`, `off (...)`, with reasons and costs, as
    /// known when the call compiled (see `current` for a background write).
    pub text: String,
    /// With tiered compilation the entry is written (or not) by the background compile of
    /// the optimised tier: its outcome, set once that compile is done.
    pub(crate) later: Option<Arc<OnceLock<String>>>,
    /// On a hit, JAX's log line (`Persistent compilation cache hit for 'jit_f' with key
    /// '…'`), printed with `jax_log_compiles` by the caller after its "Compiling …" lines
    /// (JAX's order).
    pub(crate) hit_log: Option<String>,
}

impl Verdict {
    pub(crate) fn off() -> Verdict {
        Verdict { hit: false, text: "off (jax_compilation_cache_dir is not set)".into(), later: None, hit_log: None }
    }

    /// The verdict as it stands now: `text`, with a background write's outcome once the
    /// optimised tier is compiled (`miss (...); optimised tier (LLVM O2) compiled in the
    /// background: not written: compile took 0.03 s < jax_persistent_cache_min_compile_time_secs (1.00 s)`),
    /// or that it is still compiling.
    pub fn current(&self) -> String {
        match &self.later {
            None => self.text.clone(),
            Some(o) => match o.get() {
                Some(done) => format!("{}: {done}", self.text),
                None => format!("{}: still compiling (%explain again to see whether it was written)", self.text),
            },
        }
    }
}

/// A cache lookup in progress: where the entry is and the thresholds to write it.
#[derive(Debug)]
pub(crate) struct Pending {
    /// `jit_<name>`.
    pub(crate) name: String,
    /// `jit_<name>-<hex64>` (JAX's key format).
    pub(crate) key: String,
    dir: PathBuf,
    min_secs: f64,
    min_bytes: i64,
    /// What `store` (or a failed background compile) decided, for `Verdict::current`.
    pub(crate) outcome: Arc<OnceLock<String>>,
}

impl Pending {
    fn path(&self) -> PathBuf {
        self.dir.join(format!("{}-cache", self.key))
    }
    /// `jit_f-0123456789ab…`, for verdicts.
    fn short_key(&self) -> String {
        let cut = (self.name.len() + 13).min(self.key.len());
        format!("{}…", &self.key[..cut])
    }
}

/// The lookup for `m` compiled at `opt_level`, or `None` when the cache is off
/// (`jax_compilation_cache_dir` empty).
pub(crate) fn pending(m: &LoweredModule, opt_level: u8) -> Option<Pending> {
    let dir = config::compilation_cache_dir();
    if dir.trim().is_empty() {
        return None;
    }
    let name = match super::module_symbol(&m.text) {
        "" => "jit_main".to_string(),
        n => n.to_string(),
    };
    let mut h = blake3::Hasher::new();
    for part in [
        "jaxrepl persistent compilation cache",
        env!("CARGO_PKG_VERSION"),
        m.text.as_str(),
        super::context::PIPELINE_TO_LOOPS,
        super::context::LOOP_CARRIES_IN_PLACE,
        super::context::OUTPUTS_IN_PLACE,
        super::context::PIPELINE_MATH_TO_FUNCS,
        super::context::PIPELINE_TO_LLVM,
        super::parallel::PIPELINE_FUSE,
        super::parallel::PIPELINE_PAR_TO_LOOPS,
        super::parallel::PIPELINE_PAR_TO_LLVM,
        super::context::FP_CONTRACTION,
        super::vector_width_attr(),
        super::ENTRY,
    ] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    h.update(&[opt_level]);
    h.update(&(super::parallel::num_threads() as u64).to_le_bytes());
    for a in m.in_avals.iter().chain(&m.out_avals) {
        h.update(a.dtype.short_name().as_bytes());
        h.update(&[0]);
    }
    h.update(host().as_bytes());
    Some(Pending {
        key: format!("{name}-{}", h.finalize().to_hex()),
        name,
        dir: PathBuf::from(dir),
        min_secs: config::persistent_cache_min_compile_time_secs(),
        min_bytes: config::persistent_cache_min_entry_size_bytes(),
        outcome: Arc::new(OnceLock::new()),
    })
}

fn host() -> &'static str {
    static H: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    H.get_or_init(super::inspect::host_description)
}

/// Whether cache activity is logged (JAX logs it with `jax_explain_cache_misses` or
/// `jax_log_compiles`).
fn logging() -> bool {
    config::log_compiles() || config::explain_cache_misses()
}

/// The result of `load`.
pub(crate) enum Load {
    Hit(Executable, Verdict),
    /// No entry: the reason for the verdict.
    Miss(String),
    /// An entry that cannot be used (the warning was printed): the reason.
    Corrupt(String),
}

/// Looks `p` up on disk and links the entry's code for `module`. Logs JAX's lines: a hit
/// with `jax_log_compiles`, a miss with either flag; a corrupt entry always warns.
pub(crate) fn load(p: &Pending, module: &LoweredModule, opt_level: u8) -> Load {
    let t0 = Instant::now();
    let bytes = match std::fs::read(p.path()) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if logging() {
                eprintln!("PERSISTENT COMPILATION CACHE MISS for '{}' with key '{}'", p.name, p.key);
            }
            return Load::Miss(format!("no entry {}", p.short_key()));
        }
        Err(e) => return corrupt(p, format!("cannot read it: {e}")),
    };
    let (aliases, parallel, entry, object) = match parse(&bytes, p, module) {
        Ok(x) => x,
        Err(why) => return corrupt(p, why),
    };
    match load_executable(module, aliases, opt_level, object, &entry, parallel) {
        Ok(exe) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            let secs = t0.elapsed().as_secs_f64();
            let hit_log = Some(format!("Persistent compilation cache hit for '{}' with key '{}'", p.name, p.key));
            let text = format!(
                "hit ({}, {} read and linked in {:.2} ms; no MLIR passes, no LLVM optimisation)",
                p.short_key(),
                kib(bytes.len()),
                secs * 1e3
            );
            Load::Hit(exe, Verdict { hit: true, text, later: None, hit_log })
        }
        Err(e) => corrupt(p, format!("its code does not link: {}", e.message)),
    }
}

fn corrupt(p: &Pending, why: String) -> Load {
    eprintln!("WARNING: ignoring persistent compilation cache entry '{}' ({why}); recompiling", p.path().display());
    Load::Corrupt(format!("entry {} ignored: {why}", p.short_key()))
}

fn kib(n: usize) -> String {
    if n < 10 * 1024 {
        format!("{n} bytes")
    } else {
        format!("{:.1} KiB", n as f64 / 1024.0)
    }
}

/// Checks an entry's magic, header and object hash: `(aliases, parallel, entry symbol,
/// object)`. An entry without `entry` in its header was written by the ExecutionEngine
/// (`PACKED_ENTRY`).
fn parse<'b>(bytes: &'b [u8], p: &Pending, module: &LoweredModule) -> Result<(Vec<Option<usize>>, bool, String, &'b [u8]), String> {
    let rest = bytes.strip_prefix(MAGIC).ok_or("not an entry of this engine's format")?;
    let nl = rest.iter().position(|&b| b == b'\n').ok_or("truncated header")?;
    let header: serde_json::Value = serde_json::from_slice(&rest[..nl]).map_err(|e| format!("bad header: {e}"))?;
    let object = &rest[nl + 1..];
    if header["key"].as_str() != Some(p.key.as_str()) {
        return Err("its header names another key".into());
    }
    let want = header["object_bytes"].as_u64().ok_or("header lacks object_bytes")?;
    if want != object.len() as u64 {
        return Err(format!("truncated: {} of {want} object bytes", object.len()));
    }
    if header["object_blake3"].as_str() != Some(blake3::hash(object).to_hex().as_str()) {
        return Err("the object's hash does not match its header".into());
    }
    let aliases: Vec<Option<usize>> = header["aliases"]
        .as_array()
        .ok_or("header lacks aliases")?
        .iter()
        .map(|a| a.as_u64().map(|k| k as usize))
        .collect();
    if aliases.len() != module.in_avals.len() || aliases.iter().flatten().any(|&k| k >= module.out_avals.len()) {
        return Err("its donated-argument aliases do not fit the module".into());
    }
    let parallel = header["parallel"].as_bool().unwrap_or(false);
    let entry = header["entry"].as_str().unwrap_or(super::PACKED_ENTRY).to_string();
    Ok((aliases, parallel, entry, object))
}

/// The object file `engine` compiled (created with `keep_object`), or `None` if it
/// could not be written and read back.
pub(crate) fn read_object(engine: &super::context::Engine) -> Option<Vec<u8>> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!("jaxrepl-object-{}-{}.o", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    engine.dump_object(path.to_str()?);
    let r = std::fs::read(&path).ok().filter(|b| !b.is_empty());
    let _ = std::fs::remove_file(&path);
    r
}

/// Writes `exe`'s object (taken from it) as the entry of `p` when it meets the thresholds;
/// what happened, for the verdict (`written ...`, `not written: ...`). Logs JAX's
/// `Writing ...` / `Not writing ...` lines with `jax_log_compiles` or
/// `jax_explain_cache_misses`. The outcome is also kept in `p.outcome` (for a verdict
/// given before a background compile finished).
pub(crate) fn store(p: &Pending, exe: &mut Executable) -> String {
    let what = store_entry(p, exe);
    let _ = p.outcome.set(what.clone());
    what
}

/// Records that no entry is written because the compile failed (`p.outcome`).
pub(crate) fn not_stored(p: &Pending, why: &str) {
    let _ = p.outcome.set(format!("not written: {why}"));
}

fn store_entry(p: &Pending, exe: &mut Executable) -> String {
    let Some((object, entry)) = exe.object.take() else {
        return "not written: the compiled object could not be read back".into();
    };
    let secs = exe.times().total();
    if secs < p.min_secs {
        if logging() {
            eprintln!(
                "Not writing persistent cache entry for '{}' because it took < {:.2} seconds to compile ({secs:.2}s)",
                p.name, p.min_secs
            );
        }
        return format!("not written: compile took {secs:.2} s < jax_persistent_cache_min_compile_time_secs ({:.2} s)", p.min_secs);
    }
    let header = serde_json::json!({
        "key": p.key,
        "engine": env!("CARGO_PKG_VERSION"),
        "opt_level": exe.opt_level,
        "aliases": exe.aliases(),
        "parallel": exe.parallel,
        "entry": entry,
        "compile_secs": secs,
        "object_bytes": object.len(),
        "object_blake3": blake3::hash(&object).to_hex().as_str(),
    });
    let mut entry = MAGIC.to_vec();
    entry.extend_from_slice(header.to_string().as_bytes());
    entry.push(b'\n');
    entry.extend_from_slice(&object);
    if p.min_bytes > 0 && (entry.len() as i64) < p.min_bytes {
        if logging() {
            eprintln!(
                "Not writing persistent cache entry for '{}' because its size ({} bytes) is less than jax_persistent_cache_min_entry_size_bytes ({} bytes)",
                p.name,
                entry.len(),
                p.min_bytes
            );
        }
        return format!(
            "not written: entry of {} bytes < jax_persistent_cache_min_entry_size_bytes ({} bytes)",
            entry.len(),
            p.min_bytes
        );
    }
    match write_atomic(p, &entry) {
        Ok(()) => {
            WRITES.fetch_add(1, Ordering::Relaxed);
            if logging() {
                eprintln!("Writing {} to persistent compilation cache with key '{}'", p.name, p.key);
            }
            format!("written ({}, compiled in {:.2} ms)", kib(entry.len()), secs * 1e3)
        }
        Err(e) => {
            eprintln!("WARNING: cannot write persistent compilation cache entry '{}': {e}", p.path().display());
            format!("not written: {e}")
        }
    }
}

/// Writes `bytes` to a temporary file next to the entry and renames it into place, so a
/// reader sees either no entry or a whole one.
fn write_atomic(p: &Pending, bytes: &[u8]) -> std::io::Result<()> {
    static N: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(&p.dir)?;
    let tmp = p.dir.join(format!(".{}.tmp-{}-{}", p.key, std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let r = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, p.path()));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}
