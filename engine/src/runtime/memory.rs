//! Memory accounting of the (host CPU) device: allocator statistics with JAX's
//! `memory_stats()` keys, a per-device memory limit, live bytes by allocation site
//! (`device_memory_profile`), and the out-of-memory error.
//!
//! Invariant: the buffer hot path pays only relaxed atomic operations here (a few
//! `fetch_add`/`fetch_sub` and loads); names of sites are interned once, when an
//! executable is built, never per allocation.
//!
//! The limit is parsed as JAX parses its GPU allocator settings
//! (`docs/gpu_memory_allocation.rst`): `XLA_CLIENT_MEM_FRACTION` (old name
//! `XLA_PYTHON_CLIENT_MEM_FRACTION`, deprecated, still honoured with a warning) is the
//! fraction of the machine's memory the device may hold; `XLA_PYTHON_CLIENT_PREALLOCATE`
//! and `XLA_PYTHON_CLIENT_ALLOCATOR=platform` are accepted. On this CPU device nothing is
//! preallocated whatever the setting (a shared machine would lose the memory); `platform`
//! turns the large-buffer pool off, so freed memory goes back to the system at once, as
//! JAX's platform allocator does. Without a fraction the limit is the machine's memory.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Index of an allocation site in the site table (`site_id`).
pub type SiteId = u16;

/// Most distinct sites tracked; later ones are counted under `SITE_OTHER`.
const MAX_SITES: usize = 512;
/// Site of buffers made from host data (`Array::from_vec`, scalars): JAX's `device_put`.
pub const SITE_HOST: SiteId = 0;
/// Site of buffers whose origin is not recorded (zero-filled buffers, copies, callbacks).
pub const SITE_OTHER: SiteId = 1;

struct SiteCounters {
    live_bytes: AtomicUsize,
    live_count: AtomicUsize,
    total_allocs: AtomicU64,
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO_SITE: SiteCounters =
    SiteCounters { live_bytes: AtomicUsize::new(0), live_count: AtomicUsize::new(0), total_allocs: AtomicU64::new(0) };
static SITES: [SiteCounters; MAX_SITES] = [ZERO_SITE; MAX_SITES];

static BYTES_IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);
static NUM_ALLOCS: AtomicU64 = AtomicU64::new(0);
static LARGEST_ALLOC: AtomicUsize = AtomicUsize::new(0);
/// The limit in bytes; 0 = not yet read from the environment.
static LIMIT: AtomicUsize = AtomicUsize::new(0);

fn site_names() -> &'static Mutex<Vec<String>> {
    static N: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    N.get_or_init(|| Mutex::new(vec!["device_put".to_string(), "other".to_string()]))
}

/// The site id of `name` (interned; e.g. `"jit(f)"`). Cold path: call it once per
/// executable, not per allocation. Past `MAX_SITES` names, returns `SITE_OTHER`.
pub fn site_id(name: &str) -> SiteId {
    let mut names = site_names().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = names.iter().position(|n| n == name) {
        return i as SiteId;
    }
    if names.len() >= MAX_SITES {
        return SITE_OTHER;
    }
    names.push(name.to_string());
    (names.len() - 1) as SiteId
}

fn site_name(id: SiteId) -> String {
    site_names().lock().unwrap_or_else(|e| e.into_inner()).get(id as usize).cloned().unwrap_or_else(|| "other".into())
}

/// Allocator settings parsed from the environment (JAX's variable names).
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    /// `XLA_PYTHON_CLIENT_PREALLOCATE` (default true in JAX); recorded, never acted on
    /// for the CPU device.
    pub preallocate: bool,
    /// `XLA_CLIENT_MEM_FRACTION` (or the deprecated `XLA_PYTHON_CLIENT_MEM_FRACTION`), if set.
    pub mem_fraction: Option<f64>,
    /// `XLA_PYTHON_CLIENT_ALLOCATOR`: `"bfc"` (default: pooled) or `"platform"` (no pool).
    pub allocator: String,
    /// Warnings produced while parsing (deprecated names, unparsable values).
    pub warnings: Vec<String>,
}

/// Parses JAX's allocator variables from `get(name)` (the environment, or a map in tests).
/// A malformed value is ignored with a warning that names the variable and the expected
/// form; nothing here fails.
pub fn parse_allocator_config(get: impl Fn(&str) -> Option<String>) -> AllocatorConfig {
    let mut warnings = Vec::new();
    let preallocate = match get("XLA_PYTHON_CLIENT_PREALLOCATE") {
        None => true,
        Some(v) => match v.trim().to_ascii_lowercase().as_str() {
            "false" | "0" | "no" | "off" => false,
            "true" | "1" | "yes" | "on" => true,
            other => {
                warnings.push(format!("XLA_PYTHON_CLIENT_PREALLOCATE={other:?} is not true/false; using true"));
                true
            }
        },
    };
    let mut fraction_var = None;
    if let Some(v) = get("XLA_CLIENT_MEM_FRACTION") {
        fraction_var = Some(("XLA_CLIENT_MEM_FRACTION", v));
    } else if let Some(v) = get("XLA_PYTHON_CLIENT_MEM_FRACTION") {
        warnings.push(
            "XLA_PYTHON_CLIENT_MEM_FRACTION is deprecated; use XLA_CLIENT_MEM_FRACTION instead".to_string(),
        );
        fraction_var = Some(("XLA_PYTHON_CLIENT_MEM_FRACTION", v));
    }
    let mem_fraction = fraction_var.and_then(|(name, v)| match v.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Some(f),
        _ => {
            warnings.push(format!("{name}={v:?} is not a fraction in (0, 1] such as .50; ignored"));
            None
        }
    });
    let allocator = match get("XLA_PYTHON_CLIENT_ALLOCATOR").map(|v| v.trim().to_ascii_lowercase()) {
        None => "bfc".to_string(),
        Some(v) if v == "platform" || v == "bfc" || v == "default" || v == "vmm" || v == "cuda_async" => {
            if v == "default" { "bfc".to_string() } else { v }
        }
        Some(v) => {
            warnings.push(format!("XLA_PYTHON_CLIENT_ALLOCATOR={v:?} is not one of platform, bfc, vmm, cuda_async; using bfc"));
            "bfc".to_string()
        }
    };
    AllocatorConfig { preallocate, mem_fraction, allocator, warnings }
}

/// The process's allocator settings (read from the environment once; warnings are printed
/// on stderr then).
pub fn allocator_config() -> &'static AllocatorConfig {
    static C: OnceLock<AllocatorConfig> = OnceLock::new();
    C.get_or_init(|| {
        let c = parse_allocator_config(|n| std::env::var(n).ok());
        for w in &c.warnings {
            eprintln!("UserWarning: {w}");
        }
        if c.allocator == "platform" {
            crate::runtime::buffer::set_pool_limit(0);
        }
        c
    })
}

/// Total physical memory of the machine in bytes (`/proc/meminfo`'s MemTotal; 16 GiB
/// when it cannot be read).
pub fn machine_memory_bytes() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(16 << 30)
}

fn default_limit() -> usize {
    let c = allocator_config();
    let m = machine_memory_bytes();
    match c.mem_fraction {
        Some(f) => ((m as f64) * f) as usize,
        None => m,
    }
    .max(1)
}

/// The device's memory limit in bytes (`bytes_limit`).
#[inline]
pub fn bytes_limit() -> usize {
    match LIMIT.load(Ordering::Relaxed) {
        0 => {
            let l = default_limit();
            let _ = LIMIT.compare_exchange(0, l, Ordering::Relaxed, Ordering::Relaxed);
            LIMIT.load(Ordering::Relaxed)
        }
        l => l,
    }
}

/// Sets the device's memory limit in bytes (`None`: back to the default from the
/// environment, the machine's memory times `XLA_CLIENT_MEM_FRACTION`). Live buffers are
/// kept even if they exceed a lower limit; the next allocation past it fails.
/// Errors: a limit of 0 bytes.
pub fn set_bytes_limit(bytes: Option<usize>) -> Result<()> {
    match bytes {
        Some(0) => Err(Error::value_error("a memory limit must be at least 1 byte")),
        Some(b) => {
            LIMIT.store(b, Ordering::Relaxed);
            Ok(())
        }
        None => {
            LIMIT.store(default_limit(), Ordering::Relaxed);
            Ok(())
        }
    }
}

/// What an allocation past the limit reports (turned into an `Error` by `oom_error`).
#[derive(Clone, Debug)]
pub(crate) struct Oom {
    pub requested: usize,
    pub in_use: usize,
    pub limit: usize,
    pub site: SiteId,
}

/// Accounts for an allocation of `bytes` at `site`; with `check`, fails (accounting
/// nothing) if it would exceed the limit.
#[inline]
pub(crate) fn on_alloc(bytes: usize, site: SiteId, check: bool) -> std::result::Result<(), Oom> {
    let now = BYTES_IN_USE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    if check && now > bytes_limit() {
        let limit = bytes_limit();
        BYTES_IN_USE.fetch_sub(bytes, Ordering::Relaxed);
        return Err(Oom { requested: bytes, in_use: now - bytes, limit, site });
    }
    if now > PEAK_BYTES.load(Ordering::Relaxed) {
        PEAK_BYTES.fetch_max(now, Ordering::Relaxed);
    }
    if bytes > LARGEST_ALLOC.load(Ordering::Relaxed) {
        LARGEST_ALLOC.fetch_max(bytes, Ordering::Relaxed);
    }
    NUM_ALLOCS.fetch_add(1, Ordering::Relaxed);
    let s = &SITES[site as usize % MAX_SITES];
    s.live_bytes.fetch_add(bytes, Ordering::Relaxed);
    s.live_count.fetch_add(1, Ordering::Relaxed);
    s.total_allocs.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Accounts for freeing an allocation of `bytes` made at `site`.
#[inline]
pub(crate) fn on_free(bytes: usize, site: SiteId) {
    BYTES_IN_USE.fetch_sub(bytes, Ordering::Relaxed);
    let s = &SITES[site as usize % MAX_SITES];
    s.live_bytes.fetch_sub(bytes, Ordering::Relaxed);
    s.live_count.fetch_sub(1, Ordering::Relaxed);
}

/// Live buffers of one allocation site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteUsage {
    /// `jit(f)` for outputs of a jitted function or eager op (`jit(sin)`), `device_put`
    /// for arrays made from host data, `other` for the rest.
    pub site: String,
    /// Bytes held by live buffers from this site.
    pub live_bytes: usize,
    /// Number of live buffers from this site.
    pub live_buffers: usize,
    /// Buffers allocated at this site since the process started.
    pub total_allocs: u64,
}

/// Live buffers by site, largest first (sites with nothing live are left out).
pub fn live_by_site() -> Vec<SiteUsage> {
    let n = site_names().lock().unwrap_or_else(|e| e.into_inner()).len();
    let mut v: Vec<SiteUsage> = (0..n)
        .filter_map(|i| {
            let s = &SITES[i];
            let count = s.live_count.load(Ordering::Relaxed);
            (count > 0).then(|| SiteUsage {
                site: site_name(i as SiteId),
                live_bytes: s.live_bytes.load(Ordering::Relaxed),
                live_buffers: count,
                total_allocs: s.total_allocs.load(Ordering::Relaxed),
            })
        })
        .collect();
    v.sort_by(|a, b| b.live_bytes.cmp(&a.live_bytes).then(a.site.cmp(&b.site)));
    v
}

/// `Device.memory_stats()`: the allocator's statistics under JAX's keys (bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryStats {
    /// Bytes held by live buffers (pooled buffers count their size class).
    pub bytes_in_use: usize,
    /// Most bytes in use at once since the process started (or `reset_peak`).
    pub peak_bytes_in_use: usize,
    /// The device's memory limit (`XLA_CLIENT_MEM_FRACTION` × machine memory, or the
    /// machine's memory, or `set_bytes_limit`).
    pub bytes_limit: usize,
    /// Allocations made since the process started.
    pub num_allocs: u64,
    /// Largest single allocation so far.
    pub largest_alloc_size: usize,
    /// Bytes of in-use plus pooled (freed, kept for reuse) memory: what the process holds.
    pub bytes_reserved: usize,
    /// Bytes the large-buffer pool keeps for reuse (`pool_bytes` in JAX's BFC stats).
    pub pool_bytes: usize,
    /// Most bytes the pool may keep (0 with `XLA_PYTHON_CLIENT_ALLOCATOR=platform`).
    pub pool_limit_bytes: usize,
    /// Whether memory is preallocated (always false on the CPU device; see module docs).
    pub preallocate: bool,
    /// `bfc` (pooled) or `platform` (exact allocation and free).
    pub allocator: String,
}

impl MemoryStats {
    /// `(key, value)` pairs in JAX's order, for tables and `memory_stats()` as a dict.
    pub fn items(&self) -> Vec<(&'static str, String)> {
        vec![
            ("bytes_in_use", self.bytes_in_use.to_string()),
            ("peak_bytes_in_use", self.peak_bytes_in_use.to_string()),
            ("bytes_limit", self.bytes_limit.to_string()),
            ("num_allocs", self.num_allocs.to_string()),
            ("largest_alloc_size", self.largest_alloc_size.to_string()),
            ("bytes_reserved", self.bytes_reserved.to_string()),
            ("pool_bytes", self.pool_bytes.to_string()),
            ("pool_limit_bytes", self.pool_limit_bytes.to_string()),
            ("preallocate", if self.preallocate { "True" } else { "False" }.to_string()),
            ("allocator", format!("'{}'", self.allocator)),
        ]
    }
}

impl std::fmt::Display for MemoryStats {
    /// Python's dict repr: `{'bytes_in_use': 1024, ...}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.items().into_iter().map(|(k, v)| format!("'{k}': {v}")).collect();
        write!(f, "{{{}}}", parts.join(", "))
    }
}

impl crate::interactive::TextRepr for MemoryStats {
    fn text_repr(&self) -> String {
        self.to_string()
    }
}

/// The device's allocator statistics now.
pub fn memory_stats() -> MemoryStats {
    let c = allocator_config();
    let pool = crate::runtime::buffer::pool_stats();
    let in_use = BYTES_IN_USE.load(Ordering::Relaxed);
    MemoryStats {
        bytes_in_use: in_use,
        peak_bytes_in_use: PEAK_BYTES.load(Ordering::Relaxed).max(in_use),
        bytes_limit: bytes_limit(),
        num_allocs: NUM_ALLOCS.load(Ordering::Relaxed),
        largest_alloc_size: LARGEST_ALLOC.load(Ordering::Relaxed),
        bytes_reserved: in_use + pool.retained_bytes,
        pool_bytes: pool.retained_bytes,
        pool_limit_bytes: pool.limit_bytes,
        preallocate: false,
        allocator: if c.allocator == "platform" { "platform".into() } else { "bfc".into() },
    }
}

/// Resets `peak_bytes_in_use` to the bytes in use now (to measure one step's peak).
pub fn reset_peak() {
    PEAK_BYTES.store(BYTES_IN_USE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Formats a byte count as `1.50 MiB`.
pub fn format_bytes(b: usize) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.2} {}", units[u]) }
}

/// The live-buffer table: site, buffers, bytes (largest first), with a total line.
pub fn live_table(rows: &[SiteUsage]) -> String {
    let mut t = format!("{:<32} {:>8} {:>14}\n", "site", "buffers", "live bytes");
    let (mut nb, mut bytes) = (0usize, 0usize);
    for r in rows {
        t.push_str(&format!("{:<32} {:>8} {:>14}\n", r.site, r.live_buffers, format_bytes(r.live_bytes)));
        nb += r.live_buffers;
        bytes += r.live_bytes;
    }
    t.push_str(&format!("{:<32} {:>8} {:>14}", "total", nb, format_bytes(bytes)));
    t
}

/// The out-of-memory error: `RESOURCE_EXHAUSTED` with the allocation (what and where),
/// its size, what is live, and the usual fixes.
pub(crate) fn oom_error(o: &Oom, what: &str) -> Error {
    let live = live_by_site();
    let top: Vec<String> = live
        .iter()
        .take(5)
        .map(|s| format!("  {}: {} in {} buffer{}", s.site, format_bytes(s.live_bytes), s.live_buffers, if s.live_buffers == 1 { "" } else { "s" }))
        .collect();
    Error::runtime(format!(
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate {} bytes ({}) for {what} at {}.\n\
         In use: {} of a {} limit ({} free).\n\
         Live buffers by site (largest first):\n{}\n\
         Possible fixes: donate arguments whose buffers can be reused (jit(..).donate_argnums(..)); \
         recompute activations instead of storing them (checkpoint / remat); use a smaller batch; \
         drop arrays you no longer need; or raise the limit (XLA_CLIENT_MEM_FRACTION, \
         jax::runtime::memory::set_bytes_limit).",
        o.requested,
        format_bytes(o.requested),
        site_name(o.site),
        format_bytes(o.in_use),
        format_bytes(o.limit),
        format_bytes(o.limit.saturating_sub(o.in_use)),
        if top.is_empty() { "  (none)".to_string() } else { top.join("\n") },
    ))
}

/// `jax.profiler.device_memory_profile()`: live buffers by allocation site. JAX returns
/// a gzipped pprof protobuf; this returns the same information as text (one line per
/// site: bytes, buffers, site), which `save_device_memory_profile` writes to a file.
pub fn device_memory_profile() -> String {
    let mut s = String::from("# jaxrepl device memory profile: live bytes by allocation site\n# bytes buffers site\n");
    for r in live_by_site() {
        s.push_str(&format!("{} {} {}\n", r.live_bytes, r.live_buffers, r.site));
    }
    s
}

/// Writes `device_memory_profile()` to `path`. Errors: the file cannot be written.
pub fn save_device_memory_profile(path: impl AsRef<std::path::Path>) -> Result<()> {
    let p = path.as_ref();
    std::fs::write(p, device_memory_profile())
        .map_err(|e| Error::runtime(format!("cannot write the memory profile to {}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> AllocatorConfig {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        parse_allocator_config(|n| m.get(n).cloned())
    }

    #[test]
    fn parses_jax_allocator_variables() {
        let d = cfg(&[]);
        assert!(d.preallocate && d.mem_fraction.is_none() && d.allocator == "bfc" && d.warnings.is_empty());
        assert!(!cfg(&[("XLA_PYTHON_CLIENT_PREALLOCATE", "false")]).preallocate);
        assert_eq!(cfg(&[("XLA_CLIENT_MEM_FRACTION", ".50")]).mem_fraction, Some(0.5));
        let old = cfg(&[("XLA_PYTHON_CLIENT_MEM_FRACTION", ".25")]);
        assert_eq!(old.mem_fraction, Some(0.25));
        assert_eq!(old.warnings, vec!["XLA_PYTHON_CLIENT_MEM_FRACTION is deprecated; use XLA_CLIENT_MEM_FRACTION instead"]);
        // The new name wins over the old one.
        let both = cfg(&[("XLA_CLIENT_MEM_FRACTION", ".75"), ("XLA_PYTHON_CLIENT_MEM_FRACTION", ".25")]);
        assert_eq!(both.mem_fraction, Some(0.75));
        assert!(both.warnings.is_empty());
        assert_eq!(cfg(&[("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")]).allocator, "platform");
        let bad = cfg(&[("XLA_CLIENT_MEM_FRACTION", "1.5")]);
        assert_eq!(bad.mem_fraction, None);
        assert!(bad.warnings[0].contains("not a fraction"), "{:?}", bad.warnings);
    }

    #[test]
    fn bytes_format_like_a_table() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(3 << 20), "3.00 MiB");
    }
}
