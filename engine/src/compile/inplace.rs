//! Loop carries updated in place (issue 4): a tensor carried by `scf.for`/`scf.while` whose
//! next value is computed by an elementwise `linalg.generic` is written into the carry's
//! own buffer instead of a fresh one per iteration.
//!
//! After `linalg-fuse-elementwise-ops`, such a body ends in a generic whose destination
//! (`outs`) is a `tensor.empty`: one-shot bufferization gives it a new buffer each
//! iteration (an allocation, and a free of the previous carry), measured at about a fifth
//! of the per-iteration time of a `fori_loop` over `f32[1024]`. [`loop_carries_in_place`]
//! makes the carry's region argument the destination instead. This only changes which
//! tensor the generic's result is *based on* (its body never reads that `out` argument),
//! so the values are the same; bufferization's own analysis then decides whether writing
//! in place is safe (it copies otherwise). It runs between the fusion and bufferization
//! steps of the serial pipeline (`context::run_to_loops`) and of the parallel one.
//!
//! A carry is rewritten only when the generic is all-parallel, has one result of the
//! carry's type, is in the loop body's block itself, and every other reader of the carry
//! comes before it in that block (so the in-place write never forces a copy).

use melior::ir::Module;
use mlir_sys::*;
use std::ffi::c_void;

fn sref(s: &str) -> MlirStringRef {
    MlirStringRef { data: s.as_ptr() as *const _, length: s.len() }
}

/// The name of `op` (`"linalg.generic"`).
///
/// # Safety
/// `op` must be a valid operation.
unsafe fn name(op: MlirOperation) -> &'static [u8] {
    // SAFETY: operation names are interned in the context, which outlives the walk.
    unsafe {
        let s = mlirIdentifierStr(mlirOperationGetName(op));
        std::slice::from_raw_parts(s.data as *const u8, s.length)
    }
}

fn attr_text(a: MlirAttribute) -> String {
    unsafe extern "C" fn print_to(s: MlirStringRef, data: *mut c_void) {
        // SAFETY: `data` is the `String` below; `s` is valid for the call.
        unsafe { (*(data as *mut String)).push_str(&String::from_utf8_lossy(std::slice::from_raw_parts(s.data as *const u8, s.length))) }
    }
    let mut text = String::new();
    if !a.ptr.is_null() {
        // SAFETY: `a` is a valid attribute; the callback appends to `text`.
        unsafe { mlirAttributePrint(a, Some(print_to), &mut text as *mut String as *mut c_void) };
    }
    text
}

/// Makes each tensor loop carry the destination of the elementwise `linalg.generic` that
/// computes its next value, where that is safe without a copy (module docs); returns how
/// many destinations were rewritten. Run on tensors, after elementwise fusion.
pub(crate) fn loop_carries_in_place(m: &Module) -> usize {
    unsafe extern "C" fn collect(op: MlirOperation, data: *mut c_void) -> MlirWalkResult {
        // SAFETY: `data` is the Vec passed below; `op` is valid during the callback.
        unsafe {
            if name(op) == b"scf.yield" {
                (*(data as *mut Vec<MlirOperation>)).push(op);
            }
        }
        MlirWalkResult_MlirWalkResultAdvance
    }
    let mut yields: Vec<MlirOperation> = vec![];
    // SAFETY: `m` is a valid module used under the context lock by the caller; the ops
    // collected stay valid since the rewrite below destroys only `tensor.empty` ops, never
    // a yield.
    unsafe {
        mlirOperationWalk(m.as_operation().to_raw(), Some(collect), &mut yields as *mut _ as *mut c_void, MlirWalkOrder_MlirWalkPostOrder);
        yields.into_iter().map(|y| rewrite_yield(y)).sum()
    }
}

/// Rewrites the destinations of the generics feeding yield `y` (see
/// [`loop_carries_in_place`]).
///
/// # Safety
/// `y` must be a valid `scf.yield` of a module under the context lock.
unsafe fn rewrite_yield(y: MlirOperation) -> usize {
    // SAFETY: every handle below comes from `y`'s module and is checked for null before
    // use; the only mutations are one operand set and the destruction of a use-free op.
    unsafe {
        let parent = mlirOperationGetParentOperation(y);
        if parent.ptr.is_null() {
            return 0;
        }
        let block = mlirOperationGetBlock(y);
        // The carry argument for yield operand i: `scf.for`'s body block has the induction
        // variable first; `scf.while`'s "after" block has the carries in yield order (our
        // lowering forwards every carry unchanged through `scf.condition`).
        let offset = match name(parent) {
            b"scf.for" => 1,
            b"scf.while" => {
                let after = mlirRegionGetFirstBlock(mlirOperationGetRegion(parent, 1));
                if after.ptr != block.ptr {
                    return 0;
                }
                0
            }
            _ => return 0,
        };
        let nargs = mlirBlockGetNumArguments(block);
        let mut done = 0;
        for i in 0..mlirOperationGetNumOperands(y) {
            if i + offset >= nargs {
                break;
            }
            let v = mlirOperationGetOperand(y, i);
            if !mlirValueIsAOpResult(v) {
                continue;
            }
            let g = mlirOpResultGetOwner(v);
            if name(g) != b"linalg.generic" || mlirOperationGetBlock(g).ptr != block.ptr || mlirOperationGetNumResults(g) != 1 {
                continue;
            }
            let carry = mlirBlockGetArgument(block, i + offset);
            if !mlirTypeEqual(mlirValueGetType(carry), mlirValueGetType(v)) {
                continue;
            }
            let segs = mlirOperationGetAttributeByName(g, sref("operandSegmentSizes"));
            if segs.ptr.is_null() || !mlirAttributeIsADenseI32Array(segs) || mlirDenseArrayGetNumElements(segs) != 2 {
                continue;
            }
            let (n_ins, n_outs) = (mlirDenseI32ArrayGetElement(segs, 0), mlirDenseI32ArrayGetElement(segs, 1));
            if n_outs != 1 || n_ins < 0 {
                continue;
            }
            let out = mlirOperationGetOperand(g, n_ins as isize);
            if !mlirValueIsAOpResult(out) {
                continue;
            }
            let empty = mlirOpResultGetOwner(out);
            if name(empty) != b"tensor.empty" {
                continue;
            }
            let its = attr_text(mlirOperationGetAttributeByName(g, sref("iterator_types")));
            if its.is_empty() || its.contains("reduction") || its.contains("window") {
                continue;
            }
            // The body must not read its `out` argument (it reads garbage from an empty
            // tensor today, and would read the carry after the rewrite).
            let body = mlirRegionGetFirstBlock(mlirOperationGetRegion(g, 0));
            if body.ptr.is_null() {
                continue;
            }
            let nb = mlirBlockGetNumArguments(body);
            if nb == 0 || !mlirOpOperandIsNull(mlirValueGetFirstUse(mlirBlockGetArgument(body, nb - 1))) {
                continue;
            }
            if !readers_before(carry, g, block) {
                continue;
            }
            mlirOperationSetOperand(g, n_ins as isize, carry);
            if mlirOpOperandIsNull(mlirValueGetFirstUse(out)) {
                mlirOperationDestroy(empty);
            }
            done += 1;
        }
        done
    }
}

/// Whether every use of `carry` is in `g` itself or in an op of `block` before `g` (or
/// nested in one).
///
/// # Safety
/// All handles must be valid and of one module.
unsafe fn readers_before(carry: MlirValue, g: MlirOperation, block: MlirBlock) -> bool {
    // SAFETY: walks use lists and parent chains of valid ops (caller's contract).
    unsafe {
        let mut u = mlirValueGetFirstUse(carry);
        while !mlirOpOperandIsNull(u) {
            let mut o = mlirOpOperandGetOwner(u);
            while !o.ptr.is_null() && mlirOperationGetBlock(o).ptr != block.ptr {
                o = mlirOperationGetParentOperation(o);
            }
            if o.ptr.is_null() {
                return false;
            }
            if !mlirOperationEqual(o, g) && !mlirOperationIsBeforeInBlock(o, g) {
                return false;
            }
            u = mlirOpOperandGetNextUse(u);
        }
        true
    }
}

/// Results computed straight into the caller's output buffers (issue 4), on memrefs after
/// bufferization: a result that bufferization left in a temporary (`memref.alloc`) and
/// copies into its `%out` parameter at the end of the entry — what happens to every
/// result of the GEMM runtime, whose output is an explicit allocation
/// (`lower::structured`, `dot_gemm`) — is written into the parameter instead: the
/// allocation, the copy and the temporary's `memref.dealloc` are removed and the
/// temporary's uses read and write the parameter. Saves a copy of every such result (and
/// a fresh allocation, page faults included, for large ones): 16 MiB per call for a
/// 2048² matmul.
///
/// Rewritten only when the copy's target is an argument of the entry block whose only use
/// is that copy (an output parameter, never an input: outputs are fresh buffers,
/// `Executable::execute_args`), its source is a `memref.alloc` (or, for a small result
/// promoted to the stack, `memref.alloca`) of the entry block of the same type, and every use of the temporary after the copy is a `memref.dealloc` in the
/// entry block (so the parameter ends with exactly the temporary's final contents).
/// Returns how many results were rewritten.
pub(crate) fn outputs_in_place(m: &Module) -> usize {
    // SAFETY: `m` is a valid module used under the context lock by the caller. Handles are
    // checked for null; ops are destroyed only after their last use is gone, and each
    // copy is re-read from the entry block after the previous rewrite.
    unsafe {
        let Some(block) = entry_block(m) else { return 0 };
        let mut copies = vec![];
        let mut op = mlirBlockGetFirstOperation(block);
        while !op.ptr.is_null() {
            if name(op) == b"memref.copy" {
                copies.push(op);
            }
            op = mlirOperationGetNextInBlock(op);
        }
        copies.into_iter().filter(|&c| rewrite_output_copy(c, block)).count()
    }
}

/// The entry block of `@jaxrepl_entry` in `m`, if there is one.
///
/// # Safety
/// `m` must be a valid module under the context lock.
unsafe fn entry_block(m: &Module) -> Option<MlirBlock> {
    // SAFETY: walks the top-level ops of a valid module.
    unsafe {
        let body = mlirModuleGetBody(m.to_raw());
        let mut op = mlirBlockGetFirstOperation(body);
        while !op.ptr.is_null() {
            if name(op) == b"func.func" && attr_text(mlirOperationGetAttributeByName(op, sref("sym_name"))) == format!("\"{}\"", super::ENTRY) {
                let b = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
                return (!b.ptr.is_null()).then_some(b);
            }
            op = mlirOperationGetNextInBlock(op);
        }
        None
    }
}

/// Rewrites one `memref.copy %tmp, %out` of `block` (see [`outputs_in_place`]); whether it
/// did.
///
/// # Safety
/// `copy` must be a valid `memref.copy` op of `block`, under the context lock.
unsafe fn rewrite_output_copy(copy: MlirOperation, block: MlirBlock) -> bool {
    // SAFETY: all handles come from `block`'s function (caller's contract).
    unsafe {
        if mlirOperationGetNumOperands(copy) != 2 {
            return false;
        }
        let (src, dst) = (mlirOperationGetOperand(copy, 0), mlirOperationGetOperand(copy, 1));
        if !mlirValueIsABlockArgument(dst) || mlirBlockArgumentGetOwner(dst).ptr != block.ptr || !mlirValueIsAOpResult(src) {
            return false;
        }
        let alloc = mlirOpResultGetOwner(src);
        let kind = name(alloc);
        if (kind != b"memref.alloc" && kind != b"memref.alloca") || mlirOperationGetBlock(alloc).ptr != block.ptr || !mlirTypeEqual(mlirValueGetType(src), mlirValueGetType(dst)) {
            return false;
        }
        // The output parameter: used by this copy only.
        let first = mlirValueGetFirstUse(dst);
        if mlirOpOperandIsNull(first) || !mlirOpOperandIsNull(mlirOpOperandGetNextUse(first)) {
            return false;
        }
        // The temporary: after the copy, only deallocated (in the entry block).
        let mut deallocs = vec![];
        let mut u = mlirValueGetFirstUse(src);
        while !mlirOpOperandIsNull(u) {
            let owner = mlirOpOperandGetOwner(u);
            let mut top = owner;
            while !top.ptr.is_null() && mlirOperationGetBlock(top).ptr != block.ptr {
                top = mlirOperationGetParentOperation(top);
            }
            if top.ptr.is_null() {
                return false;
            }
            let is_dealloc = name(owner) == b"memref.dealloc";
            if !mlirOperationEqual(top, copy) {
                let after = mlirOperationIsBeforeInBlock(copy, top);
                if after != is_dealloc || (is_dealloc && !mlirOperationEqual(owner, top)) {
                    return false;
                }
                if is_dealloc {
                    deallocs.push(owner);
                }
            }
            u = mlirOpOperandGetNextUse(u);
        }
        for d in deallocs {
            mlirOperationDestroy(d);
        }
        mlirOperationDestroy(copy);
        mlirValueReplaceAllUsesOfWith(src, dst);
        mlirOperationDestroy(alloc);
        true
    }
}
