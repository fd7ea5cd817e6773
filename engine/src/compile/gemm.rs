//! The GEMM runtime symbols compiled code calls for large f32/f64 `dot_general`s:
//! `jaxrepl_gemm_f32` and `jaxrepl_gemm_f64`, both
//! `(lhs: memref<*xT>, rhs: memref<*xT>, out: memref<*xT>, b, m, n, k,
//!   lhs_bs, lhs_rs, lhs_cs, rhs_bs, rhs_rs, rhs_cs: i64)`.
//! An unranked memref reaches us as (rank: i64, desc: *const i64), the ranked descriptor
//! being `[allocated, aligned, offset, sizes[rank], strides[rank]]`.
//!
//! The lowering (`lower::structured`, `Lowerer::dot`) views the lhs as `[b, m, k]` and the
//! rhs as `[b, k, n]` with element strides (batch, row, column) it computes at compile time
//! from the operands' static row-major shapes; the output is a fresh row-major `[b, m, n]`
//! buffer (`memref.alloc`, written here in full). The products run on the `matrixmultiply`
//! crate (BLIS-style packed micro-kernels; it detects AVX-512/AVX2/FMA at run time and,
//! with its `threading` feature, splits one large product over the physical cores, or
//! `MATMUL_NUM_THREADS` threads). Batches of products too small for it to thread are split
//! over threads here instead.
//!
//! Invariants: the operand descriptors are contiguous row-major (the lowering asks for
//! identity-layout memrefs; a descriptor that is not is reported as an execution `Error`
//! through [`super::callbacks`] and the output left zero); nothing unwinds into compiled
//! code.

use std::ffi::c_void;

/// Below this many multiply-adds per product matrixmultiply keeps to one thread
/// (its heuristic: `(m·k + k·n) / 2^14` threads); batches of such products are split
/// over threads here when the whole batch has at least [`BATCH_SPLIT_MIN`] multiply-adds.
const BATCH_SPLIT_MIN: usize = 1 << 20;

/// The element types we multiply.
trait Elem: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    /// `matrixmultiply::{s,d}gemm` with β = 0 (C need not be initialised).
    ///
    /// # Safety
    /// As `matrixmultiply::sgemm`: the pointers and strides describe valid matrices.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(m: usize, k: usize, n: usize, a: *const Self, rsa: isize, csa: isize, b: *const Self, rsb: isize, csb: isize, c: *mut Self, rsc: isize, csc: isize);
}

impl Elem for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    unsafe fn gemm(m: usize, k: usize, n: usize, a: *const f32, rsa: isize, csa: isize, b: *const f32, rsb: isize, csb: isize, c: *mut f32, rsc: isize, csc: isize) {
        // SAFETY: forwarded caller contract.
        unsafe { matrixmultiply::sgemm(m, k, n, Self::ONE, a, rsa, csa, b, rsb, csb, Self::ZERO, c, rsc, csc) }
    }
}

impl Elem for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    unsafe fn gemm(m: usize, k: usize, n: usize, a: *const f64, rsa: isize, csa: isize, b: *const f64, rsb: isize, csb: isize, c: *mut f64, rsc: isize, csc: isize) {
        // SAFETY: forwarded caller contract.
        unsafe { matrixmultiply::dgemm(m, k, n, Self::ONE, a, rsa, csa, b, rsb, csb, Self::ZERO, c, rsc, csc) }
    }
}

/// A raw pointer that may cross to the batch worker threads (each writes its own batches).
#[derive(Clone, Copy)]
struct Ptr<T>(*mut T);
// SAFETY: workers touch disjoint output batches and only read the inputs.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}

impl<T> Ptr<T> {
    /// The pointer (a method, so closures capture the `Send` wrapper, not its field).
    fn get(self) -> *mut T {
        self.0
    }
}

/// The element pointer (aligned + offset) and element count of a contiguous row-major
/// memref descriptor, or a message saying why it is not one.
///
/// # Safety
/// `desc` points to a ranked descriptor of `rank` dims.
unsafe fn contiguous<T>(rank: i64, desc: *const i64) -> Result<(*mut T, usize), String> {
    let r = rank.max(0) as usize;
    // SAFETY: a descriptor has 3 + 2·rank words (caller's contract).
    let w = unsafe { std::slice::from_raw_parts(desc, 3 + 2 * r) };
    let (sizes, strides) = (&w[3..3 + r], &w[3 + r..3 + 2 * r]);
    let mut expect = 1i64;
    for d in (0..r).rev() {
        if sizes[d] != 1 && strides[d] != expect {
            return Err(format!("GEMM operand is not contiguous row-major (sizes {sizes:?}, strides {strides:?})"));
        }
        expect *= sizes[d].max(0);
    }
    // SAFETY: offset is within the allocation (MLIR's invariant).
    Ok((unsafe { (w[1] as *mut T).offset(w[2] as isize) }, expect as usize))
}

/// `out[p] = lhs[p] · rhs[p]` for every batch `p`, as described in the module docs.
fn run<T: Elem>(descs: [(i64, *const i64); 3], dims: [i64; 4], strides: [i64; 6]) {
    let result = std::panic::catch_unwind(|| {
        // SAFETY: compiled code passes live descriptors of its three memrefs.
        let (a, _) = unsafe { contiguous::<T>(descs[0].0, descs[0].1) }?;
        // SAFETY: as above.
        let (b, _) = unsafe { contiguous::<T>(descs[1].0, descs[1].1) }?;
        // SAFETY: as above.
        let (c, len) = unsafe { contiguous::<T>(descs[2].0, descs[2].1) }?;
        let [nb, m, n, k] = dims.map(|x| x.max(0) as usize);
        if nb * m * n != len {
            return Err(format!("GEMM output holds {len} elements, not {nb}·{m}·{n}"));
        }
        if len == 0 {
            return Ok(());
        }
        if k == 0 {
            // SAFETY: `c` holds `len` elements.
            unsafe { std::slice::from_raw_parts_mut(c, len) }.fill(T::ZERO);
            return Ok(());
        }
        let [abs, ars, acs, bbs, brs, bcs] = strides.map(|x| x as isize);
        let (a, b, c) = (Ptr(a), Ptr(b), Ptr(c));
        let one = move |p: usize| {
            // SAFETY: the lowering computed these strides from the operands' shapes, so
            // every index stays inside them; batch `p` of the output is written only here.
            unsafe {
                T::gemm(
                    m,
                    k,
                    n,
                    a.get().offset(p as isize * abs),
                    ars,
                    acs,
                    b.get().offset(p as isize * bbs),
                    brs,
                    bcs,
                    c.get().add(p * m * n),
                    n as isize,
                    1,
                )
            }
        };
        let threads = batch_threads(nb, m, n, k);
        if threads <= 1 {
            (0..nb).for_each(one);
        } else {
            let chunk = nb.div_ceil(threads);
            std::thread::scope(|s| {
                for t in 1..threads {
                    let one = &one;
                    s.spawn(move || (t * chunk..((t + 1) * chunk).min(nb)).for_each(one));
                }
                (0..chunk.min(nb)).for_each(&one);
            });
        }
        Ok(())
    });
    match result {
        Ok(Ok(())) => {}
        Ok(Err(msg)) => super::callbacks::fail(msg),
        Err(_) => super::callbacks::fail("the GEMM runtime panicked".into()),
    }
}

/// How many threads to split a batch of `nb` products of `m×k·k×n` over: one when
/// matrixmultiply threads each product itself or the batch is small, else up to the
/// available parallelism.
fn batch_threads(nb: usize, m: usize, n: usize, k: usize) -> usize {
    if nb < 2 || m * k + k * n >= 2 << 14 || nb * m * n * k < BATCH_SPLIT_MIN {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    cores.min(nb)
}

macro_rules! gemm_symbol {
    ($f:ident, $t:ty) => {
        #[allow(clippy::too_many_arguments)]
        extern "C" fn $f(
            lr: i64, ld: *const i64, rr: i64, rd: *const i64, or: i64, od: *const i64,
            b: i64, m: i64, n: i64, k: i64,
            lbs: i64, lrs: i64, lcs: i64, rbs: i64, rrs: i64, rcs: i64,
        ) {
            run::<$t>([(lr, ld), (rr, rd), (or, od)], [b, m, n, k], [lbs, lrs, lcs, rbs, rrs, rcs])
        }
    };
}

gemm_symbol!(gemm_f32, f32);
gemm_symbol!(gemm_f64, f64);

/// The symbols to register with every ExecutionEngine.
pub(crate) fn symbols() -> Vec<(String, *mut c_void)> {
    vec![
        ("jaxrepl_gemm_f32".into(), gemm_f32 as *const () as *mut c_void),
        ("jaxrepl_gemm_f64".into(), gemm_f64 as *const () as *mut c_void),
    ]
}
