//! Devices and placement (JAX's `jax.devices`, `jax.sharding`, `jax.device_put`).
//!
//! * `jax_num_cpu_devices` (`set_num_cpu_devices`, `config::update_int`, env
//!   `JAX_NUM_CPU_DEVICES`, default 1) fixes how many simulated CPU devices exist. It is
//!   read once, when the backend starts (the first `devices()`, `device_put`, dispatch to a
//!   worker or compilation); setting it afterwards is JAX's `RuntimeError`.
//! * Each device has its own worker thread (`runtime::dispatch::submit_on`, started on
//!   first use) and its own buffers: moving data between devices copies it.
//! * `Mesh` (`make_mesh`), `AxisType`, `PartitionSpec` (built with the `P!` macro),
//!   `NamedSharding`, `SingleDeviceSharding` with JAX's reprs; `set_mesh` returns a guard
//!   that restores the previous mesh when dropped.
//! * `device_put(&x, target)` to a `Device` (commits), a `NamedSharding`, a `Mesh`
//!   (replicated) or a `PartitionSpec` (on the mesh set by `set_mesh`). A sharded array
//!   holds one buffer per shard (`Array::addressable_shards`).
//! * Placement of results: ops and jit calls on uncommitted arrays run on device 0 and give
//!   uncommitted results; with committed inputs, every committed input must be on the same
//!   devices (else JAX's `Received incompatible devices for jitted computation` error) and
//!   the results are committed there.
//!
//! **Temporary behaviour until the partitioner exists**: an op on sharded arrays gathers
//! the shards into one buffer on the mesh's first device and computes there; its result is
//! sharded like the (first) sharded input of the same shape, else replicated over the mesh
//! (`P()`); that result keeps its whole value and slices shards on demand. Values are
//! always right; only the memory layout differs from JAX's.

use crate::error::{Error, Result};
use crate::ir::ShapedArray;
use crate::runtime::dispatch::{self, DeviceArray, Placement};
use crate::runtime::Buffer;
pub use crate::runtime::memory_kind::{Memory, MemoryKind};
use crate::trace::array::Repr;
use crate::trace::Array;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

// ---------------------------------------------------------------- devices and config

static REQUESTED: AtomicUsize = AtomicUsize::new(0);
static NUM_DEVICES: OnceLock<usize> = OnceLock::new();

/// Sets `jax_num_cpu_devices` (must be ≥ 1). Errors: `ValueError` for 0; JAX's
/// `RuntimeError` once the backend has started (any device query, dispatch or compile).
pub fn set_num_cpu_devices(n: usize) -> Result<()> {
    if NUM_DEVICES.get().is_some() {
        return Err(Error::runtime(
            "jax_num_cpu_devices config should be updated before backends are initialized i.e. before any JAX operation is executed. You should initialize this config immediately after `import jax`.",
        ));
    }
    if n == 0 {
        return Err(Error::value_error("jax_num_cpu_devices must be at least 1"));
    }
    REQUESTED.store(n, Ordering::SeqCst);
    Ok(())
}

/// The number of devices (`jax.device_count()`); the first call starts the backend and
/// freezes `jax_num_cpu_devices` (set value, else env `JAX_NUM_CPU_DEVICES`, else 1).
pub fn device_count() -> usize {
    *NUM_DEVICES.get_or_init(|| match REQUESTED.load(Ordering::SeqCst) {
        0 => std::env::var("JAX_NUM_CPU_DEVICES").ok().and_then(|v| v.trim().parse::<usize>().ok()).filter(|n| *n > 0).unwrap_or(1),
        n => n,
    })
}

/// Whether the backend has started (`jax_num_cpu_devices` is frozen).
pub fn backend_started() -> bool {
    NUM_DEVICES.get().is_some()
}

/// A simulated CPU device. `{:?}` is JAX's repr `CpuDevice(id=0)`, `{}` its str `cpu:0`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    /// The device's index in `devices()`.
    pub id: u32,
}

impl Device {
    /// Device `id`. Errors: `ValueError` if `id >= device_count()`.
    pub fn new(id: usize) -> Result<Device> {
        if id >= device_count() {
            return Err(Error::value_error(format!("Unknown device id {id}; there are {} devices", device_count())));
        }
        Ok(Device { id: id as u32 })
    }
    /// `"cpu"`.
    pub fn platform(&self) -> &'static str {
        "cpu"
    }
    /// `"cpu"` (JAX's `device_kind` for host devices).
    pub fn device_kind(&self) -> &'static str {
        "cpu"
    }
    /// `device.memory_stats()`: with one device, the allocator's statistics
    /// (`runtime::memory::memory_stats`, what `%memory` shows). With several devices,
    /// `bytes_in_use` and `peak_bytes_in_use` are this device's: bytes of the live arrays
    /// it holds (counted from creation, pending or not, until dropped or donated); the
    /// other keys (limit, allocations, pool) stay process-wide.
    pub fn memory_stats(&self) -> crate::runtime::memory::MemoryStats {
        let mut s = crate::runtime::memory::memory_stats();
        if device_count() > 1 {
            let (in_use, peak) = dispatch::device_bytes::stats(self.id);
            s.bytes_in_use = in_use;
            s.peak_bytes_in_use = peak;
        } else {
            // Arrays in host memory kinds are not in the device's memory.
            s.bytes_in_use = s.bytes_in_use.saturating_sub(crate::runtime::memory_kind::host_bytes(self.id));
        }
        s
    }
    /// `device.addressable_memories()`: `[CPU_DEVICE_0, PINNED_HOST_1, UNPINNED_HOST_2]`.
    pub fn addressable_memories(&self) -> Vec<Memory> {
        MemoryKind::ALL.into_iter().map(|kind| Memory { device: self.id, kind }).collect()
    }
    /// `device.default_memory()`: its `device` memory.
    pub fn default_memory(&self) -> Memory {
        Memory { device: self.id, kind: MemoryKind::Device }
    }
    /// `device.memory(kind)`. Errors: JAX's `ValueError` for an unknown kind.
    pub fn memory(&self, kind: &str) -> Result<Memory> {
        Ok(Memory { device: self.id, kind: MemoryKind::parse(kind)? })
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuDevice(id={})", self.id)
    }
}
impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu:{}", self.id)
    }
}

/// All devices, `[CpuDevice(id=0), …]` (`jax.devices()`); starts the backend.
pub fn devices() -> Vec<Device> {
    (0..device_count() as u32).map(|id| Device { id }).collect()
}

/// The devices of this process: all of them (`jax.local_devices()`).
pub fn local_devices() -> Vec<Device> {
    devices()
}

/// `jax.local_device_count()`.
pub fn local_device_count() -> usize {
    device_count()
}

// ---------------------------------------------------------------- meshes

/// How a mesh axis is used (`jax.sharding.AxisType`): `Explicit` shardings are part of
/// the array type (`float32[8@x]`), `Auto` ones are left to the compiler, `Manual` axes
/// are per-device code (shard_map).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AxisType {
    /// Shardings are part of the type.
    Explicit,
    /// Shardings are left to the compiler.
    Auto,
    /// Per-device code (shard_map).
    Manual,
}

#[derive(PartialEq, Eq, Hash)]
struct MeshInner {
    axis_sizes: Vec<usize>,
    axis_names: Vec<String>,
    axis_types: Vec<AxisType>,
    /// Device ids in row-major order over the axes.
    devices: Vec<u32>,
}

/// A named grid of devices (`jax.sharding.Mesh`). Cheap to clone; equal meshes have the
/// same axes and devices in the same order.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Mesh(Arc<MeshInner>);

/// `jax.make_mesh(axis_shapes, axis_names, axis_types)`: a mesh over the first
/// `prod(axis_shapes)` devices; `axis_types` `None` means all `Explicit` (as JAX).
/// Errors: `ValueError` for mismatched lengths, repeated names, or more devices than exist.
pub fn make_mesh(axis_shapes: &[usize], axis_names: &[&str], axis_types: Option<&[AxisType]>) -> Result<Mesh> {
    let n: usize = axis_shapes.iter().product();
    let count = device_count();
    if n > count {
        return Err(Error::value_error(format!(
            "Number of devices {count} must be >= the product of mesh_shape {}",
            py_tuple(axis_shapes.iter().map(|s| s.to_string()))
        )));
    }
    let devs: Vec<Device> = (0..n as u32).map(|id| Device { id }).collect();
    Mesh::new(&devs, axis_shapes, axis_names, axis_types.map(|t| t.to_vec()).unwrap_or_else(|| vec![AxisType::Explicit; axis_shapes.len()]))
}

impl Mesh {
    /// A mesh of `devices` (row-major over `axis_sizes`; JAX's `Mesh(devices, names,
    /// axis_types)`). Errors: `ValueError` for mismatched lengths, repeated axis names or
    /// devices, or a device count that is not the product of the sizes.
    pub fn new(devices: &[Device], axis_sizes: &[usize], axis_names: &[&str], axis_types: Vec<AxisType>) -> Result<Mesh> {
        // Python's tuple texts, as JAX's messages show them.
        let sizes = py_tuple(axis_sizes.iter().map(|s| s.to_string()));
        let names_t = py_tuple(axis_names.iter().map(|n| format!("'{n}'")));
        if axis_sizes.len() != axis_names.len() || axis_types.len() != axis_names.len() {
            return Err(Error::value_error(format!(
                "Mesh axis_sizes {sizes}, axis_names {names_t} and axis_types {} must have the same length",
                py_tuple(axis_types.iter().map(|t| format!("{t:?}")))
            )));
        }
        if axis_sizes.contains(&0) {
            return Err(Error::value_error(format!("Mesh axis sizes must be positive, got {sizes}")));
        }
        let n: usize = axis_sizes.iter().product();
        if devices.len() != n {
            return Err(Error::value_error(format!("Mesh of shape {sizes} needs {n} devices, got {}", devices.len())));
        }
        let mut names: Vec<&str> = axis_names.to_vec();
        names.sort();
        names.dedup();
        if names.len() != axis_names.len() {
            return Err(Error::value_error(format!("Mesh axis names must be unique, got {names_t}")));
        }
        let mut ids: Vec<u32> = devices.iter().map(|d| d.id).collect();
        ids.sort();
        ids.dedup();
        if ids.len() != devices.len() || ids.iter().any(|&i| i as usize >= device_count()) {
            return Err(Error::value_error("Mesh devices must be distinct, existing devices"));
        }
        Ok(Mesh(Arc::new(MeshInner {
            axis_sizes: axis_sizes.to_vec(),
            axis_names: axis_names.iter().map(|s| s.to_string()).collect(),
            axis_types,
            devices: devices.iter().map(|d| d.id).collect(),
        })))
    }
    /// The axis names, major to minor.
    pub fn axis_names(&self) -> &[String] {
        &self.0.axis_names
    }
    /// The number of devices along each axis.
    pub fn axis_sizes(&self) -> &[usize] {
        &self.0.axis_sizes
    }
    /// Each axis's `AxisType`.
    pub fn axis_types(&self) -> &[AxisType] {
        &self.0.axis_types
    }
    /// The `AxisType` of the axis named `name`; `None` when the mesh has no such axis.
    pub fn axis_type(&self, name: &str) -> Option<AxisType> {
        self.0.axis_names.iter().position(|n| n == name).map(|k| self.0.axis_types[k])
    }
    /// The devices in row-major order over the axes (JAX's `mesh.devices.flat`).
    pub fn devices(&self) -> Vec<Device> {
        self.0.devices.iter().map(|&id| Device { id }).collect()
    }
    pub(crate) fn device_ids(&self) -> &[u32] {
        &self.0.devices
    }
    /// Number of devices.
    pub fn size(&self) -> usize {
        self.0.devices.len()
    }
    /// Mesh coordinates of the device at flat (row-major) position `index`.
    pub(crate) fn coords(&self, index: usize) -> Vec<usize> {
        let sizes = self.axis_sizes();
        let mut c = vec![0; sizes.len()];
        let mut r = index;
        for k in (0..sizes.len()).rev() {
            c[k] = r % sizes[k];
            r /= sizes[k];
        }
        c
    }
    /// The flat positions of the group of device `index` over the axes at positions `ks`
    /// (a collective's participants): its coordinates on the other axes fixed, members in
    /// row-major order over `ks` as given.
    pub(crate) fn group_members(&self, index: usize, ks: &[usize]) -> Vec<usize> {
        let sizes = self.axis_sizes();
        let me = self.coords(index);
        let n: usize = ks.iter().map(|&k| sizes[k]).product();
        (0..n)
            .map(|p| {
                let mut c = me.clone();
                let mut r = p;
                for &k in ks.iter().rev() {
                    c[k] = r % sizes[k];
                    r /= sizes[k];
                }
                c.iter().zip(sizes).fold(0, |acc, (&ci, &s)| acc * s + ci)
            })
            .collect()
    }
    /// `mesh.shape[name]`.
    pub fn axis_size(&self, name: &str) -> Option<usize> {
        self.axis_index(name).map(|i| self.0.axis_sizes[i])
    }
    fn axis_index(&self, name: &str) -> Option<usize> {
        self.0.axis_names.iter().position(|n| n == name)
    }
    /// A new mesh over the same devices (`jax.make_mesh(..., devices=mesh.devices[::-1])`
    /// is `Mesh::new` with reordered devices).
    pub fn with_axis_types(&self, types: &[AxisType]) -> Result<Mesh> {
        let names: Vec<&str> = self.0.axis_names.iter().map(|s| s.as_str()).collect();
        Mesh::new(&self.devices(), &self.0.axis_sizes, &names, types.to_vec())
    }
    /// Whether `other` is this mesh up to axis types: the same axis names and sizes over
    /// the same devices in the same order (what `auto_axes`/`explicit_axes`/`shard_map`
    /// switch between), so a layout on one is the same layout on the other.
    pub(crate) fn same_grid(&self, other: &Mesh) -> bool {
        self.0.axis_names == other.0.axis_names && self.0.axis_sizes == other.0.axis_sizes && self.0.devices == other.0.devices
    }
}

fn py_tuple(items: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = items.collect();
    if v.len() == 1 {
        format!("({},)", v[0])
    } else {
        format!("({})", v.join(", "))
    }
}

fn types_tuple(t: &[AxisType]) -> String {
    py_tuple(t.iter().map(|t| format!("{t:?}")))
}

impl fmt::Debug for Mesh {
    /// `Mesh(axis_sizes=(4, 2), axis_names=('x', 'y'), axis_types=(Explicit, Explicit))`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Mesh(axis_sizes={}, axis_names={}, axis_types={})",
            py_tuple(self.0.axis_sizes.iter().map(|s| s.to_string())),
            py_tuple(self.0.axis_names.iter().map(|s| format!("'{s}'"))),
            types_tuple(&self.0.axis_types)
        )
    }
}
impl fmt::Display for Mesh {
    /// `Mesh('x': 4, 'y': 2, axis_types=(Explicit, Explicit))`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Mesh(")?;
        for (n, s) in self.0.axis_names.iter().zip(&self.0.axis_sizes) {
            write!(f, "'{n}': {s}, ")?;
        }
        write!(f, "axis_types={})", types_tuple(&self.0.axis_types))
    }
}

thread_local! {
    /// This thread's `set_mesh` stack: each entry is a guard's id, its mesh, and whether
    /// it was kept (`.keep()`).
    static MESH_STACK: std::cell::RefCell<Vec<(u64, Mesh, bool)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Ids of `set_mesh` entries (unique in the process).
static NEXT_MESH_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Restores the previously set mesh when dropped (`with jax.set_mesh(mesh): …`). Call
/// `keep()` to leave the mesh set for good (JAX's statement form `jax.set_mesh(mesh)`).
/// Dropping a guard removes its mesh and the meshes kept after it (as leaving a `with`
/// block restores the mesh from before it); meshes of guards still alive stay, so a REPL
/// cell `let _g = set_mesh(&m);` run again (the new guard replaces the old one, which then
/// drops) leaves `m` set. Not `Send`: it belongs to the thread whose mesh it set.
#[must_use = "the mesh is unset when the guard drops; call .keep() to keep it set"]
pub struct MeshGuard {
    id: u64,
    keep: bool,
    _thread: std::marker::PhantomData<*const ()>,
}

impl MeshGuard {
    /// Leaves the mesh set (on this thread) after the guard goes away.
    pub fn keep(mut self) {
        self.keep = true;
        let id = self.id;
        let _ = MESH_STACK.try_with(|s| {
            if let Some(e) = s.borrow_mut().iter_mut().find(|e| e.0 == id) {
                e.2 = true;
            }
        });
    }
}

impl Drop for MeshGuard {
    fn drop(&mut self) {
        if !self.keep {
            let id = self.id;
            let _ = MESH_STACK.try_with(|s| {
                let mut s = s.borrow_mut();
                if let Some(k) = s.iter().position(|e| e.0 == id) {
                    let mut at = 0;
                    s.retain(|e| {
                        let drop_it = at == k || (at > k && e.2);
                        at += 1;
                        !drop_it
                    });
                }
            });
        }
    }
}

/// Sets the current mesh of this thread (as `jax.set_mesh`, whose setting JAX 0.10.2 keeps
/// per thread: a thread spawned under it sees no mesh, and a mesh set in a spawned thread
/// is not seen by others). Used by `device_put` with a `PartitionSpec`, `get_abstract_mesh`,
/// `shard_map`/`auto_axes` without a mesh, jit's `PartitionSpec` shardings and `%mesh`.
/// The returned guard restores the previous mesh when dropped; `.keep()` keeps it set.
/// The cells of a REPL or notebook session all run on one thread, so a kept mesh stays set
/// for later cells.
pub fn set_mesh(mesh: &Mesh) -> MeshGuard {
    let id = NEXT_MESH_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    MESH_STACK.with(|s| s.borrow_mut().push((id, mesh.clone(), false)));
    MeshGuard { id, keep: false, _thread: std::marker::PhantomData }
}

/// This thread's current mesh (`jax.get_mesh()`), if one is set.
pub fn get_mesh() -> Option<Mesh> {
    MESH_STACK.try_with(|s| s.borrow().last().map(|(_, m, _)| m.clone())).ok().flatten()
}

// ---------------------------------------------------------------- partition specs

/// One dimension's entry of a `PartitionSpec`: not sharded (`None`), or sharded over one
/// or more mesh axes (major to minor).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PEntry(pub Vec<String>);

impl From<&str> for PEntry {
    fn from(s: &str) -> Self {
        PEntry(vec![s.to_string()])
    }
}
impl From<Option<&str>> for PEntry {
    fn from(s: Option<&str>) -> Self {
        PEntry(s.map(|s| vec![s.to_string()]).unwrap_or_default())
    }
}
impl From<(&str, &str)> for PEntry {
    fn from(s: (&str, &str)) -> Self {
        PEntry(vec![s.0.to_string(), s.1.to_string()])
    }
}
impl From<(&str, &str, &str)> for PEntry {
    fn from(s: (&str, &str, &str)) -> Self {
        PEntry(vec![s.0.to_string(), s.1.to_string(), s.2.to_string()])
    }
}
impl<const N: usize> From<[&str; N]> for PEntry {
    fn from(s: [&str; N]) -> Self {
        PEntry(s.iter().map(|s| s.to_string()).collect())
    }
}

/// How each dimension of an array is split over mesh axes (`jax.P` /
/// `jax.sharding.PartitionSpec`). Build it with the `P!` macro: `P!("x", None)`,
/// `P!(("x", "y"))` (one dimension over two axes), `P!()` (replicated); or
/// `PartitionSpec::new(&[Some("x"), None])`. Missing trailing entries mean "not sharded".
/// `{:?}` is JAX's repr: `P('x', None)`, `P('x',)`, `P(('x', 'y'),)`, `P()`.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct PartitionSpec(pub Vec<PEntry>);

/// `jax.P`.
pub type P = PartitionSpec;

impl PartitionSpec {
    /// A spec with one optional axis per dimension.
    pub fn new(entries: &[Option<&str>]) -> PartitionSpec {
        PartitionSpec(entries.iter().map(|e| PEntry::from(*e)).collect())
    }
    /// From entries (what `P!` expands to).
    pub fn from_entries(entries: Vec<PEntry>) -> PartitionSpec {
        PartitionSpec(entries)
    }
    /// The axes dimension `d` is split over (empty when not sharded).
    pub fn axes(&self, d: usize) -> &[String] {
        self.0.get(d).map(|e| e.0.as_slice()).unwrap_or(&[])
    }
}

impl fmt::Debug for PartitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .0
            .iter()
            .map(|e| match e.0.len() {
                0 => "None".to_string(),
                1 => format!("'{}'", e.0[0]),
                _ => py_tuple(e.0.iter().map(|a| format!("'{a}'"))),
            })
            .collect();
        let t = py_tuple(items.into_iter());
        write!(f, "P{}", if self.0.is_empty() { "()".to_string() } else { t })
    }
}

/// `jax.P(...)`: `P!("x", None)`, `P!(("x", "y"), None)`, `P!()`. Each entry is a `&str`,
/// `None`, a tuple or array of `&str` (several mesh axes for one dimension).
#[macro_export]
macro_rules! P {
    ($($e:expr),* $(,)?) => {
        $crate::sharding::PartitionSpec::from_entries(vec![$($crate::sharding::PEntry::from($e)),*])
    };
}

// ---------------------------------------------------------------- shardings

/// An array split over a mesh by a `PartitionSpec` (`jax.NamedSharding`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct NamedSharding {
    /// The devices and their axes.
    pub mesh: Mesh,
    /// Which mesh axes split which dimension.
    pub spec: PartitionSpec,
    /// The memory the array lives in (`device` by default; see `with_memory_kind`).
    pub memory_kind: MemoryKind,
}

impl NamedSharding {
    /// Errors: `ValueError` if the spec names an axis the mesh lacks; `DuplicateSpecError`
    /// (JAX 0.10's text) if it maps one mesh axis to two dimensions.
    pub fn new(mesh: &Mesh, spec: PartitionSpec) -> Result<NamedSharding> {
        let mut seen: Vec<&str> = vec![];
        for e in &spec.0 {
            for a in &e.0 {
                if mesh.axis_index(a).is_none() {
                    return Err(Error::value_error(format!(
                        "Resource axis: {a} of {spec:?} is not found in mesh: {}.",
                        py_tuple(mesh.axis_names().iter().map(|n| format!("'{n}'")))
                    )));
                }
                if seen.contains(&a.as_str()) {
                    return Err(Error::new(
                        crate::error::ErrorKind::DuplicateSpec,
                        format!(
                            "A single NamedSharding spec specification can map every mesh axis to at most one positional dimension, but {spec:?} has duplicate entries for `{a}`"
                        ),
                    ));
                }
                seen.push(a);
            }
        }
        Ok(NamedSharding { mesh: mesh.clone(), spec, memory_kind: MemoryKind::Device })
    }

    /// How many pieces dimension `d` is split into.
    fn parts(&self, d: usize) -> usize {
        self.spec.axes(d).iter().map(|a| self.mesh.axis_size(a).unwrap_or(1)).product()
    }

    /// For each device of the mesh (row-major), the block it holds of an array of `shape`:
    /// per dimension `(start, len, full)` (`full` when the dimension is not split).
    /// Errors: JAX's divisibility `ValueError`, or a spec longer than the rank.
    pub(crate) fn blocks(&self, shape: &[usize]) -> Result<Vec<(u32, BlockIndex)>> {
        if self.spec.0.len() > shape.len() {
            return Err(Error::value_error(format!(
                "One of device_put args is incompatible with its sharding annotation {self:?}: Sharding {self:?} is only valid for values of rank at least {}, but was applied to a value of rank {}.",
                self.spec.0.len(),
                shape.len()
            )));
        }
        for (d, &n) in shape.iter().enumerate() {
            let p = self.parts(d);
            if n % p != 0 {
                return Err(Error::value_error(format!(
                    "One of device_put args was given the sharding of {self:?}, which implies that the global size of its dimension {d} should be divisible by {p}, but it is equal to {n} (full shape: {})",
                    py_tuple(shape.iter().map(|s| s.to_string()))
                )));
            }
        }
        let sizes = self.mesh.axis_sizes();
        let ids = self.mesh.device_ids();
        let mut out = Vec::with_capacity(ids.len());
        for (flat, &dev) in ids.iter().enumerate() {
            // Mesh coordinates of this device.
            let mut coords = vec![0usize; sizes.len()];
            let mut r = flat;
            for k in (0..sizes.len()).rev() {
                coords[k] = r % sizes[k];
                r /= sizes[k];
            }
            let idx = shape
                .iter()
                .enumerate()
                .map(|(d, &n)| {
                    let axes = self.spec.axes(d);
                    if axes.is_empty() {
                        return (0, n, true);
                    }
                    let mut i = 0;
                    for a in axes {
                        let k = self.mesh.axis_index(a).expect("checked");
                        i = i * sizes[k] + coords[k];
                    }
                    let len = n / self.parts(d);
                    (i * len, len, false)
                })
                .collect();
            out.push((dev, idx));
        }
        Ok(out)
    }

    /// For each device of the mesh (row-major), the part of an array of `shape` it holds:
    /// per dimension `Some((start, stop))`, or `None` for a dimension that is not split
    /// (JAX's `devices_indices_map`). Errors: as `device_put` (divisibility, rank).
    pub fn devices_indices_map(&self, shape: &[usize]) -> Result<Vec<(Device, ShardIndex)>> {
        Ok(self
            .blocks(shape)?
            .into_iter()
            .map(|(d, idx)| (Device { id: d }, idx.iter().map(|&(a, n, full)| if full { None } else { Some((a, a + n)) }).collect()))
            .collect())
    }

    /// Whether every device holds the whole array.
    pub fn is_fully_replicated(&self) -> bool {
        self.spec.0.iter().all(|e| e.0.is_empty())
    }
}

impl fmt::Debug for NamedSharding {
    /// `NamedSharding(mesh=Mesh('x': 4, axis_types=(Explicit,)), spec=P('x',), memory_kind=device)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NamedSharding(mesh={}, spec={:?}, memory_kind={})", self.mesh, self.spec, self.memory_kind)
    }
}

impl NamedSharding {
    /// `s.with_memory_kind("pinned_host")`: the same layout in another memory
    /// (`device`, `pinned_host`, `unpinned_host`). Errors: JAX's `ValueError` for others.
    pub fn with_memory_kind(&self, kind: &str) -> Result<NamedSharding> {
        Ok(NamedSharding { memory_kind: MemoryKind::parse(kind)?, ..self.clone() })
    }
}

impl SingleDeviceSharding {
    /// `SingleDeviceSharding(device)` in `device` memory.
    pub fn new(device: Device) -> SingleDeviceSharding {
        SingleDeviceSharding { device, memory_kind: MemoryKind::Device }
    }
    /// The same device, memory kind `kind`. Errors: JAX's `ValueError` for an unknown kind.
    pub fn with_memory_kind(&self, kind: &str) -> Result<SingleDeviceSharding> {
        Ok(SingleDeviceSharding { memory_kind: MemoryKind::parse(kind)?, ..*self })
    }
}

/// An array held whole by one device (`jax.sharding.SingleDeviceSharding`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SingleDeviceSharding {
    /// The device holding the array.
    pub device: Device,
    /// The memory the array lives in (`device` by default; see `with_memory_kind`).
    pub memory_kind: MemoryKind,
}

impl fmt::Debug for SingleDeviceSharding {
    /// `SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SingleDeviceSharding(device={:?}, memory_kind={})", self.device, self.memory_kind)
    }
}

/// An array's sharding (`Array::sharding`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Sharding {
    /// On one device.
    Single(SingleDeviceSharding),
    /// Split (or replicated) over a mesh.
    Named(NamedSharding),
}

impl Sharding {
    /// The devices holding parts of the array (mesh order).
    pub fn device_set(&self) -> Vec<Device> {
        match self {
            Sharding::Single(s) => vec![s.device],
            Sharding::Named(n) => n.mesh.devices(),
        }
    }
    /// `sharding.num_devices`.
    pub fn num_devices(&self) -> usize {
        self.device_set().len()
    }
    /// The mesh of a `NamedSharding`.
    pub fn mesh(&self) -> Option<&Mesh> {
        match self {
            Sharding::Named(n) => Some(&n.mesh),
            Sharding::Single(_) => None,
        }
    }
    /// The spec of a `NamedSharding`.
    pub fn spec(&self) -> Option<&PartitionSpec> {
        match self {
            Sharding::Named(n) => Some(&n.spec),
            Sharding::Single(_) => None,
        }
    }
    /// `sharding.memory_kind`: the memory the array lives in.
    pub fn memory_kind(&self) -> MemoryKind {
        match self {
            Sharding::Named(n) => n.memory_kind,
            Sharding::Single(s) => s.memory_kind,
        }
    }
    /// `sharding.with_memory_kind(kind)`. Errors: JAX's `ValueError` for an unknown kind.
    pub fn with_memory_kind(&self, kind: &str) -> Result<Sharding> {
        Ok(match self {
            Sharding::Named(n) => Sharding::Named(n.with_memory_kind(kind)?),
            Sharding::Single(s) => Sharding::Single(s.with_memory_kind(kind)?),
        })
    }
}

impl fmt::Debug for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sharding::Single(s) => s.fmt(f),
            Sharding::Named(n) => n.fmt(f),
        }
    }
}

// ---------------------------------------------------------------- sharded storage

/// A shard's place in the global array: per dimension `Some((start, stop))`, or `None`
/// when the dimension is not split (`slice(None, None, None)`).
pub type ShardIndex = Vec<Option<(usize, usize)>>;

/// A block of an array: per dimension `(start, len, whole dimension)`.
pub(crate) type BlockIndex = Vec<(usize, usize, bool)>;

/// One shard's storage: its device, its block of the global array and its data.
pub(crate) struct ShardBuf {
    device: u32,
    index: Vec<(usize, usize, bool)>,
    data: Arc<DeviceArray>,
}

/// What a sharded `DeviceArray` carries besides its (maybe not yet gathered) whole value.
pub(crate) struct Sharded {
    pub(crate) sharding: NamedSharding,
    pub(crate) shards: OnceLock<Vec<ShardBuf>>,
    /// The whole value is gathered from the shards on first `wait` (a `device_put`
    /// result); otherwise the whole value is computed and shards are sliced on demand.
    pub(crate) gather_on_wait: bool,
}

impl Sharded {
    /// Waits for every shard (not assembling the whole value). Errors: a shard's error.
    pub(crate) fn wait_shards(&self) -> Result<()> {
        let shards = self.shards.get().ok_or_else(|| Error::runtime("internal error: sharded array without shards"))?;
        for s in shards {
            s.data.wait()?;
        }
        Ok(())
    }
    pub(crate) fn shards_ready(&self) -> bool {
        self.shards.get().map(|v| v.iter().all(|s| s.data.is_ready())).unwrap_or(false)
    }
    /// Assembles the whole value from the shards.
    pub(crate) fn gather(&self, aval: &ShapedArray) -> Result<Arc<Buffer>> {
        let shards = self.shards.get().ok_or_else(|| Error::runtime("internal error: sharded array without shards"))?;
        if let Some(s) = shards.iter().find(|s| s.index.iter().all(|&(_, _, full)| full)) {
            // A replica holds the whole value: it is the value (no copy).
            let b = s.data.wait()?;
            if b.shape() == aval.shape.as_slice() && b.dtype() == aval.dtype {
                return Ok(b);
            }
        }
        let mut whole = Buffer::zeros(&aval.strong());
        let esize = aval.dtype.size_bytes();
        let mut done: Vec<&Vec<(usize, usize, bool)>> = vec![];
        for s in shards {
            if done.contains(&&s.index) {
                continue; // a replica of a block already copied
            }
            let b = s.data.wait()?;
            copy_block(whole.bytes_mut(), &aval.shape, b.bytes(), &s.index, esize, true);
            done.push(&s.index);
        }
        Ok(Arc::new(whole))
    }
}

/// Copies between a whole array (`whole`, row-major of `shape`) and one block of it
/// (`block`, row-major of the block's shape): into the whole when `into_whole`, else out.
fn copy_block(whole: &mut [u8], shape: &[usize], block: &[u8], index: &[(usize, usize, bool)], esize: usize, into_whole: bool) {
    // Safe shared-borrow version for the "out" direction goes through raw copies below.
    let nd = shape.len();
    if nd == 0 {
        if into_whole {
            whole.copy_from_slice(block);
        }
        return;
    }
    let mut wstrides = vec![esize; nd];
    let mut bstrides = vec![esize; nd];
    for d in (0..nd - 1).rev() {
        wstrides[d] = wstrides[d + 1] * shape[d + 1];
        bstrides[d] = bstrides[d + 1] * index[d + 1].1;
    }
    let row = index[nd - 1].1 * esize;
    let rows: usize = index[..nd - 1].iter().map(|i| i.1).product();
    let mut ctr = vec![0usize; nd.saturating_sub(1)];
    for _ in 0..rows {
        let mut w = index[nd - 1].0 * esize;
        let mut b = 0;
        for d in 0..nd - 1 {
            w += (index[d].0 + ctr[d]) * wstrides[d];
            b += ctr[d] * bstrides[d];
        }
        if into_whole {
            whole[w..w + row].copy_from_slice(&block[b..b + row]);
        }
        for d in (0..nd - 1).rev() {
            ctr[d] += 1;
            if ctr[d] < index[d].1 {
                break;
            }
            ctr[d] = 0;
        }
    }
}

/// The block `index` of `whole` (row-major of `shape`) as a new buffer.
fn slice_block(whole: &Buffer, index: &[(usize, usize, bool)]) -> Buffer {
    let shape = whole.shape().to_vec();
    let bshape: Vec<usize> = index.iter().map(|i| i.1).collect();
    let mut out = Buffer::zeros(&ShapedArray::new(&bshape, whole.dtype()));
    let esize = whole.dtype().size_bytes();
    let nd = shape.len();
    if nd == 0 {
        out.bytes_mut().copy_from_slice(whole.bytes());
        return out;
    }
    let mut wstrides = vec![esize; nd];
    for d in (0..nd - 1).rev() {
        wstrides[d] = wstrides[d + 1] * shape[d + 1];
    }
    let row = index[nd - 1].1 * esize;
    let rows: usize = index[..nd - 1].iter().map(|i| i.1).product();
    let mut ctr = vec![0usize; nd - 1];
    let src = whole.bytes();
    let dst = out.bytes_mut();
    for r in 0..rows {
        let mut w = index[nd - 1].0 * esize;
        for d in 0..nd - 1 {
            w += (index[d].0 + ctr[d]) * wstrides[d];
        }
        dst[r * row..(r + 1) * row].copy_from_slice(&src[w..w + row]);
        for d in (0..nd - 1).rev() {
            ctr[d] += 1;
            if ctr[d] < index[d].1 {
                break;
            }
            ctr[d] = 0;
        }
    }
    out
}

// ---------------------------------------------------------------- device_put

/// Where `device_put` sends an array.
#[derive(Clone)]
pub enum PutTarget {
    /// Copy to one device (committed).
    Device(Device),
    /// Split over a sharding's devices.
    Sharding(Sharding),
    /// Split by a spec over the current mesh (`set_mesh`).
    Spec(PartitionSpec),
    /// The same layout in another memory kind (JAX's `jax.device_put(x,
    /// jax.memory.Space.Host)`: `MemoryKind::PinnedHost`).
    Memory(MemoryKind),
}

/// `device_put(x, MemoryKind::PinnedHost)`: JAX's `jax.device_put(x, jax.memory.Space.Host)`.
impl From<MemoryKind> for PutTarget {
    fn from(k: MemoryKind) -> Self {
        PutTarget::Memory(k)
    }
}

impl PutTarget {
    /// The memory kind a `device_put` to this target asks for, when it asks for one: a
    /// `Memory` target, or a sharding in a host kind (`None`: a plain placement).
    pub(crate) fn memory_kind(&self) -> Option<MemoryKind> {
        match self {
            PutTarget::Memory(k) => Some(*k),
            PutTarget::Sharding(s) if s.memory_kind().is_host() => Some(s.memory_kind()),
            _ => None,
        }
    }
}

impl From<Device> for PutTarget {
    fn from(d: Device) -> Self {
        PutTarget::Device(d)
    }
}
impl From<NamedSharding> for PutTarget {
    fn from(s: NamedSharding) -> Self {
        PutTarget::Sharding(Sharding::Named(s))
    }
}
impl From<&NamedSharding> for PutTarget {
    fn from(s: &NamedSharding) -> Self {
        PutTarget::Sharding(Sharding::Named(s.clone()))
    }
}
/// Its device and memory kind (`with_memory_kind`).
impl From<SingleDeviceSharding> for PutTarget {
    fn from(s: SingleDeviceSharding) -> Self {
        PutTarget::Sharding(Sharding::Single(s))
    }
}
impl From<Sharding> for PutTarget {
    fn from(s: Sharding) -> Self {
        PutTarget::Sharding(s)
    }
}
impl From<PartitionSpec> for PutTarget {
    fn from(s: PartitionSpec) -> Self {
        PutTarget::Spec(s)
    }
}
/// A mesh: replicated over all its devices (`NamedSharding(mesh, P())`).
impl From<&Mesh> for PutTarget {
    fn from(m: &Mesh) -> Self {
        PutTarget::Sharding(Sharding::Named(NamedSharding { mesh: m.clone(), spec: PartitionSpec::default(), memory_kind: MemoryKind::Device }))
    }
}

/// `jax.device_put(x, target)`: copies `x` to a device (the result is committed to it), or
/// splits it over a mesh by a sharding (one buffer per device, committed), or moves it to
/// another memory kind keeping its layout (`device_put(&x, MemoryKind::PinnedHost)`,
/// JAX's `jax.memory.Space.Host`). Asynchronous: the copies run on the target devices'
/// workers. Inside `jit` a target with a memory kind (a `MemoryKind`, or a sharding
/// `with_memory_kind` of a host kind) stages a `device_put` equation, so the jitted
/// function's result that it makes lives in that kind; other targets return `x`
/// unchanged (placement inside computations comes with the partitioner).
/// Errors: `ValueError` for a `PartitionSpec` with no mesh set, specs that do not fit the
/// mesh or the shape (JAX's divisibility error).
#[track_caller]
pub fn device_put(x: &Array, target: impl Into<PutTarget>) -> Result<Array> {
    let target = target.into();
    let src = match &x.0 {
        Repr::Tracer(_) => {
            return match target.memory_kind() {
                Some(memory_kind) => {
                    crate::lax::bind1(crate::ir::Primitive::DevicePut { memory_kind }, vec![crate::trace::Operand::Array(x.clone())])
                }
                None => Ok(x.clone()),
            };
        }
        Repr::Device(d) => d.clone(),
    };
    device_count();
    let sharding = target_sharding(x, &target)?;
    let kind = sharding.memory_kind();
    match sharding {
        Sharding::Single(s) => Ok(Array::from_device(put_on(&src, s.device.id, true, kind))),
        Sharding::Named(ns) => {
            let ns = NamedSharding { memory_kind: kind, ..NamedSharding::new(&ns.mesh, ns.spec.clone())? };
            let aval = src.aval.clone();
            let blocks = ns.blocks(&aval.shape)?;
            if ns.mesh.size() == 1 {
                // One device: a plain committed array that still reports its NamedSharding.
                let d = blocks[0].0;
                let one = put_on(&src, d, true, kind);
                let sh = Sharded { sharding: ns, shards: OnceLock::new(), gather_on_wait: false };
                let _ = sh.shards.set(vec![ShardBuf { device: d, index: blocks[0].1.clone(), data: one.clone() }]);
                return Ok(Array::from_device(wrap_sharded(&one, aval, sh)));
            }
            // Each slice waits for the whole source: sent as one group (`submission_order`).
            let _order = dispatch::submission_order();
            let shards: Vec<ShardBuf> = blocks
                .into_iter()
                .map(|(dev, index)| {
                    let bshape: Vec<usize> = index.iter().map(|i| i.1).collect();
                    let out = DeviceArray::pending_in(ShapedArray::new(&bshape, aval.dtype), Placement { device: dev, committed: true }, kind);
                    let s2 = src.clone();
                    let idx = index.clone();
                    dispatch::submit_on(dev, vec![out.clone()], move || {
                        let b = s2.wait()?;
                        Ok(vec![slice_block(&b, &idx)])
                    });
                    ShardBuf { device: dev, index, data: out }
                })
                .collect();
            let first = ns.mesh.device_ids()[0];
            let sh = Sharded { sharding: ns, shards: OnceLock::new(), gather_on_wait: true };
            let _ = sh.shards.set(shards);
            Ok(Array::from_device(DeviceArray::sharded(aval, Placement { device: first, committed: true }, sh, None)))
        }
    }
}

/// A copy of `src`'s value on device `dev` (a job on that device's worker).
fn put_on(src: &Arc<DeviceArray>, dev: u32, committed: bool, kind: MemoryKind) -> Arc<DeviceArray> {
    let out = DeviceArray::pending_in(src.aval.clone(), Placement { device: dev, committed }, kind);
    let s2 = src.clone();
    dispatch::submit_on(dev, vec![out.clone()], move || Ok(vec![(*s2.wait()?).clone()]));
    out
}

/// A sharded array whose whole value is `one`'s (filled when `one` is).
fn wrap_sharded(one: &Arc<DeviceArray>, aval: ShapedArray, sh: Sharded) -> Arc<DeviceArray> {
    DeviceArray::sharded(aval, one.placement, Sharded { gather_on_wait: true, ..sh }, None)
}

// ---------------------------------------------------------------- placement of results

/// Where the results of an op or jit call go: `placement`, and for results of sharded
/// inputs the sharding to report (the first sharded input's and its shape).
pub(crate) struct OutPlace {
    pub(crate) placement: Placement,
    sharded: Option<(NamedSharding, Vec<usize>)>,
    /// Per output, the propagated spec (`for_eqn` / `for_jaxpr`); `None`: not propagated.
    specs: Option<Vec<PartitionSpec>>,
    /// Per output, the memory kind it is made in (`with_kinds`); empty: all `device`.
    kinds: Vec<MemoryKind>,
}

impl OutPlace {
    pub(crate) const DEFAULT: OutPlace = OutPlace { placement: Placement::DEFAULT, sharded: None, specs: None, kinds: Vec::new() };

    /// The same place, with output `i` made in memory kind `kinds[i]` (accounted there
    /// from the start, so no copy is needed to move it: on CPU every kind is the same RAM).
    pub(crate) fn with_kinds(self, kinds: &[MemoryKind]) -> OutPlace {
        OutPlace { kinds: kinds.to_vec(), ..self }
    }

    /// Result `i` of the call, of type `aval`: ready with `whole`, else pending.
    pub(crate) fn out(&self, i: usize, aval: ShapedArray, whole: Option<Arc<Buffer>>) -> Arc<DeviceArray> {
        let kind = self.kinds.get(i).copied().unwrap_or_default();
        match &self.sharded {
            None if kind.is_host() => match whole {
                Some(b) => DeviceArray::ready_in(aval, b, self.placement, kind),
                None => DeviceArray::pending_in(aval, self.placement, kind),
            },
            None => match whole {
                Some(b) => DeviceArray::ready_on(aval, b, self.placement),
                None => DeviceArray::pending_on(aval, self.placement),
            },
            Some((ns, shape)) => {
                let spec = match self.specs.as_ref().and_then(|s| s.get(i)) {
                    Some(s) => s.clone(),
                    None if *shape == aval.shape => ns.spec.clone(),
                    None => PartitionSpec::default(),
                };
                let spec = if spec.0.iter().all(|e| e.0.is_empty()) { PartitionSpec::default() } else { spec };
                let sh = Sharded { sharding: NamedSharding { mesh: ns.mesh.clone(), spec, memory_kind: kind }, shards: OnceLock::new(), gather_on_wait: false };
                DeviceArray::sharded(aval, self.placement, sh, whole)
            }
        }
    }

    /// The mesh of the sharded inputs, when there are any.
    pub(crate) fn mesh(&self) -> Option<&Mesh> {
        self.sharded.as_ref().map(|(ns, _)| &ns.mesh)
    }

    /// Propagates the inputs' shardings through one primitive (`sharding_rules::eqn_rule`).
    /// Free when no input is sharded. Errors: JAX's explicit-sharding errors.
    pub(crate) fn for_eqn(mut self, prim: &crate::ir::Primitive, inputs: &[Arc<DeviceArray>], out_avals: &[ShapedArray]) -> Result<OutPlace> {
        let Some(mesh) = self.mesh().cloned() else { return Ok(self) };
        let ins = input_dims(inputs, &mesh);
        let avals: Vec<&ShapedArray> = inputs.iter().map(|d| &d.aval).collect();
        let outs = crate::sharding_rules::eqn_rule(prim, &mesh, &avals, &ins, out_avals)?;
        self.specs = Some(outs.iter().map(crate::sharding_rules::spec_of).collect());
        Ok(self)
    }

    /// Propagates the inputs' shardings through a jitted call's jaxpr. Free when no
    /// input is sharded. Errors: JAX's explicit-sharding errors, at the equation's line.
    pub(crate) fn for_jaxpr(mut self, jaxpr: &crate::ir::ClosedJaxpr, inputs: &[Arc<DeviceArray>]) -> Result<OutPlace> {
        let Some(mesh) = self.mesh().cloned() else { return Ok(self) };
        let ins = input_dims(inputs, &mesh);
        let outs = crate::sharding_rules::jaxpr_rule(&jaxpr.jaxpr, &mesh, &ins)?;
        self.specs = Some(outs.iter().map(crate::sharding_rules::spec_of).collect());
        Ok(self)
    }
}

/// Each input's dims on `mesh` (arrays not sharded on it count as replicated).
pub(crate) fn input_dims(inputs: &[Arc<DeviceArray>], mesh: &Mesh) -> Vec<crate::sharding_rules::Dims> {
    inputs
        .iter()
        .map(|d| match d.sharded_info() {
            Some(sh) if &sh.sharding.mesh == mesh => crate::sharding_rules::dims_of(&sh.sharding.spec, d.aval.ndim()),
            _ => vec![vec![]; d.aval.ndim()],
        })
        .collect()
}

/// The device ids an array is on.
fn device_ids(d: &DeviceArray) -> Vec<u32> {
    match d.sharded_info() {
        Some(sh) => sh.sharding.mesh.device_ids().to_vec(),
        None => vec![d.placement.device],
    }
}

/// JAX's check of an eager `reshard` onto `mesh` (also of the arguments `auto_axes` and
/// `explicit_axes` move): an array committed to other devices is an error, not a silent
/// move (`device_put` moves it). Tracers and uncommitted arrays pass.
/// Errors: JAX 0.10.2's `ValueError: Received incompatible devices for jitted computation.
/// Got argument args[0] of reshard with shape float32[8] and with device ids [0] on
/// platform CPU and jit's context mesh with device ids [0, …, 7] on platform CPU`.
pub(crate) fn check_reshard_devices(x: &Array, mesh: &Mesh) -> Result<()> {
    let Repr::Device(d) = &x.0 else { return Ok(()) };
    if !d.placement.committed {
        return Ok(());
    }
    let (mut have, mut want) = (device_ids(d), mesh.device_ids().to_vec());
    have.sort_unstable();
    want.sort_unstable();
    if have == want {
        return Ok(());
    }
    Err(Error::value_error(format!(
        "Received incompatible devices for jitted computation. Got argument args[0] of reshard with shape {} and with device ids {:?} on platform CPU and jit's context mesh with device ids {:?} on platform CPU",
        type_text(d),
        device_ids(d),
        mesh.device_ids()
    )))
}

fn same_devices(a: &DeviceArray, b: &DeviceArray) -> bool {
    match (a.sharded_info(), b.sharded_info()) {
        (None, None) => a.placement.device == b.placement.device,
        _ => device_ids(a) == device_ids(b),
    }
}

/// The placement of the results of `fun_name` on `inputs`: uncommitted inputs follow
/// committed ones; committed inputs must share their devices. `arg_name(i)` names input
/// `i` in the error. Cheap when no input is committed (one field read per input).
/// Errors: JAX's `ValueError: Received incompatible devices for jitted computation. …`.
pub(crate) fn out_place<'a>(
    inputs: impl Iterator<Item = &'a Arc<DeviceArray>> + Clone,
    fun_name: &str,
    arg_name: impl Fn(usize) -> String,
) -> Result<OutPlace> {
    let mut first: Option<(usize, &Arc<DeviceArray>)> = None;
    for (i, d) in inputs.clone().enumerate() {
        if !d.placement.committed {
            continue;
        }
        match first {
            None => first = Some((i, d)),
            Some((j, f)) => {
                if !same_devices(f, d) {
                    let ids = |d: &DeviceArray| format!("{:?}", device_ids(d));
                    return Err(Error::value_error(format!(
                        "Received incompatible devices for jitted computation. Got argument {} of {fun_name} with shape {} and with device ids {} on platform CPU and argument {} of {fun_name} with shape {} and with device ids {} on platform CPU",
                        arg_name(j),
                        type_text(f),
                        ids(f),
                        arg_name(i),
                        type_text(d),
                        ids(d)
                    )));
                }
            }
        }
    }
    let Some((_, f)) = first else { return Ok(OutPlace::DEFAULT) };
    let sharded = inputs
        .filter(|d| d.placement.committed)
        .find_map(|d| d.sharded_info().map(|s| (s.sharding.clone(), d.aval.shape.clone())));
    Ok(OutPlace { placement: f.placement, sharded, specs: None, kinds: Vec::new() })
}

/// Argument names JAX uses for an eager op: `x`, `y` for binary ops, else `args[i]`.
pub(crate) fn eager_arg_name(n: usize) -> impl Fn(usize) -> String {
    move |i| if n == 2 { ["x", "y"][i].to_string() } else if n == 1 { "x".to_string() } else { format!("args[{i}]") }
}

/// Whether `x` is already laid out as `target` (so `in_shardings`/`out_shardings` need not
/// move it).
pub(crate) fn placed_as(x: &Array, target: &PutTarget) -> bool {
    let Ok(s) = x.sharding() else { return false };
    match target {
        PutTarget::Device(d) => x.committed() && s == Sharding::Single(SingleDeviceSharding::new(*d)),
        PutTarget::Sharding(t) => x.committed() && &s == t,
        PutTarget::Spec(spec) => match (get_mesh(), &s) {
            (Some(m), Sharding::Named(ns)) => ns.mesh == m && &ns.spec == spec && ns.memory_kind == MemoryKind::Device,
            _ => false,
        },
        PutTarget::Memory(k) => s.memory_kind() == *k,
    }
}

/// The sharding `device_put(x, target)` lays `x` out as: a device's single-device
/// sharding, a spec on the mesh of `set_mesh`, `x`'s own layout in another memory kind.
/// Errors: a `PartitionSpec` with no mesh set (JAX's text), a device past the last, a spec
/// that does not fit the mesh, an unknown memory kind; `x` a tracer for a memory target.
fn target_sharding(x: &Array, target: &PutTarget) -> Result<Sharding> {
    Ok(match target {
        PutTarget::Memory(kind) => x.sharding()?.with_memory_kind(kind.name())?,
        PutTarget::Device(d) => Sharding::Single(SingleDeviceSharding::new(Device::new(d.id as usize)?)),
        PutTarget::Sharding(s) => s.clone(),
        PutTarget::Spec(spec) => {
            let mesh = get_mesh().ok_or_else(|| {
                Error::value_error(format!(
                    "Please set a mesh via `set_mesh` if a PartitionSpec is passed to device_put (got {spec:?}; or pass a NamedSharding)"
                ))
            })?;
            Sharding::Named(NamedSharding::new(&mesh, spec.clone())?)
        }
    })
}

/// JAX's check of a committed `jit` argument against its `in_shardings` entry
/// (`pjit._resolve_in_shardings`, JAX 0.10.2): an uncommitted argument is placed as
/// asked, but a committed one whose layout differs is an error, not a silent reshard
/// (the reshard would be real data movement hidden in the call; `device_put` or
/// `reshard` it first). The layouts compare as XLA's HLO shardings do: the block each
/// mesh position holds, not which device ids form the mesh, and any two replicated
/// layouts (one device, or `P()` on a mesh) are equal. A layout that matches in another
/// memory kind is JAX's memory-kind `ValueError`.
/// Errors: `ValueError` "Sharding passed to jit does not match the sharding on the
/// respective arg. …" or "Memory kinds passed to jax.jit does not match …".
pub(crate) fn check_committed_arg(x: &Array, target: &PutTarget) -> Result<()> {
    if !x.committed() {
        return Ok(());
    }
    let Ok(have) = x.sharding() else { return Ok(()) };
    // A target that cannot be resolved: device_put, called next, reports it.
    let Ok(want) = target_sharding(x, target) else { return Ok(()) };
    let shape = x.shape();
    // Per mesh position, the block held; `None` when the layout cannot hold this shape
    // (device_put reports the divisibility or rank error).
    let layout = |s: &Sharding| -> Option<Vec<BlockIndex>> {
        match s {
            Sharding::Single(_) => Some(vec![shape.iter().map(|&n| (0, n, true)).collect()]),
            Sharding::Named(ns) => ns.blocks(&shape).ok().map(|b| b.into_iter().map(|(_, idx)| idx).collect()),
        }
    };
    let (Some(a), Some(b)) = (layout(&have), layout(&want)) else { return Ok(()) };
    let replicated = |l: &[BlockIndex]| l.iter().all(|idx| idx.iter().all(|&(_, _, full)| full));
    if !(a == b || replicated(&a) && replicated(&b)) {
        return Err(Error::value_error(format!(
            "Sharding passed to jit does not match the sharding on the respective arg. Got jit sharding: {want:?},\narg sharding: {have:?} for arg type: {}",
            typeof_(x)
        )));
    }
    if want.memory_kind() != have.memory_kind() {
        return Err(Error::value_error(format!(
            "Memory kinds passed to jax.jit does not match memory kind on the respective arg. Got jit memory kind: {}, arg memory kind: {} for arg type: {}",
            want.memory_kind(),
            have.memory_kind(),
            typeof_(x)
        )));
    }
    Ok(())
}

/// The per-device data of a sharded array whose shards exist (a `device_put` or
/// partitioned result), by device id; `None` otherwise (computed on the gather path).
pub(crate) fn shard_map_of(d: &DeviceArray) -> Option<std::collections::HashMap<u32, Arc<DeviceArray>>> {
    let sh = d.sharded_info()?;
    let shards = sh.shards.get()?;
    Some(shards.iter().map(|s| (s.device, s.data.clone())).collect())
}

/// A sharded array of type `aval` laid out as `ns`, made of per-device shards (device,
/// block, data), committed to the mesh; its whole value is assembled only when read.
pub(crate) fn sharded_from_shards(aval: ShapedArray, ns: NamedSharding, shards: Vec<(u32, BlockIndex, Arc<DeviceArray>)>) -> Arc<DeviceArray> {
    let first = ns.mesh.device_ids()[0];
    let sh = Sharded { sharding: ns, shards: OnceLock::new(), gather_on_wait: true };
    let _ = sh.shards.set(shards.into_iter().map(|(device, index, data)| ShardBuf { device, index, data }).collect());
    DeviceArray::sharded(aval, Placement { device: first, committed: true }, sh, None)
}

/// Global-view sharding operations (`sharding_rules.rs`).
pub use crate::sharding_rules::{dot_out_sharding, inspect_array_sharding, reshard, with_sharding_constraint};
pub use crate::partition::partitioned_calls;

// ---------------------------------------------------------------- typeof

/// The type text of a device array with its explicit sharding and memory space:
/// `float32[8@x]`, `float32<host>[8]` (pinned host memory, JAX's `MemorySpace.Host`).
pub(crate) fn type_text(d: &DeviceArray) -> String {
    let t = match d.sharded_info() {
        Some(sh) => sharded_type_text(&d.aval, &sh.sharding),
        None => d.aval.long(),
    };
    with_space(t, d.memory_kind)
}

/// `float32[8]` → `float32<host>[8]` for pinned host memory (the space goes after the dtype).
fn with_space(t: String, kind: MemoryKind) -> String {
    match (kind, t.find('[')) {
        (MemoryKind::PinnedHost, Some(p)) => format!("{}<host>{}", &t[..p], &t[p..]),
        _ => t,
    }
}

fn sharded_type_text(aval: &ShapedArray, ns: &NamedSharding) -> String {
    let dims: Vec<String> = aval
        .shape
        .iter()
        .enumerate()
        .map(|(d, n)| {
            let axes: Vec<&String> = ns
                .spec
                .axes(d)
                .iter()
                .filter(|a| ns.mesh.axis_index(a).map(|k| ns.mesh.axis_types()[k] == AxisType::Explicit).unwrap_or(false))
                .collect();
            match axes.len() {
                0 => n.to_string(),
                1 => format!("{n}@{}", axes[0]),
                _ => format!("{n}@({})", axes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")),
            }
        })
        .collect();
    format!("{}{}[{}]", if aval.weak_type { "~" } else { "" }, aval.dtype.name(), dims.join(","))
}

/// The type of an array as `jax.typeof` shows it: `{}` gives `float32[8@x]` (dimensions
/// split over `Explicit` mesh axes carry `@axis`; an array in pinned host memory
/// `float32<host>[8]`; weakly typed `~float32[8]`), `{:?}` gives `ShapedArray(float32[8@x])`
/// (`ShapedArray(float32[8], weak_type=True)`), as JAX's str and repr.
#[derive(Clone, PartialEq, Eq)]
pub struct ArrayType {
    /// Shape, dtype, weak type.
    pub aval: ShapedArray,
    /// The sharding of a sharded concrete array.
    pub sharding: Option<NamedSharding>,
    /// The memory the array lives in (`pinned_host` shows as `<host>`; JAX's
    /// `unpinned_host` is the device memory space and shows plain).
    pub memory_kind: MemoryKind,
    /// Inside a `shard_map` body traced with `check_vma`: the mesh axes the value varies
    /// over (JAX's varying manual axes), shown as `{V:X}` or `{V:(X,Y)}` after the type;
    /// empty elsewhere.
    pub vma: Vec<String>,
}

impl fmt::Display for ArrayType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = match &self.sharding {
            Some(ns) => sharded_type_text(&self.aval, ns),
            None => self.aval.long(),
        };
        f.write_str(&with_space(t, self.memory_kind))?;
        match self.vma.as_slice() {
            [] => Ok(()),
            [a] => write!(f, "{{V:{a}}}"),
            many => write!(f, "{{V:({})}}", many.join(",")),
        }
    }
}
impl fmt::Debug for ArrayType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // JAX's repr: `ShapedArray(float32[8@x], weak_type=True)` (`~` only in the str).
        let shown = self.to_string();
        match shown.strip_prefix('~') {
            Some(t) => write!(f, "ShapedArray({t}, weak_type=True)"),
            None => write!(f, "ShapedArray({shown})"),
        }
    }
}

/// `jax.typeof(x)` (`typeof` is a Rust keyword): the array's type with its sharding.
/// Inside `jit` (and loop bodies, branches) a traced value's sharding is derived from the
/// arguments' and what has been traced so far; inside `auto_axes`/`explicit_axes` its
/// mesh shows the switched axis types.
pub fn typeof_(x: &Array) -> ArrayType {
    let t = value_type(x);
    ArrayType {
        aval: x.aval(),
        sharding: t.as_ref().and_then(|t| t.sharding.clone()).map(|ns| match &x.0 {
            Repr::Tracer(_) => NamedSharding { mesh: crate::sharding_axes::axes_in_scope(&ns.mesh), ..ns },
            Repr::Device(_) => ns,
        }),
        memory_kind: match &x.0 {
            Repr::Device(d) => d.memory_kind,
            Repr::Tracer(_) if t.is_some_and(|t| t.host) => MemoryKind::PinnedHost,
            Repr::Tracer(_) => MemoryKind::Device,
        },
        vma: match &x.0 {
            Repr::Tracer(t) => crate::transform::shard_map::body_vma(t).unwrap_or_default(),
            Repr::Device(_) => vec![],
        },
    }
}

/// `x`'s type beyond its aval (its mesh's axis types as they are), `None` when plain.
/// A tracer's is propagated over its trace so far (`trace::partial_jaxpr_with_types`) when
/// typing is in play (a mesh set, or typed arguments in some trace); free otherwise.
pub(crate) fn value_type(x: &Array) -> Option<crate::sharding_types::ValueType> {
    match &x.0 {
        Repr::Device(d) => crate::sharding_types::ValueType::of_device(d),
        Repr::Tracer(t) => {
            let mesh = get_mesh();
            if mesh.is_none() && !crate::trace::has_typed_args() {
                return None;
            }
            let (j, types) = crate::trace::partial_jaxpr_with_types(t)?;
            let (m, spec, host) = crate::sharding_types::traced_value_type(&j, &types, mesh)?;
            let sharding = m.map(|m| NamedSharding { mesh: m, spec, memory_kind: MemoryKind::Device });
            (sharding.is_some() || host).then_some(crate::sharding_types::ValueType { sharding, host })
        }
    }
}

// ---------------------------------------------------------------- Array methods

/// One device's piece of an array (`jax.Shard`): `{:?}` is JAX's
/// `Shard(device=CpuDevice(id=0), index=(slice(0, 2, None), …), replica_id=0, data=[…])`.
#[derive(Clone)]
pub struct Shard {
    /// The device holding this piece.
    pub device: Device,
    /// Per dimension `(start, stop)`; `None` for a dimension that is not split
    /// (`slice(None, None, None)`).
    pub index: ShardIndex,
    /// Which copy of this block it is (0 for the first device holding it).
    pub replica_id: usize,
    /// The shard's data, an array committed to `device`.
    pub data: Array,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let idx = py_tuple(self.index.iter().map(|i| match i {
            Some((a, b)) => format!("slice({a}, {b}, None)"),
            None => "slice(None, None, None)".to_string(),
        }));
        write!(f, "Shard(device={:?}, index={idx}, replica_id={}, data={})", self.device, self.replica_id, self.data)
    }
}

impl Array {
    /// Whether the array is committed to its devices (`device_put` to a device or
    /// sharding, or a result of committed inputs). Tracers: `false`.
    pub fn committed(&self) -> bool {
        match &self.0 {
            Repr::Device(d) => d.placement.committed,
            Repr::Tracer(_) => false,
        }
    }

    /// The array's sharding: `SingleDeviceSharding(device=CpuDevice(id=0), …)` for arrays
    /// on one device, the `NamedSharding` for sharded ones. Errors for tracers.
    pub fn sharding(&self) -> Result<Sharding> {
        match &self.0 {
            Repr::Device(d) => Ok(match d.sharded_info() {
                Some(s) => Sharding::Named(s.sharding.clone()),
                None => Sharding::Single(SingleDeviceSharding { device: Device { id: d.placement.device }, memory_kind: d.memory_kind }),
            }),
            Repr::Tracer(_) => Err(Error::type_error("a traced array has no concrete sharding; use typeof_")),
        }
    }

    /// The devices holding the array (`x.devices()`), in mesh order.
    pub fn devices(&self) -> Result<Vec<Device>> {
        Ok(self.sharding()?.device_set())
    }

    /// The shards on this process's devices, in mesh order (`x.addressable_shards`). For
    /// a computed sharded array the shards are sliced from its value now (waiting for it).
    /// Errors: the computation's error; tracers.
    pub fn addressable_shards(&self) -> Result<Vec<Shard>> {
        let d = match &self.0 {
            Repr::Device(d) => d,
            Repr::Tracer(_) => return Err(Error::type_error("a traced array has no shards")),
        };
        let Some(sh) = d.sharded_info() else {
            let dev = Device { id: d.placement.device };
            return Ok(vec![Shard { device: dev, index: vec![None; d.aval.ndim()], replica_id: 0, data: self.clone() }]);
        };
        if sh.shards.get().is_none() {
            let whole = d.wait()?;
            let blocks = sh.sharding.blocks(&d.aval.shape)?;
            let v: Vec<ShardBuf> = blocks
                .into_iter()
                .map(|(dev, index)| {
                    let b = slice_block(&whole, &index);
                    ShardBuf { device: dev, index, data: DeviceArray::ready_on(b.aval().clone(), Arc::new(b), Placement { device: dev, committed: true }) }
                })
                .collect();
            let _ = sh.shards.set(v);
        }
        let shards = sh.shards.get().expect("set");
        let mut seen: Vec<(&BlockIndex, usize)> = vec![];
        Ok(shards
            .iter()
            .map(|s| {
                let replica_id = match seen.iter_mut().find(|(i, _)| *i == &s.index) {
                    Some((_, n)) => {
                        *n += 1;
                        *n - 1
                    }
                    None => {
                        seen.push((&s.index, 1));
                        0
                    }
                };
                Shard {
                    device: Device { id: s.device },
                    index: s.index.iter().map(|&(a, n, full)| if full { None } else { Some((a, a + n)) }).collect(),
                    replica_id,
                    data: Array::from_device(s.data.clone()),
                }
            })
            .collect())
    }
}

// ---------------------------------------------------------------- visualize_array_sharding

/// `jax.debug.visualize_array_sharding(x)`: which devices hold which block of a 1-D or
/// 2-D array, as JAX draws it with `rich`. The value's text (`{}`, `text_repr`, what tests
/// compare) is JAX's `use_color=False` table (box `SQUARE`, lines between rows, no
/// padding; scale 1, `min_width` 9, `max_width` 80); a terminal shows JAX's coloured blocks
/// instead, Jupyter an HTML grid of the same layout with the bytes each device holds
/// (`display::sharding_view`). Algorithm from `jax/_src/debugging.py::visualize_sharding`:
/// base height 10, base width `int(10 * cols/rows)` (1-D: `int(10/len)`), a block's cell
/// is `clamp(int(frac_w * base_width * 2.5), 9, 80)` characters wide less 2 and
/// `int(frac_h * 10)` lines tall (1-D: 1), the label `CPU <sorted ids>` centred; a table
/// wider than 80 columns is squeezed to 80 as rich squeezes JAX's (labels kept).
/// Errors: JAX's `ValueError` for other ranks; tracers (use `inspect_array_sharding`).
pub fn visualize_array_sharding(x: &Array) -> Result<crate::display::sharding_view::ShardingView> {
    let d = match &x.0 {
        Repr::Device(d) => d,
        Repr::Tracer(t) => {
            if let Some(view) = crate::transform::shard_map::body_view(t) {
                // Printed at once, as JAX's visualize_array_sharding prints: the value of a
                // call inside a body (`visualize_array_sharding(&x)?;`) is never shown.
                if let Ok(v) = &view {
                    println!("{}", v.plain);
                }
                return view;
            }
            return Err(Error::type_error(
                "visualize_array_sharding needs a concrete array; inside jit use debug::inspect_array_sharding(&x, |s| ...)",
            ));
        }
    };
    let blocks = match d.sharded_info() {
        Some(sh) => sh.sharding.blocks(&d.aval.shape)?,
        None => vec![(d.placement.device, d.aval.shape.iter().map(|&n| (0, n, true)).collect())],
    };
    visualize_blocks(&d.aval, &type_text(d), blocks)
}

/// The drawing of `blocks` (device, block) of an array of type `aval` (`type_text` for
/// the HTML title).
pub(crate) fn visualize_blocks(
    aval: &ShapedArray,
    type_text: &str,
    blocks: Vec<(u32, BlockIndex)>,
) -> Result<crate::display::sharding_view::ShardingView> {
    use crate::display::sharding_view::{bytes_text, Block, ShardingView};
    let shape = aval.shape.clone();
    if shape.is_empty() || shape.len() > 2 {
        return Err(Error::value_error("`visualize_sharding` only works for shapes with 1 and 2 dimensions."));
    }
    let base_height = 10usize;
    let aspect = if shape.len() == 2 { shape[1] as f64 / shape[0] as f64 } else { 1.0 / shape[0] as f64 };
    let base_width = (base_height as f64 * aspect) as usize;
    let esize = aval.dtype.size_bytes();
    // (row, col) -> (device ids, width, height, bytes)
    let mut cells: std::collections::BTreeMap<(usize, usize), (Vec<u32>, usize, usize, usize)> = Default::default();
    for (dev, idx) in blocks {
        let frac = |i: usize, n: usize| idx[i].1 as f64 / n as f64;
        let block_no = |i: usize| idx[i].0.checked_div(idx[i].1).unwrap_or(0);
        let (key, w, h) = if shape.len() == 2 {
            ((block_no(0), block_no(1)), frac(1, shape[1]) * base_width as f64 * 2.5, (frac(0, shape[0]) * base_height as f64) as usize)
        } else {
            ((0, block_no(0)), frac(0, shape[0]) * base_width as f64 * 2.5, 1)
        };
        let w = (w as usize).clamp(9, 80);
        let bytes = idx.iter().map(|i| i.1).product::<usize>() * esize;
        let e = cells.entry(key).or_insert((vec![], w, h, bytes));
        if !e.0.contains(&dev) {
            e.0.push(dev);
        }
    }
    let blocks: Vec<Block> = cells
        .iter()
        .map(|(&(row, col), (ids, w, h, bytes))| {
            let mut ids = ids.clone();
            ids.sort();
            let note = if ids.len() > 1 { format!("{} on each", bytes_text(*bytes)) } else { bytes_text(*bytes) };
            Block { row, col, label: format!("CPU {}", ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")), width: *w, height: *h, note }
        })
        .collect();
    let total = aval.size() * esize;
    let title = format!("{type_text} · {}", bytes_text(total));
    Ok(ShardingView::new(&blocks, &title, false, &[], &[]))
}

/// `%mesh`'s drawing of a mesh: its devices on a grid (rows: the first axis; columns: the
/// other axes, row-major), labelled `axis=index`, under the mesh's `str`. The text form
/// is a box table; Jupyter gets the HTML grid.
pub fn visualize_mesh(mesh: &Mesh) -> crate::display::sharding_view::ShardingView {
    mesh_grid(mesh, &mesh.to_string(), "")
}

/// The drawing of a value inside a `shard_map` body (beyond JAX, whose
/// `visualize_array_sharding` fails on the body's tracers): the mesh's devices on
/// `visualize_mesh`'s grid, each holding one block of type `block` (the HTML cell notes its
/// bytes), under the title `float32[2,2] block on each device of Mesh(..); varies over
/// 'i'` (devices differing only along other axes hold equal blocks; `the same block on
/// every device` when it varies over none).
pub(crate) fn visualize_body_block(block: &ShapedArray, mesh: &Mesh, varying: &[String]) -> crate::display::sharding_view::ShardingView {
    let over = match varying.len() {
        0 => "the same block on every device (varies over no mesh axis)".to_string(),
        1 => format!("varies over '{}'", varying[0]),
        _ => format!("varies over ({})", varying.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(", ")),
    };
    let bytes = crate::display::sharding_view::bytes_text(block.size() * block.dtype.size_bytes());
    mesh_grid(mesh, &format!("{} block on each device of {mesh}; {over}", block.long()), &bytes)
}

/// `mesh`'s devices on a grid (rows: the first axis; columns: the other axes, row-major),
/// labelled `axis=index`, under `title`; each cell's HTML note `note`.
fn mesh_grid(mesh: &Mesh, title: &str, note: &str) -> crate::display::sharding_view::ShardingView {
    use crate::display::sharding_view::{Block, ShardingView};
    let sizes = mesh.axis_sizes();
    let names = mesh.axis_names();
    let (rows, cols) = if sizes.len() <= 1 { (1, mesh.size()) } else { (sizes[0], mesh.size() / sizes[0].max(1)) };
    let ids = mesh.device_ids();
    let blocks: Vec<Block> = (0..rows * cols)
        .map(|k| Block { row: k / cols, col: k % cols, label: format!("CPU {}", ids[k]), width: 9, height: 1, note: note.to_string() })
        .collect();
    // Labels: one axis per dimension of the grid; minor axes combined as `y=0,z=1`.
    let label = |axes: &[usize], mut flat: usize| -> String {
        let mut parts = vec![];
        for &a in axes.iter().rev() {
            parts.push(format!("{}={}", names[a], flat % sizes[a]));
            flat /= sizes[a];
        }
        parts.reverse();
        parts.join(",")
    };
    let (row_axes, col_axes): (Vec<usize>, Vec<usize>) = if sizes.len() <= 1 { (vec![], (0..sizes.len()).collect()) } else { (vec![0], (1..sizes.len()).collect()) };
    let row_labels: Vec<String> = if row_axes.is_empty() { vec![] } else { (0..rows).map(|r| label(&row_axes, r)).collect() };
    let col_labels: Vec<String> = (0..cols).map(|c| label(&col_axes, c)).collect();
    ShardingView::new(&blocks, title, true, &row_labels, &col_labels)
}

// ---------------------------------------------------------------- shard_map blocks (issue 6)

/// The block of `x` each device of `ns`'s mesh holds (mesh order), for `shard_map`: the
/// shards themselves when `x` is already sharded by `ns`, else blocks sliced from its value
/// (waiting for it); a block that is the whole array shares `x`'s buffer. Every block is
/// committed to its device. Errors: `x`'s computation failed; a shape `ns` does not divide.
pub(crate) fn shard_blocks(x: &Arc<DeviceArray>, ns: &NamedSharding) -> Result<Vec<Arc<DeviceArray>>> {
    if let Some(sh) = x.sharded_info() {
        if sh.sharding.mesh == ns.mesh && same_spec(&sh.sharding.spec, &ns.spec) {
            if let Some(shards) = sh.shards.get() {
                return Ok(shards.iter().map(|s| s.data.clone()).collect());
            }
        }
    }
    let blocks = ns.blocks(&x.aval.shape)?;
    let whole = x.wait()?;
    Ok(blocks
        .into_iter()
        .map(|(dev, index)| {
            let place = Placement { device: dev, committed: true };
            if index.iter().all(|i| i.2) {
                DeviceArray::ready_on(x.aval.strong(), whole.clone(), place)
            } else {
                let b = slice_block(&whole, &index);
                DeviceArray::ready_on(b.aval().clone(), Arc::new(b), place)
            }
        })
        .collect())
}

/// Specs equal up to trailing `None` entries.
fn same_spec(a: &PartitionSpec, b: &PartitionSpec) -> bool {
    let n = a.0.len().max(b.0.len());
    (0..n).all(|d| a.axes(d) == b.axes(d))
}

/// An array of `aval` sharded by `ns` whose shards are `shards` (one per mesh device, in
/// mesh order; each is that device's block): `shard_map`'s results, assembled without
/// copying. Its whole value is gathered only when something needs it.
pub(crate) fn from_shards(aval: ShapedArray, ns: NamedSharding, shards: Vec<Arc<DeviceArray>>) -> Result<Arc<DeviceArray>> {
    let blocks = ns.blocks(&aval.shape)?;
    if blocks.len() != shards.len() {
        return Err(Error::runtime(format!("internal: {} shards for a mesh of {} devices", shards.len(), blocks.len())));
    }
    // A block made on another device (a `pure_callback`'s result inside a shard_map body is
    // made on the host, i.e. device 0) is copied to the device that holds it, so its memory
    // is that device's; one made uncommitted on its own device is copied committed, as
    // every shard of a shard_map result is.
    let _order = dispatch::submission_order();
    let placed = |device: u32, data: Arc<DeviceArray>| {
        if data.placement.device == device && data.placement.committed { data } else { put_on(&data, device, true, data.memory_kind) }
    };
    Ok(sharded_from_shards(aval, ns, blocks.into_iter().zip(shards).map(|((device, index), data)| (device, index, placed(device, data))).collect()))
}
