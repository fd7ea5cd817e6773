//! Asynchronous dispatch: device arrays are futures filled by a device worker thread.
//!
//! Invariant: work is executed in submission order on one worker per device, so every
//! input of a job was produced by an earlier job and is ready (or failed) when the job
//! runs. Waiting for a value polls the interrupt flag, so Ctrl-C stops a wait with
//! `Error::interrupted()` and leaves the array usable later.

use super::buffer::Buffer;
use super::interrupt;
use crate::error::{Error, Result};
use crate::ir::ShapedArray;
use std::sync::mpsc::{channel, Sender};
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

/// A value on the (simulated CPU) device: its type and a future of its buffer.
pub struct DeviceArray {
    pub aval: ShapedArray,
    state: Mutex<State>,
    ready: Condvar,
}

impl DeviceArray {
    /// A device array whose value is already known.
    pub fn ready(aval: ShapedArray, buf: Arc<Buffer>) -> Arc<DeviceArray> {
        Arc::new(DeviceArray { aval, state: Mutex::new(State::Ready(buf)), ready: Condvar::new() })
    }
    /// A device array to be filled by a dispatched job.
    pub fn pending(aval: ShapedArray) -> Arc<DeviceArray> {
        Arc::new(DeviceArray { aval, state: Mutex::new(State::Pending), ready: Condvar::new() })
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
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = State::Deleted;
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
                    if interrupt::take_if_set() {
                        return Err(Error::interrupted());
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

fn worker() -> &'static Worker {
    static W: OnceLock<Worker> = OnceLock::new();
    W.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("jax-cpu0".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    // A panic in a job must not kill the worker; the job's outputs are
                    // failed by the guard in `submit`.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .expect("spawn device worker");
        Worker { tx: Mutex::new(tx) }
    })
}

/// Runs `f` on the device worker after all earlier work; its result fills `outs`
/// (one buffer per output, in order). Returns at once.
pub fn submit(outs: Vec<Arc<DeviceArray>>, f: impl FnOnce() -> Result<Vec<Buffer>> + Send + 'static) {
    let outs2 = outs.clone();
    let job: Job = Box::new(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err(Error::runtime("internal error: a device computation panicked")));
        match r {
            Ok(bufs) if bufs.len() == outs2.len() => {
                for (o, b) in outs2.iter().zip(bufs) {
                    o.fulfil(Ok(Arc::new(b)));
                }
            }
            Ok(bufs) => {
                let e = Error::runtime(format!("computation returned {} outputs, expected {}", bufs.len(), outs2.len()));
                outs2.iter().for_each(|o| o.fulfil(Err(e.clone())));
            }
            Err(e) => outs2.iter().for_each(|o| o.fulfil(Err(e.clone()))),
        }
    });
    let sent = worker().tx.lock().unwrap_or_else(|e| e.into_inner()).send(job);
    if sent.is_err() {
        let e = Error::runtime("the device worker has stopped");
        outs.iter().for_each(|o| o.fulfil(Err(e.clone())));
    }
}

/// Waits until all work dispatched so far has run (JAX's `effects_barrier`).
pub fn barrier() -> Result<()> {
    let done = DeviceArray::pending(ShapedArray::scalar(crate::ir::DType::Bool));
    submit(vec![done.clone()], || Ok(vec![Buffer::zeros(&ShapedArray::scalar(crate::ir::DType::Bool))]));
    done.wait().map(|_| ())
}
