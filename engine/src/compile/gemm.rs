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
//! buffer (`memref.alloc`, written here in full). The products run on the `gemm` crate
//! (faer's BLIS-style packed micro-kernels; it detects AVX-512/AVX2/FMA at run time). It
//! replaced `matrixmultiply` after measuring both on this machine (2 cores, AVX-512;
//! `tests/src/bin/gemm_probe.rs rawcmp`): per CPU-second it gave 1.2–1.4× at 256–2048,
//! 1.6× on `[16,512,512]` and 2.2× on `[256,64,64]` batches. On the AVX2 machine kind
//! (AMD EPYC Zen 3, 2 vCPUs, no AVX-512) it was measured again, single-threaded per block
//! as [`plan`] calls it, libraries interleaved, GFLOP per CPU-second, on a shared machine,
//! against Debian 12's BLIS 0.9 (it picks its `zen3` kernels at run time), faer 0.24's
//! `matmul` (the `private-gemm-x86` kernels) and matrixmultiply 0.3.11: at the shapes of
//! the `[16,512,512]` batch (512³ products) and of the 8-device row-sharded 2048 matmul
//! (256×2048×1024 panels) none was faster (f32: `gemm` 91 and 81, BLIS 87 and 80 with its
//! small-matrix path turned off, 44 with it, as it is by default below m = 512; faer 84
//! and 76; matrixmultiply 80 and 76). BLIS led only on 2048³ blocks (79–82 against
//! 64–67), a workload already ahead of JAX, so the crate stays. Threading is ours, not the
//! crate's ([`plan`]): the batch and each product's row or column panels are cut into
//! units, each a single-threaded `gemm` call, run on the calling thread and rayon's in
//! one fork/join — no synchronisation inside a product.
//!
//! `jaxrepl_gemm_acc_f32`/`_f64` take a fourth memref, `init` (the output's shape, or one
//! row of `n` repeated over the batch and rows: a bias), and a trailing scalar `beta` of the
//! element type: `out = init + beta·lhs·rhs`, the update
//! `w - lr·dot(..)` (or a residual `x + dot(..)`) that the lowering fuses into the product
//! (`lower::dot_updates`). Each unit first copies its panel of `init` into `out` (skipped
//! when both are the same buffer) and then lets `gemm` accumulate into it (`read_dst`,
//! α = 1), so the update costs no separate pass over memory and `init`'s panel is copied
//! while the unit's thread is about to read it anyway.
//!
//! Invariants: the operand descriptors are contiguous row-major (the lowering asks for
//! identity-layout memrefs; a descriptor that is not is reported as an execution `Error`
//! through [`super::callbacks`] and the output left zero); nothing unwinds into compiled
//! code.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Products (or batches) with fewer multiply-adds than this in all run on the calling
/// thread: below it a fork/join costs more than it saves.
const SPLIT_MIN: usize = 1 << 20;

/// Panels are at least this many rows or columns, and panel boundaries fall on multiples of
/// it (a multiple of the `gemm` crate's AVX-512/AVX2 f32 and f64 micro-tile sizes).
const PANEL_ALIGN: usize = 64;

/// The element types we multiply (`gemm::gemm` is generic over them).
trait Elem: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
}

impl Elem for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
}

impl Elem for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}

/// `c = a·b` (`beta` None) or `c += beta·a·b` for an `m×k` matrix `a` with element
/// strides (`rsa`, `csa`), a `k×n` matrix `b` likewise, into the `m×n` matrix `c` with row
/// stride `ldc` (column stride 1; read only with a `beta`), on `threads` threads (1: this
/// one, else `gemm`'s own rayon threading).
///
/// # Safety
/// The pointers and strides describe valid, non-overlapping matrices.
#[allow(clippy::too_many_arguments)]
unsafe fn product<T: Elem>(m: usize, k: usize, n: usize, a: *const T, rsa: isize, csa: isize, b: *const T, rsb: isize, csb: isize, c: *mut T, ldc: usize, threads: usize, beta: Option<T>) {
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    let (read, alpha, beta) = match beta {
        None => (false, T::ZERO, T::ONE),
        Some(b) => (true, T::ONE, b),
    };
    // SAFETY: forwarded caller contract. `gemm` computes dst = α·dst + β·lhs·rhs and does
    // not read dst when `read_dst` is false.
    unsafe { gemm::gemm(m, n, k, c, 1, ldc as isize, read, a, csa, rsa, b, csb, rsb, alpha, beta, false, false, false, par) }
}

/// Copies the `rows × cols` block at `src` (row stride `lds`; 0 repeats one row) to `dst`
/// (row stride `ldd`), nothing when they are the same block.
///
/// # Safety
/// Both blocks are valid and either identical or disjoint.
unsafe fn copy_block<T: Copy>(src: *const T, lds: usize, dst: *mut T, ldd: usize, rows: usize, cols: usize) {
    if std::ptr::eq(src, dst) && lds == ldd {
        return;
    }
    for r in 0..rows {
        // SAFETY: caller contract.
        unsafe { std::ptr::copy_nonoverlapping(src.add(r * lds), dst.add(r * ldd), cols) };
    }
}

/// A raw pointer that may cross to the worker threads (each writes its own panels).
#[derive(Clone, Copy)]
struct Ptr<T>(*mut T);
// SAFETY: workers touch disjoint output panels and only read the inputs.
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

/// How a batch of products is spread over threads (see [`plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    /// Each product is cut into this many panels (1: whole products).
    panels: usize,
    /// Panels cut the output's rows (true) or its columns (false).
    by_rows: bool,
    /// Worker threads, each running a contiguous range of the `batch × panels` units one
    /// after another on one thread (1: all on the calling thread).
    workers: usize,
    /// Threads `gemm` itself uses inside each product (more than 1 only when the plan
    /// leaves threading to it, `JAXREPL_GEMM_PANELS=0`).
    inner: usize,
}

/// How to run a batch of `nb` products of `m×k·k×n` on `cores` threads.
///
/// Below [`SPLIT_MIN`] multiply-adds in all, or on one core, everything runs on the
/// calling thread. Otherwise the work is cut into `nb × panels` units, each a
/// single-threaded `gemm` call, spread over `workers` threads in one fork/join: every
/// product is cut into `panels` row or column panels when there are fewer products than
/// cores (or a count that does not divide evenly among them, up to 4 per core), so that
/// every thread gets the same share. Panels cut the output's columns when `m ≤ n` (each
/// thread packs the whole `a` and its share of `b`, the larger operand) and its rows
/// otherwise, at least [`PANEL_ALIGN`] wide.
///
/// Measured on this machine (2 cores, AVX-512; `tests/src/bin/gemm_probe.rs shapes`): on
/// the MLP's `[128,512]·[512,512]` and `[128,512]·[512,512]ᵀ` products, two column
/// panels ran 1.5–2.3× faster than `gemm`'s own rayon threading, which often left the
/// second core idle (several fork/joins per product); on 1024² and 2048² both were within
/// the run-to-run noise. `legacy` (`JAXREPL_GEMM_PANELS=0`) keeps the previous plan for
/// comparison: batches of small products split over threads, single products threaded
/// by `gemm`.
fn plan(nb: usize, m: usize, n: usize, k: usize, cores: usize, legacy: bool) -> Plan {
    let serial = Plan { panels: 1, by_rows: false, workers: 1, inner: 1 };
    let each = m.saturating_mul(n).saturating_mul(k);
    if cores <= 1 || nb == 0 || nb.saturating_mul(each) < SPLIT_MIN {
        return serial;
    }
    if legacy {
        // `gemm`'s own threading starts at 48·48·256 multiply-adds per product.
        return if nb >= 2 && (each < 48 * 48 * 256 || nb >= 2 * cores) {
            Plan { panels: 1, by_rows: false, workers: cores.min(nb), inner: 1 }
        } else {
            Plan { inner: cores, ..serial }
        };
    }
    let by_rows = m > n;
    let extent = if by_rows { m } else { n };
    let max_panels = (extent / PANEL_ALIGN).max(1);
    // Panels per product so that nb·panels units divide evenly among the cores.
    let want = if nb >= 4 * cores { 1 } else { cores / gcd(nb, cores) };
    let panels = want.min(max_panels).max(1);
    let units = nb * panels;
    Plan { panels, by_rows, workers: cores.min(units), inner: 1 }
}

/// Greatest common divisor.
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The `[start, end)` range of panel `j` of `parts` over `extent` rows or columns:
/// boundaries at multiples of [`PANEL_ALIGN`] (the last panel takes the rest).
fn panel_range(j: usize, parts: usize, extent: usize) -> (usize, usize) {
    let blocks = extent.div_ceil(PANEL_ALIGN);
    let at = |i: usize| ((blocks * i / parts) * PANEL_ALIGN).min(extent);
    (at(j), at(j + 1))
}

/// Whether `JAXREPL_GEMM_PANELS=0` asks for the previous threading plan (read once; for
/// A/B measurements with `gemm_probe`).
fn legacy_plan() -> bool {
    static LEGACY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LEGACY.get_or_init(|| std::env::var("JAXREPL_GEMM_PANELS").is_ok_and(|v| v.trim() == "0"))
}

/// `out[p] = lhs[p] · rhs[p]` for every batch `p`, or with `acc` = (`init` descriptor,
/// `beta`) `out[p] = init[p] + beta·lhs[p]·rhs[p]`, as described in the module docs.
fn run<T: Elem>(descs: [(i64, *const i64); 3], dims: [i64; 4], strides: [i64; 6], acc: Option<((i64, *const i64), T)>) {
    // (Plain numbers and pointers are captured: nothing is left half-updated on a panic.)
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
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
        let init = match acc {
            Some((d, beta)) => {
                // SAFETY: as above.
                let (p, ilen) = unsafe { contiguous::<T>(d.0, d.1) }?;
                // The whole output's values, or one row of `n` (a bias) repeated.
                let rows = ilen != len;
                if rows && ilen != n {
                    return Err(format!("GEMM update's initial value holds {ilen} elements, not {len} or {n}"));
                }
                Some((Ptr(p), beta, rows))
            }
            None => None,
        };
        if len == 0 {
            return Ok(());
        }
        if k == 0 {
            match init {
                // SAFETY: `c` holds nb·m rows of `n`, `i` as many or one.
                Some((i, _, rows)) => unsafe { copy_block(i.get(), if rows { 0 } else { n }, c, n, nb * m, n) },
                // SAFETY: `c` holds `len` elements.
                None => unsafe { std::slice::from_raw_parts_mut(c, len) }.fill(T::ZERO),
            }
            return Ok(());
        }
        let [abs, ars, acs, bbs, brs, bcs] = strides.map(|x| x as isize);
        let (a, b, c) = (Ptr(a), Ptr(b), Ptr(c));
        let pl = plan(nb, m, n, k, cores_here(), legacy_plan());
        let extent = if pl.by_rows { m } else { n };
        // Unit `u`: panel `u % panels` of product `u / panels`.
        let unit = move |u: usize| {
            let (p, j) = (u / pl.panels, u % pl.panels);
            let (lo, hi) = panel_range(j, pl.panels, extent);
            if lo >= hi {
                return;
            }
            let (a0, b0, c0) = (p as isize * abs, p as isize * bbs, p * m * n);
            // This unit's block of the output: first row and column, rows, columns.
            let (row0, col0, rows, cols) = if pl.by_rows { (lo, 0, hi - lo, n) } else { (0, lo, m, hi - lo) };
            let at = c0 + row0 * n + col0;
            // SAFETY: the lowering computed these strides from the operands' shapes, so
            // every index stays inside them; each (batch, panel) of the output is written
            // only here, and `init` has the output's layout (the same buffer or another)
            // or is one row of it.
            unsafe {
                match init {
                    Some((i, _, false)) => copy_block(i.get().add(at), n, c.get().add(at), n, rows, cols),
                    Some((i, _, true)) => copy_block(i.get().add(col0), 0, c.get().add(at), n, rows, cols),
                    None => {}
                }
                let beta = init.map(|(_, b, _)| b);
                if pl.by_rows {
                    product(rows, k, n, a.get().offset(a0 + lo as isize * ars), ars, acs, b.get().offset(b0), brs, bcs, c.get().add(at), n, pl.inner, beta)
                } else {
                    product(m, k, cols, a.get().offset(a0), ars, acs, b.get().offset(b0 + lo as isize * bcs), brs, bcs, c.get().add(at), n, pl.inner, beta)
                }
            }
        };
        let units = nb * pl.panels;
        if pl.workers <= 1 {
            (0..units).for_each(unit);
        } else {
            claim_units(units, pl.workers, unit)?;
        }
        Ok(())
    }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(msg)) => super::callbacks::fail(msg),
        Err(_) => super::callbacks::fail("the GEMM runtime panicked".into()),
    }
}

/// The cores a product may use here: all of them on the cell's thread or on the one busy
/// device worker; on a device worker while others compute too (a partitioned program runs
/// one job per device at once), an even share of them, so that 8 simulated devices on 2
/// cores do not each fork helpers that wait for one another (measured on the 8-device
/// row-sharded 2048 matmul, AVX2 machine kind, interleaved A/B in one process: the same
/// GFLOP per CPU-second, wall time 1–15% better over five runs; the machine was noisy).
fn cores_here() -> usize {
    let cores = super::parallel::num_threads();
    if crate::runtime::dispatch::on_worker() {
        (cores / crate::runtime::dispatch::busy_workers().max(1)).max(1)
    } else {
        cores
    }
}

/// The progress of one call's units, shared with its helper jobs.
#[derive(Default)]
struct Claims {
    /// The next unit to claim (counts past `units` once all are claimed).
    next: AtomicUsize,
    /// Units finished.
    done: AtomicUsize,
    /// A unit panicked on a helper thread.
    failed: AtomicBool,
}

/// Runs `unit(0..units)` on the calling thread and `workers - 1` helper jobs on rayon's
/// pool, each claiming the next unit from a shared counter until none is left; returns
/// once every unit is finished. The caller never waits for a helper that has not started
/// (on a loaded machine a sleeping worker may take longer to wake than a unit takes): it
/// claims and runs whatever is left itself, and waits only for units a helper is running.
/// A helper that starts after the call returned finds nothing to claim and touches
/// nothing (its captures are plain pointers and sizes, dereferenced only inside a claimed
/// unit). Errors: a unit panicked on a helper thread.
fn claim_units(units: usize, workers: usize, unit: impl Fn(usize) + Copy + Send + Sync + 'static) -> Result<(), String> {
    let claims = Arc::new(Claims::default());
    let work = move |c: &Claims| loop {
        let u = c.next.fetch_add(1, Ordering::Relaxed);
        if u >= units {
            break;
        }
        unit(u);
        c.done.fetch_add(1, Ordering::Release);
    };
    for _ in 1..workers {
        let c = claims.clone();
        rayon::spawn(move || {
            // A panic must not unwind out of a rayon job (rayon would abort the process).
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&c))).is_err() {
                c.failed.store(true, Ordering::Relaxed);
                c.done.fetch_add(1, Ordering::Release);
            }
        });
    }
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&claims))).is_err() {
        claims.failed.store(true, Ordering::Relaxed);
        claims.done.fetch_add(1, Ordering::Release);
    }
    // No unit can be claimed from here on (after a panic some may be left unclaimed);
    // wait for those that were, so that no helper writes after we return.
    let claimed = claims.next.fetch_max(units, Ordering::AcqRel).min(units);
    let mut spins = 0u32;
    while claims.done.load(Ordering::Acquire) < claimed {
        spins += 1;
        if spins < 1 << 12 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    if claims.failed.load(Ordering::Relaxed) {
        return Err("the GEMM runtime panicked".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{claim_units, panel_range, plan, Plan};

    fn p(panels: usize, by_rows: bool, workers: usize) -> Plan {
        Plan { panels, by_rows, workers, inner: 1 }
    }

    #[test]
    fn thread_plan() {
        // One large product on two cores: two column panels (m <= n) or row panels.
        assert_eq!(plan(1, 1024, 1024, 1024, 2, false), p(2, false, 2));
        assert_eq!(plan(1, 128, 512, 512, 2, false), p(2, false, 2));
        assert_eq!(plan(1, 512, 128, 512, 2, false), p(2, true, 2));
        // Many products: whole products split over the threads.
        assert_eq!(plan(256, 64, 64, 64, 2, false), p(1, false, 2));
        assert_eq!(plan(16, 512, 512, 512, 2, false), p(1, false, 2));
        assert_eq!(plan(2, 1024, 1024, 1024, 2, false), p(1, false, 2));
        // An odd count of products: two panels each, so both threads get three halves.
        assert_eq!(plan(3, 256, 256, 256, 2, false), p(2, false, 2));
        // Small work in all, or one core: the calling thread.
        assert_eq!(plan(4, 16, 16, 16, 2, false), p(1, false, 1));
        assert_eq!(plan(256, 64, 64, 64, 1, false), p(1, false, 1));
        // Too narrow to cut: whole products.
        assert_eq!(plan(1, 40, 40, 4096, 2, false), p(1, false, 1));
        assert_eq!(plan(1, 100, 100, 1000, 2, false), p(1, false, 1));
        // More cores than products and panels.
        assert_eq!(plan(3, 80, 80, 200, 8, false), p(1, false, 3));
        // The previous plan (`JAXREPL_GEMM_PANELS=0`).
        assert_eq!(plan(1, 1024, 1024, 1024, 2, true), Plan { panels: 1, by_rows: false, workers: 1, inner: 2 });
        assert_eq!(plan(256, 64, 64, 64, 2, true), p(1, false, 2));
    }

    #[test]
    fn every_unit_runs_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static HITS: [AtomicUsize; 37] = [const { AtomicUsize::new(0) }; 37];
        for workers in [2, 3, 8] {
            claim_units(37, workers, |u| {
                HITS[u].fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        }
        assert!(HITS.iter().all(|h| h.load(Ordering::Relaxed) == 3));
    }

    #[test]
    fn panels_cover_the_extent() {
        for extent in [1, 63, 64, 65, 100, 128, 129, 512, 1000, 2048] {
            for parts in 1..6 {
                let mut next = 0;
                for j in 0..parts {
                    let (lo, hi) = panel_range(j, parts, extent);
                    assert_eq!(lo, next, "extent {extent} parts {parts}");
                    assert!(hi >= lo && (lo % 64 == 0 || lo == extent));
                    next = hi;
                }
                assert_eq!(next, extent);
            }
        }
    }
}

macro_rules! gemm_symbol {
    ($f:ident, $t:ty) => {
        #[allow(clippy::too_many_arguments)]
        extern "C" fn $f(
            lr: i64, ld: *const i64, rr: i64, rd: *const i64, or: i64, od: *const i64,
            b: i64, m: i64, n: i64, k: i64,
            lbs: i64, lrs: i64, lcs: i64, rbs: i64, rrs: i64, rcs: i64,
        ) {
            run::<$t>([(lr, ld), (rr, rd), (or, od)], [b, m, n, k], [lbs, lrs, lcs, rbs, rrs, rcs], None)
        }
    };
}

macro_rules! gemm_acc_symbol {
    ($f:ident, $t:ty) => {
        #[allow(clippy::too_many_arguments)]
        extern "C" fn $f(
            lr: i64, ld: *const i64, rr: i64, rd: *const i64, or: i64, od: *const i64, ir: i64, id: *const i64,
            b: i64, m: i64, n: i64, k: i64,
            lbs: i64, lrs: i64, lcs: i64, rbs: i64, rrs: i64, rcs: i64, beta: $t,
        ) {
            run::<$t>([(lr, ld), (rr, rd), (or, od)], [b, m, n, k], [lbs, lrs, lcs, rbs, rrs, rcs], Some(((ir, id), beta)))
        }
    };
}

gemm_symbol!(gemm_f32, f32);
gemm_symbol!(gemm_f64, f64);
gemm_acc_symbol!(gemm_acc_f32, f32);
gemm_acc_symbol!(gemm_acc_f64, f64);

/// The symbols to register with every ExecutionEngine.
pub(crate) fn symbols() -> Vec<(String, *mut c_void)> {
    vec![
        ("jaxrepl_gemm_f32".into(), gemm_f32 as *const () as *mut c_void),
        ("jaxrepl_gemm_f64".into(), gemm_f64 as *const () as *mut c_void),
        ("jaxrepl_gemm_acc_f32".into(), gemm_acc_f32 as *const () as *mut c_void),
        ("jaxrepl_gemm_acc_f64".into(), gemm_acc_f64 as *const () as *mut c_void),
    ]
}
