//! The runtime symbols compiled code calls for `debug_callback`:
//! `jaxrepl_callback_arg_<dtype>(id: i64, index: i64, rank: i64, desc: *const i64)` (an
//! unranked memref as lowered by MLIR: rank plus a pointer to the ranked descriptor
//! `[alloc, aligned, offset, sizes.., strides..]`) copies one operand into a fresh
//! `Buffer`; `jaxrepl_callback_fire(id, nargs)` hands the collected operands to
//! `crate::runtime::callbacks::fire`. Callbacks with results (`pure_callback`,
//! `io_callback`) leave them with `set_results`; compiled code then copies result `index`
//! into a memref it allocated with `jaxrepl_callback_result_<dtype>(id, index, rank, desc)`.
//!
//! Invariants: operands are collected per thread (compiled code runs on the calling
//! thread, so concurrent executions never mix their operands); nothing unwinds into
//! compiled code (panics are caught and surface as an `Error` from `execute`).

use crate::error::Error;
use crate::ir::{CallbackId, DType, ShapedArray};
use crate::runtime::Buffer;
use std::cell::RefCell;
use std::ffi::c_void;

/// Callbacks recorded by the test hook: (id, operands).
#[cfg(test)]
pub(crate) type Captured = Vec<(CallbackId, Vec<Buffer>)>;

thread_local! {
    /// Operands collected for the callback about to fire: (id, index, value).
    static PENDING: RefCell<Vec<(i64, i64, Buffer)>> = const { RefCell::new(Vec::new()) };
    /// Results of the callback that fired last on this thread: (id, values).
    static RESULTS: RefCell<Option<(i64, Vec<Buffer>)>> = const { RefCell::new(None) };
    /// The first failure inside a callback during the current execution.
    static FAILURE: RefCell<Option<Error>> = const { RefCell::new(None) };
    /// Test hook: when set, fired callbacks are recorded here instead of run.
    #[cfg(test)]
    pub(crate) static CAPTURE: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// Records `msg` as the execution's failure (the first one wins); `execute` returns it.
pub(crate) fn fail(msg: String) {
    fail_with(Error::runtime(msg));
}

/// Records `e` (kind, message and the user's line it names) as the execution's failure
/// (the first one wins); `execute` returns it.
pub(crate) fn fail_with(e: Error) {
    FAILURE.with(|f| {
        let mut f = f.borrow_mut();
        if f.is_none() {
            *f = Some(e);
        }
    });
}

/// Records the results of callback `id` for the result symbols that follow its firing.
pub(crate) fn set_results(id: CallbackId, values: Vec<Buffer>) {
    RESULTS.with(|r| *r.borrow_mut() = Some((id as i64, values)));
}

/// Runs `f` (a host function that may itself run compiled code on this thread, whose
/// `begin`/`finish` reset the per-thread state) keeping this execution's failure.
pub(crate) fn preserving_failure<R>(f: impl FnOnce() -> R) -> R {
    let saved = FAILURE.with(|x| x.borrow_mut().take());
    let r = f();
    if let Some(e) = saved {
        FAILURE.with(|x| *x.borrow_mut() = Some(e));
    }
    r
}

/// Clears per-thread state before an execution.
pub(crate) fn begin() {
    PENDING.with(|p| p.borrow_mut().clear());
    FAILURE.with(|f| *f.borrow_mut() = None);
}

/// The failure raised by a callback during the execution that just ran, if any.
pub(crate) fn finish() -> Result<(), Error> {
    PENDING.with(|p| p.borrow_mut().clear());
    RESULTS.with(|r| *r.borrow_mut() = None);
    FAILURE.with(|f| f.borrow_mut().take()).map_or(Ok(()), Err)
}

/// A ranked memref descriptor `[allocated, aligned, offset, sizes[rank], strides[rank]]`
/// (MLIR's C ABI, in i64 words) decoded: the aligned base, offset and strides in
/// elements, sizes.
struct MemrefView<'a> {
    base: *mut u8,
    offset: isize,
    sizes: Vec<usize>,
    strides: &'a [i64],
}

impl MemrefView<'_> {
    /// # Safety
    /// `desc` must point to a ranked memref descriptor of `rank` dims.
    unsafe fn new<'a>(rank: i64, desc: *const i64) -> MemrefView<'a> {
        let r = rank.max(0) as usize;
        // SAFETY: the descriptor has 3 + 2*rank words (caller's contract).
        let words = unsafe { std::slice::from_raw_parts(desc, 3 + 2 * r) };
        MemrefView {
            base: words[1] as *mut u8,
            offset: words[2] as isize,
            sizes: words[3..3 + r].iter().map(|&s| s.max(0) as usize).collect(),
            strides: &words[3 + r..3 + 2 * r],
        }
    }

    /// Calls `f(k, element)` for each element in row-major order (`k` its row-major index,
    /// `element` a pointer to its `es` bytes), following the strides.
    ///
    /// # Safety
    /// The memref's data must be valid for the strided walk.
    unsafe fn for_each(&self, es: usize, mut f: impl FnMut(usize, *mut u8)) {
        let r = self.sizes.len();
        let n: usize = self.sizes.iter().product();
        let mut idx = vec![0usize; r];
        for k in 0..n {
            let mut lin = self.offset;
            for d in 0..r {
                lin += idx[d] as isize * self.strides[d] as isize;
            }
            // SAFETY: (offset + sum idx*stride) is inside the memref's data.
            f(k, unsafe { self.base.offset(lin * es as isize) });
            for d in (0..r).rev() {
                idx[d] += 1;
                if idx[d] < self.sizes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
}

/// Copies the memref described by (`rank`, `desc`) of element type `dtype` into a Buffer.
///
/// # Safety
/// `desc` must point to a ranked memref descriptor of `rank` dims whose data is valid.
unsafe fn read_memref(dtype: DType, rank: i64, desc: *const i64) -> Buffer {
    // SAFETY: caller's contract.
    let m = unsafe { MemrefView::new(rank, desc) };
    let mut buf = Buffer::zeros(&ShapedArray::new(&m.sizes, dtype));
    let es = dtype.size_bytes();
    let out = buf.bytes_mut();
    // SAFETY: caller's contract; each element has `es` readable bytes.
    unsafe { m.for_each(es, |k, src| out[k * es..(k + 1) * es].copy_from_slice(std::slice::from_raw_parts(src, es))) };
    if dtype == DType::Bool {
        for b in out.iter_mut() {
            *b &= 1;
        }
    }
    buf
}

/// Copies `src` into the memref (`rank`, `desc`) of element type `dtype`, through its
/// strides. A size or dtype mismatch copies nothing (the caller checked the values).
///
/// # Safety
/// `desc` must point to a ranked memref descriptor of `rank` dims whose data is writable.
unsafe fn write_memref(dtype: DType, rank: i64, desc: *const i64, src: &Buffer) {
    // SAFETY: caller's contract.
    let m = unsafe { MemrefView::new(rank, desc) };
    if src.shape() != m.sizes.as_slice() || src.aval().dtype != dtype {
        return;
    }
    let es = dtype.size_bytes();
    let bytes = src.bytes();
    // SAFETY: caller's contract; each element has `es` writable bytes.
    unsafe { m.for_each(es, |k, dst| std::slice::from_raw_parts_mut(dst, es).copy_from_slice(&bytes[k * es..(k + 1) * es])) };
}

fn result(dtype: DType, id: i64, index: i64, rank: i64, desc: *const i64) {
    let r = std::panic::catch_unwind(|| {
        RESULTS.with(|res| {
            let res = res.borrow();
            if let Some((rid, vals)) = res.as_ref() {
                if *rid == id {
                    if let Some(b) = vals.get(index.max(0) as usize) {
                        // SAFETY: compiled code passes a live, writable descriptor of this rank.
                        unsafe { write_memref(dtype, rank, desc, b) };
                    }
                }
            }
        })
    });
    if r.is_err() {
        fail(format!("writing result {index} of host callback {id} panicked"));
    }
}

fn collect(dtype: DType, id: i64, index: i64, rank: i64, desc: *const i64) {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: compiled code passes a live descriptor of this rank and dtype.
        let b = unsafe { read_memref(dtype, rank, desc) };
        PENDING.with(|p| p.borrow_mut().push((id, index, b)));
    });
    if r.is_err() {
        fail(format!("reading operand {index} of host callback {id} panicked"));
    }
}

extern "C" fn fire(id: i64, nargs: i64) {
    let mut args: Vec<(i64, Buffer)> = PENDING.with(|p| {
        let mut p = p.borrow_mut();
        let (mine, rest): (Vec<_>, Vec<_>) = p.drain(..).partition(|(i, _, _)| *i == id);
        *p = rest;
        mine.into_iter().map(|(_, k, b)| (k, b)).collect()
    });
    args.sort_by_key(|(k, _)| *k);
    if args.len() as i64 != nargs {
        fail(format!("host callback {id} got {} of {nargs} operands", args.len()));
        return;
    }
    let args: Vec<Buffer> = args.into_iter().map(|(_, b)| b).collect();
    let cid = id as CallbackId;
    #[cfg(test)]
    {
        let captured = CAPTURE.with(|c| c.borrow_mut().as_mut().map(|v| v.push((cid, args.clone()))).is_some());
        if captured {
            return;
        }
    }
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::runtime::callbacks::fire(cid, args))).is_err() {
        fail(format!("host callback {id} panicked"));
    }
}

macro_rules! arg_symbols {
    ($($f:ident => $d:expr),* $(,)?) => {
        $(extern "C" fn $f(id: i64, index: i64, rank: i64, desc: *const i64) { collect($d, id, index, rank, desc) })*
        mod results {
            use super::*;
            $(pub(super) extern "C" fn $f(id: i64, index: i64, rank: i64, desc: *const i64) { result($d, id, index, rank, desc) })*
        }
        /// Every runtime symbol, by the name compiled code calls, for `register_symbol`.
        pub(crate) fn symbols() -> Vec<(String, *mut c_void)> {
            let mut v: Vec<(String, *mut c_void)> = vec![
                $((format!("jaxrepl_callback_arg_{}", $d.short_name()), $f as *const () as *mut c_void),)*
            ];
            v.extend([
                $((format!("jaxrepl_callback_result_{}", $d.short_name()), results::$f as *const () as *mut c_void),)*
            ]);
            v.push(("jaxrepl_callback_fire".into(), fire as *const () as *mut c_void));
            v
        }
    };
}

arg_symbols! {
    arg_bool => DType::Bool, arg_i8 => DType::I8, arg_i16 => DType::I16, arg_i32 => DType::I32,
    arg_i64 => DType::I64, arg_u8 => DType::U8, arg_u32 => DType::U32, arg_bf16 => DType::BF16,
    arg_f16 => DType::F16, arg_f32 => DType::F32, arg_f64 => DType::F64,
}
