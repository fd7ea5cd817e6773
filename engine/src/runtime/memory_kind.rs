//! Memory kinds (JAX's memory spaces): each device addresses `device` memory (the
//! default) and two host memories, `pinned_host` and `unpinned_host`. An array lives in
//! one kind (`DeviceArray::memory_kind`, reported by its sharding's `memory_kind`);
//! `device_put` to a sharding `with_memory_kind(..)` copies it there.
//!
//! On the CPU backend all three kinds are the same RAM (as in JAX on CPU), but each is
//! accounted separately per device: bytes of arrays in a host kind count in that kind's
//! statistics (`memory_kind_stats`), not in the device's `memory_stats`, so offloading
//! parameters or optimizer state shows as a drop of device memory, as on an accelerator.
//!
//! Under `jit` a memory kind belongs to outputs: `out_shardings` with a memory kind, or a
//! `device_put` equation to one (`jaxpr_out_kinds`), makes the output in that kind
//! (`OutPlace::with_kinds`; annotated `mhlo.memory_kind` in the lowered module).
//!
//! Invariant: every live array's bytes are counted in exactly one (device, kind) slot,
//! from creation until dropped or donated (`add`/`sub` from `runtime::dispatch`).

use crate::error::{Error, Result};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where an array's bytes live (JAX's `memory_kind`). `{}` and `{:?}` both print JAX's
/// name (`device`, `pinned_host`, `unpinned_host`), which is what a session shows for
/// `x.sharding()?.memory_kind()`.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    /// The device's own memory (the default).
    #[default]
    Device,
    /// Page-locked host memory (fast transfers to and from the device).
    PinnedHost,
    /// Ordinary pageable host memory.
    UnpinnedHost,
}

impl MemoryKind {
    /// Every kind, in the order of `Device::addressable_memories`.
    pub const ALL: [MemoryKind; 3] = [MemoryKind::Device, MemoryKind::PinnedHost, MemoryKind::UnpinnedHost];

    /// JAX's name: `device`, `pinned_host`, `unpinned_host`.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Device => "device",
            MemoryKind::PinnedHost => "pinned_host",
            MemoryKind::UnpinnedHost => "unpinned_host",
        }
    }

    /// The kind named `s`. Errors: JAX's `ValueError: Could not find memory addressable by
    /// device cpu. Device cpu can address the following memory kinds: device, pinned_host,
    /// unpinned_host. Got memory kind: foo`.
    pub fn parse(s: &str) -> Result<MemoryKind> {
        MemoryKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            Error::value_error(format!(
                "Could not find memory addressable by device cpu. Device cpu can address the following memory kinds: device, pinned_host, unpinned_host. Got memory kind: {s}"
            ))
        })
    }

    /// Whether this is a host kind.
    pub fn is_host(self) -> bool {
        self != MemoryKind::Device
    }

    fn index(self) -> usize {
        match self {
            MemoryKind::Device => 0,
            MemoryKind::PinnedHost => 1,
            MemoryKind::UnpinnedHost => 2,
        }
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a `device_put` equation to `kind` prints its `devices` param: JAX's
/// `jax.memory.Space` names (`MemorySpace.Host` is `pinned_host`, `MemorySpace.Device` is
/// `device`); `unpinned_host`, which has no `Space`, prints as its kind name.
pub fn space_name(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::Device => "MemorySpace.Device",
        MemoryKind::PinnedHost => "MemorySpace.Host",
        MemoryKind::UnpinnedHost => "unpinned_host",
    }
}

/// One memory a device addresses (`jax.Device.addressable_memories()`): `{:?}` is JAX's
/// repr `CPU_DEVICE_0` / `PINNED_HOST_1` / `UNPINNED_HOST_2`, `{}` its str
/// `CpuDeviceMemory(id=0, process_index=0, client=cpu)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Memory {
    /// The device (`Device::id`) addressing it.
    pub device: u32,
    /// Its kind.
    pub kind: MemoryKind,
}

impl Memory {
    /// `memory.kind`: `device`, `pinned_host` or `unpinned_host`.
    pub fn kind(&self) -> &'static str {
        self.kind.name()
    }
    /// The memory's id as JAX numbers them on CPU: three per device, device memory first.
    pub fn id(&self) -> u32 {
        self.device * 3 + self.kind.index() as u32
    }
    /// Bytes of the live arrays in this memory, and the most at once (see
    /// `memory_kind_stats`).
    pub fn bytes_in_use(&self) -> (usize, usize) {
        stats(self.device, self.kind)
    }
}

impl fmt::Debug for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.kind {
            MemoryKind::Device => "CPU_DEVICE",
            MemoryKind::PinnedHost => "PINNED_HOST",
            MemoryKind::UnpinnedHost => "UNPINNED_HOST",
        };
        write!(f, "{tag}_{}", self.id())
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let class = match self.kind {
            MemoryKind::Device => "CpuDeviceMemory",
            MemoryKind::PinnedHost => "PinnedHostMemory",
            MemoryKind::UnpinnedHost => "UnpinnedHostMemory",
        };
        write!(f, "{class}(id={}, process_index=0, client=cpu)", self.id())
    }
}

const SLOTS: usize = 256;
/// Host kinds' bytes per device: index `device * 2 + (kind - 1)`.
static IN_USE: [AtomicUsize; 2 * SLOTS] = [const { AtomicUsize::new(0) }; 2 * SLOTS];
static PEAK: [AtomicUsize; 2 * SLOTS] = [const { AtomicUsize::new(0) }; 2 * SLOTS];

fn slot(device: u32, kind: MemoryKind) -> usize {
    (device as usize).min(SLOTS - 1) * 2 + kind.index() - 1
}

/// Counts `bytes` of a new array on (`device`, `kind`).
pub(crate) fn add(device: u32, kind: MemoryKind, bytes: usize) {
    if !kind.is_host() {
        return super::dispatch::device_bytes::add(device, bytes);
    }
    let k = slot(device, kind);
    let now = IN_USE[k].fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK[k].fetch_max(now, Ordering::Relaxed);
}

/// Uncounts `bytes` of an array dropped or donated on (`device`, `kind`).
pub(crate) fn sub(device: u32, kind: MemoryKind, bytes: usize) {
    if !kind.is_host() {
        return super::dispatch::device_bytes::sub(device, bytes);
    }
    IN_USE[slot(device, kind)].fetch_sub(bytes, Ordering::Relaxed);
}

/// `(bytes_in_use, peak_bytes_in_use)` of memory kind `kind` of device `device`: bytes of
/// its live arrays (for `Device` the same as `dispatch::device_bytes::stats`).
pub fn stats(device: u32, kind: MemoryKind) -> (usize, usize) {
    if !kind.is_host() {
        return super::dispatch::device_bytes::stats(device);
    }
    let k = slot(device, kind);
    (IN_USE[k].load(Ordering::Relaxed), PEAK[k].load(Ordering::Relaxed))
}

/// Bytes of live arrays in both host kinds of `device` (what `Device::memory_stats`
/// leaves out of the allocator's `bytes_in_use` with one device).
pub fn host_bytes(device: u32) -> usize {
    stats(device, MemoryKind::PinnedHost).0 + stats(device, MemoryKind::UnpinnedHost).0
}

/// The memory kind of each output of `j`: the kind of a `device_put` equation that makes it
/// (looking through nested `jit`s), else `device`. Empty when every output is in `device`
/// memory (what `LowerOptions` takes for "no annotation").
pub(crate) fn jaxpr_out_kinds(j: &crate::ir::Jaxpr) -> Vec<MemoryKind> {
    fn kind_of(j: &crate::ir::Jaxpr, out: &crate::ir::Atom) -> MemoryKind {
        let crate::ir::Atom::Var(v) = out else { return MemoryKind::Device };
        let Some(e) = j.eqns.iter().rev().find(|e| e.outputs.iter().any(|o| o.id == v.id)) else {
            return MemoryKind::Device;
        };
        match &e.primitive {
            crate::ir::Primitive::DevicePut { memory_kind } => *memory_kind,
            crate::ir::Primitive::Pjit { jaxpr, .. } => {
                let k = e.outputs.iter().position(|o| o.id == v.id).unwrap_or(0);
                jaxpr.jaxpr.outvars.get(k).map_or(MemoryKind::Device, |o| kind_of(&jaxpr.jaxpr, o))
            }
            _ => MemoryKind::Device,
        }
    }
    let kinds: Vec<MemoryKind> = j.outvars.iter().map(|o| kind_of(j, o)).collect();
    if kinds.iter().any(|k| k.is_host()) {
        kinds
    } else {
        vec![]
    }
}
