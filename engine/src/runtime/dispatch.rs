//! Asynchronous dispatch: device arrays are futures filled by a device worker thread.
//!
//! Invariant: work is executed in submission order on one worker per device, so every
//! input of a job was produced by an earlier job and is ready (or failed) when the job
//! runs. Waiting for a value polls the interrupt flag, so Ctrl-C stops a wait with
//! `Error::interrupted_wait()` and leaves the array usable later (the running computation cannot be
//! stopped part-way: it ends in the background and fills the array).

use super::buffer::Buffer;
use super::interrupt;
use crate::error::{Error, Result};
use crate::ir::ShapedArray;
use std::sync::mpsc::{channel, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

/// The state of a device array's value.
#[derive(Clone)]
pub enum State {
    /// Dispatched; the worker has not produced it yet.
    Pending,
    Ready(Arc<Buffer>),
    /// The computation that produces it failed.
    Failed(Error),
    /// Donated to a computation; its buffer was reused.
    Deleted,
}

/// Where an array lives: its device (for a sharded array, the mesh's first device) and
/// whether it is committed to it (JAX's `Array.committed`). Creation functions give
/// `Placement::DEFAULT` (device 0, uncommitted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Placement {
    /// Device id (`sharding::Device::id`).
    pub device: u32,
    /// Committed to the device (JAX's `Array.committed`).
    pub committed: bool,
}

impl Placement {
    /// Device 0, uncommitted: where creation functions put arrays.
    pub const DEFAULT: Placement = Placement { device: 0, committed: false };
}

/// A value on a (simulated CPU) device: its type, placement and a future of its buffer.
///
/// A sharded array (`crate::sharding::device_put` to a `NamedSharding`) also carries its
/// sharding and one `DeviceArray` per shard; its own state then holds the whole value only
/// once something needs it (`wait` gathers the shards: the temporary behaviour of ops on
/// sharded arrays until the partitioner exists).
pub struct DeviceArray {
    pub aval: ShapedArray,
    pub placement: Placement,
    /// The memory it lives in (`device` unless `device_put` to a host memory kind).
    pub memory_kind: super::memory_kind::MemoryKind,
    pub(crate) sharded: Option<Box<crate::sharding::Sharded>>,
    state: Mutex<State>,
    ready: Condvar,
}

impl DeviceArray {
    /// A device array whose value is already known (device 0, uncommitted).
    pub fn ready(aval: ShapedArray, buf: Arc<Buffer>) -> Arc<DeviceArray> {
        Self::ready_on(aval, buf, Placement::DEFAULT)
    }
    /// A device array to be filled by a dispatched job (device 0, uncommitted).
    pub fn pending(aval: ShapedArray) -> Arc<DeviceArray> {
        Self::pending_on(aval, Placement::DEFAULT)
    }
    /// `ready` with a placement.
    pub fn ready_on(aval: ShapedArray, buf: Arc<Buffer>, placement: Placement) -> Arc<DeviceArray> {
        device_bytes::add(placement.device, aval.nbytes());
        Arc::new(DeviceArray { aval, placement, memory_kind: Default::default(), sharded: None, state: Mutex::new(State::Ready(buf)), ready: Condvar::new() })
    }
    /// `pending` with a placement.
    pub fn pending_on(aval: ShapedArray, placement: Placement) -> Arc<DeviceArray> {
        device_bytes::add(placement.device, aval.nbytes());
        Arc::new(DeviceArray { aval, placement, memory_kind: Default::default(), sharded: None, state: Mutex::new(State::Pending), ready: Condvar::new() })
    }
    /// `ready_on` in memory kind `kind` (its bytes counted in that kind's statistics).
    pub fn ready_in(aval: ShapedArray, buf: Arc<Buffer>, placement: Placement, kind: super::memory_kind::MemoryKind) -> Arc<DeviceArray> {
        super::memory_kind::add(placement.device, kind, aval.nbytes());
        Arc::new(DeviceArray { aval, placement, memory_kind: kind, sharded: None, state: Mutex::new(State::Ready(buf)), ready: Condvar::new() })
    }
    /// `pending_on` in memory kind `kind` (its bytes counted in that kind's statistics).
    pub fn pending_in(aval: ShapedArray, placement: Placement, kind: super::memory_kind::MemoryKind) -> Arc<DeviceArray> {
        super::memory_kind::add(placement.device, kind, aval.nbytes());
        Arc::new(DeviceArray { aval, placement, memory_kind: kind, sharded: None, state: Mutex::new(State::Pending), ready: Condvar::new() })
    }
    /// A sharded array: `state` is the whole value if known (computed results), else
    /// `Pending` and gathered from the shards on first `wait`.
    pub(crate) fn sharded(aval: ShapedArray, placement: Placement, sh: crate::sharding::Sharded, whole: Option<Arc<Buffer>>) -> Arc<DeviceArray> {
        let state = match whole {
            Some(b) => State::Ready(b),
            None => State::Pending,
        };
        // A `device_put` result's data are its shards (counted on their devices); a
        // computed sharded result holds its whole value on its first device.
        let state = if sh.gather_on_wait { state } else {
            super::memory_kind::add(placement.device, sh.sharding.memory_kind, aval.nbytes());
            state
        };
        let memory_kind = sh.sharding.memory_kind;
        Arc::new(DeviceArray { aval, placement, memory_kind, sharded: Some(Box::new(sh)), state: Mutex::new(state), ready: Condvar::new() })
    }
    /// The sharding of a sharded array.
    pub(crate) fn sharded_info(&self) -> Option<&crate::sharding::Sharded> {
        self.sharded.as_deref()
    }
    /// Fills a pending array (called by the worker).
    pub fn fulfil(&self, result: Result<Arc<Buffer>>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *s = match result {
            Ok(b) => State::Ready(b),
            Err(e) => State::Failed(e),
        };
        self.ready.notify_all();
    }
    /// Marks the array deleted (after donation).
    pub fn delete(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(*s, State::Deleted) && self.counted() {
            super::memory_kind::sub(self.placement.device, self.memory_kind, self.aval.nbytes());
        }
        *s = State::Deleted;
    }
    /// Whether this array's bytes count in its device's `device_bytes`.
    fn counted(&self) -> bool {
        !self.sharded.as_deref().is_some_and(|sh| sh.gather_on_wait)
    }
    /// The buffer if the value is ready now; `None` while pending, failed or deleted
    /// (never waits).
    pub fn try_buffer(&self) -> Option<Arc<Buffer>> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            State::Ready(b) => Some(b.clone()),
            _ => None,
        }
    }
    pub fn is_ready(&self) -> bool {
        if let Some(sh) = self.sharded.as_deref().filter(|sh| sh.gather_on_wait) {
            return sh.shards_ready();
        }
        !matches!(*self.state.lock().unwrap_or_else(|e| e.into_inner()), State::Pending)
    }
    pub fn is_deleted(&self) -> bool {
        matches!(*self.state.lock().unwrap_or_else(|e| e.into_inner()), State::Deleted)
    }

    /// Waits for the value. Errors: the producing computation's error, `RuntimeError`
    /// for a deleted array, `KeyboardInterrupt` if the user interrupts the wait.
    pub fn wait(&self) -> Result<Arc<Buffer>> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &*s {
                State::Ready(b) => return Ok(b.clone()),
                State::Failed(e) => return Err(e.clone()),
                State::Deleted => {
                    return Err(Error::runtime(format!("Array has been deleted with shape={}.", self.aval.long_strong())))
                }
                State::Pending => {
                    if let Some(sh) = self.sharded.as_deref().filter(|sh| sh.gather_on_wait) {
                        drop(s);
                        let r = sh.gather(&self.aval);
                        if matches!(&r, Err(e) if e.kind == crate::error::ErrorKind::Interrupted) {
                            return r; // the shards are still coming; a later wait gathers
                        }
                        let mut s2 = self.state.lock().unwrap_or_else(|e| e.into_inner());
                        if matches!(*s2, State::Pending) {
                            *s2 = match &r {
                                Ok(b) => State::Ready(b.clone()),
                                Err(e) => State::Failed(e.clone()),
                            };
                        }
                        return r;
                    }
                    if !on_worker() && interrupt::take_if_set() {
                        return Err(Error::interrupted_wait());
                    }
                    if !on_worker() {
                        // A result due within µs is caught without sleeping (see `SPIN`).
                        drop(s);
                        spin_for(wait_spin(), || !matches!(*self.state.lock().unwrap_or_else(|e| e.into_inner()), State::Pending));
                        s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                        if !matches!(*s, State::Pending) {
                            continue;
                        }
                    }
                    let (g, _) = self
                        .ready
                        .wait_timeout(s, Duration::from_millis(10))
                        .unwrap_or_else(|e| e.into_inner());
                    s = g;
                }
            }
        }
    }
}

impl Drop for DeviceArray {
    fn drop(&mut self) {
        let deleted = matches!(self.state.get_mut().unwrap_or_else(|e| e.into_inner()), State::Deleted);
        if !deleted && self.counted() {
            super::memory_kind::sub(self.placement.device, self.memory_kind, self.aval.nbytes());
        }
    }
}

/// Per-device accounting of array bytes: bytes of the live arrays on each device (two
/// relaxed atomic operations per array lifetime; no locks). `runtime::memory` keeps the
/// process-wide allocator statistics; `sharding::Device::memory_stats` combines both.
pub mod device_bytes {
    use std::sync::atomic::{AtomicUsize, Ordering};

    const SLOTS: usize = 256;
    static IN_USE: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
    static PEAK: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

    fn slot(device: u32) -> usize {
        (device as usize).min(SLOTS - 1)
    }
    pub(crate) fn add(device: u32, bytes: usize) {
        let k = slot(device);
        let now = IN_USE[k].fetch_add(bytes, Ordering::Relaxed) + bytes;
        if now > PEAK[k].load(Ordering::Relaxed) {
            PEAK[k].fetch_max(now, Ordering::Relaxed);
        }
    }
    pub(crate) fn sub(device: u32, bytes: usize) {
        IN_USE[slot(device)].fetch_sub(bytes, Ordering::Relaxed);
    }
    /// `(bytes_in_use, peak_bytes_in_use)` of device `device`.
    pub fn stats(device: u32) -> (usize, usize) {
        let k = slot(device);
        (IN_USE[k].load(Ordering::Relaxed), PEAK[k].load(Ordering::Relaxed))
    }
}

impl ShapedArray {
    /// `float32[2,3]` without the weak marker (as in JAX's deleted-array message).
    pub fn long_strong(&self) -> String {
        self.strong().long()
    }
}

type Job = Box<dyn FnOnce() + Send>;

struct Worker {
    tx: Mutex<Sender<Job>>,
}

/// The worker of device `device` (started on first use; one thread per device, named
/// `jax-cpu<k>`). Devices past `device_count()` fall back to device 0's worker.
fn workers() -> &'static [OnceLock<Worker>] {
    static WS: OnceLock<Vec<OnceLock<Worker>>> = OnceLock::new();
    WS.get_or_init(|| (0..crate::sharding::device_count()).map(|_| OnceLock::new()).collect())
}

thread_local! {
    /// Whether this thread is a device worker (`jax-cpu<k>`).
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is a device worker. A user's interrupt is for the cell's
/// thread: a worker never takes it (its waits and collectives go on), so a running
/// computation is never cut part-way, and devices of one partitioned program stay in step.
pub fn on_worker() -> bool {
    ON_WORKER.with(|w| w.get())
}

/// Device workers running a job at this moment.
static BUSY: AtomicUsize = AtomicUsize::new(0);

/// How many device workers are running a job at this moment (a partitioned program runs
/// one job per device at once). Compiled code on a worker shares the cores with the
/// others by it (`compile::gemm`'s threading plan).
pub fn busy_workers() -> usize {
    BUSY.load(Ordering::Relaxed)
}

fn worker(device: u32) -> &'static Worker {
    let ws = workers();
    let k = if (device as usize) < ws.len() { device as usize } else { 0 };
    ws[k].get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name(format!("jax-cpu{k}"))
            .spawn(move || {
                ON_WORKER.with(|w| w.set(true));
                while let Some(job) = next_job(&rx) {
                    // A panic in a job must not kill the worker; the job's outputs are
                    // failed by the guard in `submit`.
                    BUSY.fetch_add(1, Ordering::Relaxed);
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    BUSY.fetch_sub(1, Ordering::Relaxed);
                }
            })
            .expect("spawn device worker");
        Worker { tx: Mutex::new(tx) }
    })
}

/// How long a thread spins for an event it expects soon before it sleeps (a device
/// worker for its next job when no other worker is running, a caller waiting for a
/// result): waking a sleeping thread took tens of µs on this machine kind (a KVM guest),
/// more than a short jitted loop runs (`while_loop` of 10k scalar steps: about 11 µs).
const SPIN: Duration = Duration::from_micros(50);

/// The longest a caller spins for a result whose computation is expected to be short.
const SPIN_MAX: Duration = Duration::from_millis(2);

thread_local! {
    /// The latest run time of the computation this thread last dispatched, in ns (0:
    /// unknown); see [`expect_run`].
    static EXPECTED_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// What [`expect_run`] noted for the next dispatch from this thread (taken by it).
    static NEXT_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Notes, before dispatching a computation, how long its latest run took (`None`:
/// unknown), so that a wait for its result spins long enough to catch it: when a caller
/// sleeps, the worker's result reaches it only after a wake-up (tens of µs on this
/// machine kind, a KVM guest, when other processes keep the cores busy), and the worker,
/// finding no next job by then, sleeps too. Measured with a CI run beside it, a job of
/// 10 µs took 112 µs from submit to result without the hint and 83 µs with it; on a
/// quiet machine both take 12 µs.
pub fn expect_run(latest: Option<Duration>) {
    NEXT_NS.with(|e| e.set(latest.map_or(0, |d| (d.as_nanos() as u64).max(1))));
}

/// How long a wait spins before it sleeps: twice the expected run time plus 100 µs (at
/// least [`SPIN`], at most [`SPIN_MAX`]) when the computation last dispatched from this
/// thread is known to be short, else [`SPIN`].
fn wait_spin() -> Duration {
    match EXPECTED_NS.with(|e| e.get()) {
        0 => SPIN,
        ns if ns < SPIN_MAX.as_nanos() as u64 => (Duration::from_nanos(ns * 2) + Duration::from_micros(100)).clamp(SPIN, SPIN_MAX),
        _ => SPIN,
    }
}

/// Spins up to [`SPIN`] until `done()` holds; whether it did.
fn spin_until(done: impl FnMut() -> bool) -> bool {
    spin_for(SPIN, done)
}

/// Spins up to `limit` until `done()` holds; whether it did. Past [`SPIN`] each round
/// yields the core (`sched_yield`), so a spinning caller does not keep a worker from
/// running when threads outnumber cores.
fn spin_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    loop {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
        if done() {
            return true;
        }
        let t = start.elapsed();
        if t >= limit {
            return false;
        }
        if t >= SPIN {
            std::thread::yield_now();
        }
    }
}

/// The worker's next job: at once if queued; else, when no other worker is running (one
/// spinning thread at most besides compute, so 8 simulated devices on 2 cores do not
/// spin against each other's work), after a short spin; else after sleeping. `None` once
/// the channel is closed.
fn next_job(rx: &std::sync::mpsc::Receiver<Job>) -> Option<Job> {
    use std::sync::mpsc::TryRecvError;
    match rx.try_recv() {
        Ok(j) => return Some(j),
        Err(TryRecvError::Disconnected) => return None,
        Err(TryRecvError::Empty) => {}
    }
    if BUSY.load(Ordering::Relaxed) == 0 {
        let mut got = None;
        let mut closed = false;
        spin_until(|| match rx.try_recv() {
            Ok(j) => {
                got = Some(j);
                true
            }
            Err(TryRecvError::Disconnected) => {
                closed = true;
                true
            }
            Err(TryRecvError::Empty) => false,
        });
        if got.is_some() || closed {
            return got;
        }
    }
    rx.recv().ok()
}

/// Serializes the submission of groups of jobs on several devices whose jobs block on
/// work of other devices (a partitioned program's per-device parts meet at collectives;
/// `device_put`'s per-device slices each wait for the whole source). Holding it while a
/// group is sent makes the group one step in a single global order of submissions that
/// every device's queue follows; a job only waits for work sent before it, so the
/// earliest unfinished group always has every part at the front of its queue and no
/// two groups can wait on each other (found as a hang of two tests: a `device_put` from
/// one thread slipped between the devices of another thread's partitioned call).
pub(crate) fn submission_order() -> std::sync::MutexGuard<'static, ()> {
    static ORDER: Mutex<()> = Mutex::new(());
    ORDER.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on device 0's worker after all earlier work; its result fills `outs`
/// (one buffer per output, in order). Returns at once.
pub fn submit(outs: Vec<Arc<DeviceArray>>, f: impl FnOnce() -> Result<Vec<Buffer>> + Send + 'static) {
    submit_on(0, outs, f)
}

/// `submit` on device `device`'s worker: work on different devices runs concurrently;
/// work on one device runs in submission order.
pub fn submit_on(device: u32, outs: Vec<Arc<DeviceArray>>, f: impl FnOnce() -> Result<Vec<Buffer>> + Send + 'static) {
    submit_on_shared(device, outs, move || f().map(|v| v.into_iter().map(Arc::new).collect()))
}

/// As [`submit_on`], for a job whose results may be buffers shared with other arrays
/// (a partitioned program's `psum` result is one buffer every device of the group
/// reads): no copy.
pub(crate) fn submit_on_shared(device: u32, outs: Vec<Arc<DeviceArray>>, f: impl FnOnce() -> Result<Vec<Arc<Buffer>>> + Send + 'static) {
    EXPECTED_NS.with(|e| e.set(NEXT_NS.with(|n| n.replace(0))));
    let outs2 = outs.clone();
    let job: Job = Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err(Error::runtime("internal error: a device computation panicked")));
        match r {
            Ok(bufs) if bufs.len() == outs2.len() => {
                for (o, b) in outs2.iter().zip(bufs) {
                    o.fulfil(Ok(b));
                }
            }
            Ok(bufs) => {
                let e = Error::runtime(format!("computation returned {} outputs, expected {}", bufs.len(), outs2.len()));
                outs2.iter().for_each(|o| o.fulfil(Err(e.clone())));
            }
            Err(e) => outs2.iter().for_each(|o| o.fulfil(Err(e.clone()))),
        }
    });
    let sent = worker(device).tx.lock().unwrap_or_else(|e| e.into_inner()).send(job);
    if sent.is_err() {
        let e = Error::runtime("the device worker has stopped");
        outs.iter().for_each(|o| o.fulfil(Err(e.clone())));
    }
}

/// Waits until all work dispatched so far has run on every started device worker (JAX's
/// `effects_barrier`). Each worker runs a marker job that signals a channel; the marker is
/// no array, so the barrier itself never shows in any device's memory accounting.
/// Errors: `KeyboardInterrupt` if the user interrupts the wait (the markers still run).
pub fn barrier() -> Result<()> {
    let started: Vec<u32> = (0..workers().len()).filter(|&k| k == 0 || workers()[k].get().is_some()).map(|k| k as u32).collect();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let mut pending = 0usize;
    for k in started {
        let tx = tx.clone();
        let job: Job = Box::new(move || {
            let _ = tx.send(());
        });
        if worker(k).tx.lock().unwrap_or_else(|e| e.into_inner()).send(job).is_ok() {
            pending += 1; // a stopped worker has nothing left to wait for
        }
    }
    drop(tx);
    while pending > 0 {
        match rx.recv_timeout(Duration::from_millis(10)) {
            Ok(()) => pending -= 1,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if interrupt::take_if_set() {
                    return Err(Error::interrupted_wait());
                }
            }
        }
    }
    Ok(())
}
