//! Collectives between device threads in shared memory: the rendezvous a `shard_map`
//! execution's per-device threads meet at for each collective (`psum`, `all_gather`, ...)
//! and for ordered per-device printing.
//!
//! Invariants:
//! - Every device of a run executes the same sequence of collectives (SPMD: one body,
//!   no collective under data-dependent control flow), so one barrier over all devices
//!   per step is enough even when a collective's groups are a sub-grid of the mesh.
//! - Inputs are shared, never copied to other devices: each device deposits the `Arc` of
//!   its buffer and reads the others' in place. A reduction's element `e` is always
//!   summed in group order `0, 1, .., n-1`, whichever thread computes it, so results are
//!   bitwise identical on every device and from run to run.
//! - A failing device poisons the barrier: the others return an error instead of waiting
//!   forever.

use super::buffer::Buffer;
use super::dispatch::{DeviceArray, Placement};
use crate::error::{Error, Result};
use crate::ir::{CallbackId, Collective, DType, ShapedArray};
use crate::sharding::Mesh;
use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A barrier over a run's device threads that can be poisoned by a failing one.
struct Barrier {
    n: usize,
    /// (arrived, generation, poisoned)
    state: Mutex<(usize, u64, bool)>,
    cv: Condvar,
}

impl Barrier {
    fn wait(&self) -> Result<()> {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if g.2 {
            return Err(poisoned());
        }
        let generation = g.1;
        g.0 += 1;
        if g.0 == self.n {
            g.0 = 0;
            g.1 += 1;
            self.cv.notify_all();
            return Ok(());
        }
        while g.1 == generation && !g.2 {
            g = self.cv.wait_timeout(g, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
            // An interrupt stops an eager shard_map's device threads (the cell joins them);
            // a device worker never takes it (`dispatch::on_worker`): the devices of a
            // partitioned program stay in step, and the cell's own wait reports it.
            if g.1 == generation && !super::dispatch::on_worker() && super::interrupt::take_if_set() {
                g.2 = true;
                self.cv.notify_all();
                return Err(Error::interrupted());
            }
        }
        if g.1 == generation { Err(poisoned()) } else { Ok(()) }
    }

    fn is_poisoned(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).2
    }

    fn poison(&self) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.2 = true;
        self.cv.notify_all();
    }
}

fn poisoned() -> Error {
    Error::runtime("shard_map: another device of the mesh failed; this device stopped at a collective")
}

/// What a device deposits for one step.
#[derive(Default, Clone)]
struct Slot {
    input: Option<Arc<Buffer>>,
    /// The output buffer a group leader shares with its group (psum, all_gather).
    shared: Option<Arc<Buffer>>,
    /// Operands of an ordered debug print.
    args: Vec<Buffer>,
}

/// One `shard_map` execution: the mesh and the rendezvous state of its device threads.
pub struct MeshRun {
    mesh: Mesh,
    barrier: Barrier,
    slots: Mutex<Vec<Slot>>,
}

thread_local! {
    /// The run and the flat mesh index of the device this thread executes for.
    static CURRENT: RefCell<Option<(Arc<MeshRun>, usize)>> = const { RefCell::new(None) };
}

impl MeshRun {
    /// A run over every device of `mesh`.
    pub fn new(mesh: &Mesh) -> Arc<MeshRun> {
        let n = mesh.size();
        Arc::new(MeshRun {
            mesh: mesh.clone(),
            barrier: Barrier { n, state: Mutex::new((0, 0, false)), cv: Condvar::new() },
            slots: Mutex::new(vec![Slot::default(); n]),
        })
    }

    /// Stops the run: devices waiting at a collective get an error.
    pub fn poison(&self) {
        self.barrier.poison();
    }

    /// Runs `f` on this thread as device `index` (flat, row-major over the mesh axes).
    pub fn as_device<R>(self: &Arc<Self>, index: usize, f: impl FnOnce() -> R) -> R {
        let prev = CURRENT.with(|c| c.borrow_mut().replace((self.clone(), index)));
        let r = f();
        CURRENT.with(|c| *c.borrow_mut() = prev);
        r
    }

    /// Mesh coordinates of flat device `index`.
    pub fn coords(&self, index: usize) -> Vec<usize> {
        self.mesh.coords(index)
    }

    /// The group of device `index` over `axes`: its position and the members' flat
    /// indices in position order (row-major over `axes` in the given order).
    fn group(&self, index: usize, axes: &[String]) -> Result<(usize, Vec<usize>)> {
        let sizes = self.mesh.axis_sizes();
        let names = self.mesh.axis_names();
        let ks: Vec<usize> = axes
            .iter()
            .map(|a| names.iter().position(|n| n == a).ok_or_else(|| Error::value_error(format!("unbound axis name: {a}"))))
            .collect::<Result<_>>()?;
        let me = self.coords(index);
        let members = self.mesh.group_members(index, &ks);
        let pos = ks.iter().fold(0, |acc, &k| acc * sizes[k] + me[k]);
        Ok((pos, members))
    }

    fn deposit(&self, index: usize, s: Slot) {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())[index] = s;
    }

    fn slot(&self, index: usize) -> Slot {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())[index].clone()
    }
}

/// The run and device index of this thread. Errors: a collective outside `shard_map`.
fn current(name: &str, axes: &[String]) -> Result<(Arc<MeshRun>, usize)> {
    CURRENT.with(|c| c.borrow().clone()).ok_or_else(|| {
        Error::value_error(format!(
            "unbound axis name: {}. {name} can only be used inside a function mapped by shard_map",
            axes.join(", ")
        ))
    })
}

/// The text JAX puts before a device's value in eager `shard_map`:
/// `On cpu:0 at mesh coordinates (i, j,) = (0, 1):`.
pub fn device_header(mesh: &Mesh, device: u32, coords: &[usize]) -> String {
    let names: Vec<String> = mesh.axis_names().iter().map(|n| format!("{n},")).collect();
    let cs: Vec<String> = coords.iter().map(|c| c.to_string()).collect();
    let cs = if cs.len() == 1 { format!("({},)", cs[0]) } else { format!("({})", cs.join(", ")) };
    format!("On cpu:{device} at mesh coordinates ({}) = {cs}:", names.join(" "))
}

/// Runs debug callback `id` for every device in mesh order, each output after its
/// device's header (all devices meet here; device 0 prints). Outside `shard_map` it
/// just fires the callback.
pub fn ordered_debug(id: CallbackId, args: Vec<Buffer>) -> Result<()> {
    let Some((run, me)) = CURRENT.with(|c| c.borrow().clone()) else {
        super::callbacks::fire(id, args);
        return Ok(());
    };
    run.deposit(me, Slot { args, ..Slot::default() });
    run.barrier.wait()?;
    if me == 0 {
        let ids = run.mesh.device_ids().to_vec();
        for (k, dev) in ids.iter().enumerate() {
            if k > 0 {
                println!();
            }
            println!("{}", device_header(&run.mesh, *dev, &run.coords(k)));
            super::callbacks::fire(id, run.slot(k).args);
        }
    }
    run.barrier.wait()
}

/// Runs collective `c` for this thread's device on `x` (`None` for `axis_index`),
/// giving a result of `out` placed (committed) on this device.
/// Errors: outside `shard_map`; another device failed; an unsupported dtype.
pub fn run(c: &Collective, x: Option<&Arc<DeviceArray>>, out: &ShapedArray) -> Result<Arc<DeviceArray>> {
    if let (Collective::Pvary { .. }, Some(x)) = (c, x) {
        // Only the type changes: the value stays on this device as it is.
        return Ok(x.clone());
    }
    let (run, me) = current(c.name(), c.axes())?;
    let device = run.mesh.device_ids()[me];
    let place = |b: Arc<Buffer>| DeviceArray::ready_on(out.clone(), b, Placement { device, committed: true });
    let (pos, members) = run.group(me, c.axes())?;
    if let Collective::AxisIndex { .. } = c {
        let b = Buffer::from_slice(out, &[pos as i32]).map_err(Error::runtime)?;
        return Ok(place(Arc::new(b)));
    }
    let x = x.ok_or_else(|| Error::runtime("internal: collective without operand"))?.wait()?;
    let n = members.len();
    let leader = pos == 0;
    let shared = if leader && matches!(c, Collective::Psum { .. } | Collective::Pmax { .. } | Collective::Pmin { .. } | Collective::AllGather { .. }) {
        Some(Arc::new(fresh(out)?))
    } else {
        None
    };
    if run.barrier.is_poisoned() {
        // Another device failed: its steps are no longer ours; touch no slot.
        return Err(poisoned());
    }
    run.deposit(me, Slot { input: Some(x.clone()), shared, args: vec![] });
    let r = run.barrier.wait();
    let result = r.and_then(|_| {
        let ins: Vec<Arc<Buffer>> =
            members.iter().map(|&m| run.slot(m).input.ok_or_else(|| Error::runtime("internal: missing collective input"))).collect::<Result<_>>()?;
        compute(c, &run, &members, pos, n, &ins, &x, out)
    });
    // Everyone has read the slots before anyone deposits for the next step.
    let done = run.barrier.wait();
    let b = result?;
    done?;
    Ok(place(b))
}

#[allow(clippy::too_many_arguments)]
fn compute(c: &Collective, run: &MeshRun, members: &[usize], pos: usize, n: usize, arcs: &[Arc<Buffer>], x: &Arc<Buffer>, out: &ShapedArray) -> Result<Arc<Buffer>> {
    let es = x.dtype().size_bytes();
    let ins: Vec<&Buffer> = arcs.iter().map(|b| b.as_ref()).collect();
    let ins = &ins[..];
    match c {
        Collective::Psum { .. } | Collective::Pmax { .. } | Collective::Pmin { .. } => {
            let shared = run.slot(members[0]).shared.ok_or_else(|| Error::runtime("internal: no shared output"))?;
            let len = out.size();
            let (lo, hi) = (len * pos / n, len * (pos + 1) / n);
            let op = match c {
                Collective::Psum { .. } => Op::Sum,
                Collective::Pmax { .. } => Op::Max,
                _ => Op::Min,
            };
            // SAFETY: members write disjoint element ranges [lo, hi) of the shared buffer
            // (a raw allocation, not borrowed elsewhere until the barrier after this step).
            unsafe { reduce_into(op, x.dtype(), ins, shared.as_ptr(), lo, hi)? };
            Ok(shared)
        }
        Collective::AllGather { dimension, tiled, .. } => {
            let shared = run.slot(members[0]).shared.ok_or_else(|| Error::runtime("internal: no shared output"))?;
            // Untiled: a new axis of size n at `dimension`; the block layout is the same.
            let (outer, inner) = if *tiled { split3(x.shape(), *dimension) } else { (x.shape()[..*dimension].iter().product(), x.shape()[*dimension..].iter().product::<usize>()) };
            let (outer, row) = if *tiled { (outer, x.shape()[*dimension] * inner * es) } else { (outer, inner * es) };
            let dst = shared.as_ptr();
            let src = x.bytes();
            for o in 0..outer {
                // SAFETY: block `pos` of each outer row is written only by this member.
                unsafe { std::ptr::copy_nonoverlapping(src[o * row..].as_ptr(), dst.add((o * n + pos) * row), row) };
            }
            Ok(shared)
        }
        Collective::ReduceScatter { scatter_dimension: d, .. } => {
            let shape = x.shape();
            let outer: usize = shape[..*d].iter().product();
            let inner: usize = shape[*d + 1..].iter().product();
            let blk = shape[*d] / n * inner; // elements of one block per outer row
            let res = fresh(out)?;
            let rp = res.as_ptr();
            for o in 0..outer {
                let lo = o * shape[*d] * inner + pos * blk;
                // SAFETY: `res` is ours; rows of blk elements at o*blk.
                unsafe { reduce_into_at(Op::Sum, x.dtype(), ins, rp, lo, lo + blk, o * blk)? };
            }
            Ok(Arc::new(res))
        }
        Collective::Ppermute { perm, .. } => match perm.iter().find(|(_, d)| *d == pos) {
            // The source's buffer itself: shared, not copied.
            Some((s, _)) => Ok(arcs[*s].clone()),
            None => Ok(Arc::new(Buffer::zeros(out))),
        },
        Collective::AllToAll { split_axis, concat_axis, .. } => {
            let shape = x.shape();
            let mut res = fresh(out)?;
            let dst = res.bytes_mut();
            // Block `pos` along split_axis of member k goes to block k along concat_axis.
            let mut bshape = shape.to_vec();
            bshape[*split_axis] /= n;
            let nb: usize = bshape.iter().product();
            let mut idx = vec![0usize; shape.len()];
            for (k, src) in ins.iter().enumerate() {
                let s = src.bytes();
                for e in 0..nb {
                    let mut r = e;
                    for dd in (0..shape.len()).rev() {
                        idx[dd] = r % bshape[dd];
                        r /= bshape[dd];
                    }
                    let mut si = 0;
                    let mut di = 0;
                    for dd in 0..shape.len() {
                        let sv = if dd == *split_axis { idx[dd] + pos * bshape[dd] } else { idx[dd] };
                        si = si * shape[dd] + sv;
                        let dv = if dd == *concat_axis { idx[dd] + k * bshape[dd] } else { idx[dd] };
                        di = di * out.shape[dd] + dv;
                    }
                    dst[di * es..(di + 1) * es].copy_from_slice(&s[si * es..(si + 1) * es]);
                }
            }
            Ok(Arc::new(res))
        }
        Collective::AxisIndex { .. } | Collective::Pvary { .. } => unreachable!("handled before the rendezvous"),
    }
}

/// (product of dims before `d`, product of dims after `d`).
fn split3(shape: &[usize], d: usize) -> (usize, usize) {
    (shape[..d].iter().product(), shape[d + 1..].iter().product())
}

/// An output buffer the collective overwrites completely (contents unspecified until
/// then). Errors: the device's memory limit (`RESOURCE_EXHAUSTED`).
fn fresh(out: &ShapedArray) -> Result<Buffer> {
    Buffer::for_output(out, super::memory::SITE_OTHER)
}

#[derive(Clone, Copy)]
enum Op {
    Sum,
    Max,
    Min,
}

/// Reduces elements `[lo, hi)` of every input into `dst[lo..hi]`, in input order.
///
/// # Safety
/// `dst` must be valid for writes of `hi` elements of `dtype`, and no other thread may
/// access `dst[lo..hi]` meanwhile.
unsafe fn reduce_into(op: Op, dtype: DType, ins: &[&Buffer], dst: *mut u8, lo: usize, hi: usize) -> Result<()> {
    unsafe { reduce_into_at(op, dtype, ins, dst, lo, hi, lo) }
}

/// Reduces input elements `[lo, hi)` into `dst` starting at element `at`.
///
/// # Safety
/// As [`reduce_into`], for `dst[at..at + hi - lo]`.
/// `d[i] = f(..f(f(srcs[0][lo+i], srcs[1][lo+i]), ..), srcs[n-1][lo+i])`: every element
/// combined in group order (bitwise-stable), in chunks that stay in cache across sources.
#[inline(always)]
fn combine<T: Copy>(d: &mut [T], srcs: &[&[T]], lo: usize, f: impl Fn(T, T) -> T) {
    const CHUNK: usize = 4096;
    let n = d.len();
    let mut s = 0;
    while s < n {
        let e = (s + CHUNK).min(n);
        let dc = &mut d[s..e];
        dc.copy_from_slice(&srcs[0][lo + s..lo + e]);
        for src in &srcs[1..] {
            for (o, v) in dc.iter_mut().zip(&src[lo + s..lo + e]) {
                *o = f(*o, *v);
            }
        }
        s = e;
    }
}

unsafe fn reduce_into_at(op: Op, dtype: DType, ins: &[&Buffer], dst: *mut u8, lo: usize, hi: usize, at: usize) -> Result<()> {
    macro_rules! go {
        ($t:ty, $add:expr, $max:expr, $min:expr) => {{
            let srcs: Vec<&[$t]> = ins.iter().map(|b| b.as_slice::<$t>()).collect::<std::result::Result<_, _>>().map_err(Error::runtime)?;
            // SAFETY: caller's contract.
            let d = unsafe { std::slice::from_raw_parts_mut((dst as *mut $t).add(at), hi - lo) };
            // One monomorphized (inlined, vectorizable) loop per op, not a call per element.
            match op {
                Op::Sum => combine(d, &srcs, lo, $add),
                Op::Max => combine(d, &srcs, lo, $max),
                Op::Min => combine(d, &srcs, lo, $min),
            }
            Ok(())
        }};
    }
    macro_rules! float {
        ($t:ty) => {
            go!($t, |a, b| a + b, |a: $t, b: $t| if a.is_nan() || a >= b { a } else { b }, |a: $t, b: $t| if a.is_nan() || a <= b { a } else { b })
        };
    }
    macro_rules! int {
        ($t:ty) => {
            go!($t, |a: $t, b: $t| a.wrapping_add(b), |a: $t, b: $t| a.max(b), |a: $t, b: $t| a.min(b))
        };
    }
    match dtype {
        DType::F32 => float!(f32),
        DType::F64 => float!(f64),
        DType::F16 => float!(half::f16),
        DType::BF16 => float!(half::bf16),
        DType::I8 => int!(i8),
        DType::I16 => int!(i16),
        DType::I32 => int!(i32),
        DType::I64 => int!(i64),
        DType::U8 => int!(u8),
        DType::U32 => int!(u32),
        DType::Bool => go!(u8, |a, b| a | b, |a, b| a | b, |a, b| a & b),
    }
}
