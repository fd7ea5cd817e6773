//! Compile-stage tests: real compilation and execution of small modules, timings,
//! error paths, callbacks, analyses.

use super::*;
use crate::ir::DType;
use crate::lower::tests::{sin_x2_plus_1, two_x_plus_y};
use crate::lower::{lower_jaxpr, LowerOptions};

pub(crate) fn buf<T: Copy>(shape: &[usize], d: DType, data: &[T]) -> Buffer {
    Buffer::from_slice(&ShapedArray::new(shape, d), data).unwrap()
}

pub(crate) fn compile_jaxpr(j: &crate::ir::ClosedJaxpr) -> Executable {
    let m = lower_jaxpr(j, "t", &LowerOptions::default()).unwrap();
    compile(&m, &CompileOptions::default()).unwrap_or_else(|e| panic!("{e}\n--- module ---\n{}", m.text))
}

#[test]
fn runs_two_x_plus_y() {
    let exe = compile_jaxpr(&two_x_plus_y());
    let out = exe.execute(&[&buf(&[], DType::I32, &[3i32]), &buf(&[], DType::I32, &[4i32])]).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].as_slice::<i32>().unwrap(), &[10]);
}

#[test]
fn runs_sin_and_reports_times() {
    let n = 1024;
    let exe = compile_jaxpr(&sin_x2_plus_1(n));
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.01).collect();
    let out = exe.execute(&[&buf(&[n], DType::F32, &x)]).unwrap();
    let got = out[0].as_slice::<f32>().unwrap();
    for (i, &g) in got.iter().enumerate() {
        let want = (x[i] as f64).sin() * 2.0 + 1.0;
        assert!((g as f64 - want).abs() < 1e-5, "{i}: {g} vs {want}");
    }
    let t = exe.times();
    eprintln!(
        "sin(x)*2+1 f32[1024]: parse {:.2} ms, passes {:.2} ms, engine {:.2} ms, codegen {:.2} ms, total {:.2} ms",
        t.parse * 1e3,
        t.passes * 1e3,
        t.engine * 1e3,
        t.codegen * 1e3,
        t.total() * 1e3
    );
    assert!(t.total() > 0.0);
    assert!(exe.optimized_ir().contains("scf.for"), "{}", exe.optimized_ir());
    assert!(!exe.optimized_ir().contains("linalg."), "{}", exe.optimized_ir());
    let ll = exe.llvm_ir().unwrap();
    assert!(ll.contains("define void @_mlir_ciface_jaxrepl_entry"), "{ll}");
}

use crate::ir::{Atom, ClosedJaxpr, Jaxpr, Primitive, Var};
use crate::lower::tests::{lit, Builder};

fn f32s(b: &Buffer) -> Vec<f32> {
    b.as_slice::<f32>().unwrap().to_vec()
}

#[test]
fn debug_callback_fires_with_values() {
    let mut b = Builder::new();
    let x = b.arg(&[3], DType::F32);
    let y = b.arg(&[], DType::I32);
    let x2 = b.op(Primitive::Mul, &[x.clone(), lit(2.0, DType::F32)], &[3], DType::F32);
    let flag = b.op(Primitive::Gt, &[x.clone(), lit(0.0, DType::F32)], &[3], DType::Bool);
    b.effect(Primitive::DebugCallback { callback: 41, fmt: "{} {} {}".into() }, &[x2.clone(), y, flag]);
    b.effect(Primitive::DebugCallback { callback: 42, fmt: "{}".into() }, &[lit(7.0, DType::I64)]);
    let j = b.finish(&[x2]);
    let exe = compile_jaxpr(&j);
    callbacks::CAPTURE.with(|c| *c.borrow_mut() = Some(vec![]));
    let xs = buf(&[3], DType::F32, &[1.5f32, -2.0, 0.25]);
    let out = exe.execute(&[&xs, &buf(&[], DType::I32, &[9i32])]).unwrap();
    let got = callbacks::CAPTURE.with(|c| c.borrow_mut().take().unwrap());
    assert_eq!(f32s(&out[0]), vec![3.0, -4.0, 0.5]);
    assert_eq!(got.len(), 2);
    let (id, args) = &got[0];
    assert_eq!(*id, 41);
    assert_eq!(args.len(), 3);
    assert_eq!(f32s(&args[0]), vec![3.0, -4.0, 0.5]);
    assert_eq!(args[1].aval(), &ShapedArray::scalar(DType::I32));
    assert_eq!(args[1].as_slice::<i32>().unwrap(), &[9]);
    assert_eq!(args[2].aval(), &ShapedArray::new(&[3], DType::Bool));
    assert_eq!(args[2].bytes(), &[1, 0, 1]);
    assert_eq!(got[1].0, 42);
    assert_eq!(got[1].1[0].as_slice::<i64>().unwrap(), &[7]);
}

#[test]
fn callback_without_outputs_is_kept_and_pjit_inlines() {
    // Inner jitted function: prints its argument, returns x + c (c a small constant).
    let mut ib = Builder::new();
    let ix = ib.arg(&[2, 2], DType::F64);
    let c = ib.constant(buf(&[2, 2], DType::F64, &[1.0f64, 2.0, 3.0, 4.0]));
    ib.effect(Primitive::DebugCallback { callback: 5, fmt: "{}".into() }, std::slice::from_ref(&ix));
    let s = ib.op(Primitive::Add, &[ix, c], &[2, 2], DType::F64);
    let inner = ib.finish(&[s]);
    let mut b = Builder::new();
    let x = b.arg(&[2, 2], DType::F64);
    let t = b.op(Primitive::Transpose { permutation: vec![1, 0] }, &[x], &[2, 2], DType::F64);
    let r = b.op(Primitive::Pjit { name: "inner".into(), jaxpr: Box::new(inner) }, &[t], &[2, 2], DType::F64);
    b.effect(Primitive::DebugCallback { callback: 6, fmt: "{}".into() }, &[r]);
    let j = b.finish(&[]);
    let exe = compile_jaxpr(&j);
    assert!(exe.out_avals().is_empty());
    callbacks::CAPTURE.with(|c| *c.borrow_mut() = Some(vec![]));
    let out = exe.execute(&[&buf(&[2, 2], DType::F64, &[1.0f64, 2.0, 3.0, 4.0])]).unwrap();
    let got = callbacks::CAPTURE.with(|c| c.borrow_mut().take().unwrap());
    assert!(out.is_empty());
    let ids: Vec<u64> = got.iter().map(|g| g.0).collect();
    assert_eq!(ids, vec![5, 6]);
    assert_eq!(got[0].1[0].as_slice::<f64>().unwrap(), &[1.0, 3.0, 2.0, 4.0]);
    assert_eq!(got[1].1[0].as_slice::<f64>().unwrap(), &[2.0, 5.0, 5.0, 8.0]);
}

#[test]
fn large_constants_become_parameters() {
    let n = 100;
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let small: Vec<f32> = vec![0.5; 4];
    let mut b = Builder::new();
    let x = b.arg(&[n], DType::F32);
    let big = b.constant(buf(&[n], DType::F32, &data));
    let sm = b.constant(buf(&[4], DType::F32, &small));
    let s = b.op(Primitive::Add, &[x, big], &[n], DType::F32);
    let r = b.op(Primitive::ReduceSum { axes: vec![0] }, &[sm], &[], DType::F32);
    let j = b.finish(&[s, r, lit(3.0, DType::I32)]);
    let m = lower_jaxpr(&j, "consts", &LowerOptions::default()).unwrap();
    assert_eq!(m.const_args.len(), 1);
    assert!(m.text.contains("@main(%const0: tensor<100xf32>, %arg0: tensor<100xf32>)"), "{}", m.text);
    assert!(m.text.contains("dense<5.0e-1>") || m.text.contains("dense<0.5>"), "{}", m.text);
    let exe = compile(&m, &CompileOptions::default()).unwrap();
    let ones = vec![1.0f32; n];
    let out = exe.execute(&[&buf(&[n], DType::F32, &ones)]).unwrap();
    assert_eq!(f32s(&out[0]), (0..n).map(|i| i as f32 + 1.0).collect::<Vec<_>>());
    assert_eq!(f32s(&out[1]), vec![2.0]);
    assert_eq!(out[2].as_slice::<i32>().unwrap(), &[3]);
    let mem = memory_analysis(&m);
    assert_eq!((mem.argument_size_in_bytes, mem.output_size_in_bytes), (800, 408));
}

#[test]
fn passthrough_outputs_and_donation() {
    let mut b = Builder::new();
    let x = b.arg(&[4], DType::I32);
    let y = b.arg(&[4], DType::I32);
    let s = b.op(Primitive::Sub, &[x.clone(), y], &[4], DType::I32);
    let j = b.finish(&[s.clone(), x, s]);
    let m = lower_jaxpr(&j, "donate", &LowerOptions { donated: vec![true, true], ..Default::default() }).unwrap();
    assert!(m.text.contains("%arg0: tensor<4xi32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<4xi32> {tf.aliasing_output = 1 : i32}"), "{}", m.text);
    let exe = compile(&m, &CompileOptions::default()).unwrap();
    let (a, bb) = (buf(&[4], DType::I32, &[5i32, 6, 7, 8]), buf(&[4], DType::I32, &[1i32, 1, 2, 2]));
    let out = exe.execute(&[&a, &bb]).unwrap();
    assert_eq!(out[0].as_slice::<i32>().unwrap(), &[4, 5, 5, 6]);
    assert_eq!(out[1].as_slice::<i32>().unwrap(), &[5, 6, 7, 8]);
    assert_eq!(out[2].as_slice::<i32>().unwrap(), &[4, 5, 5, 6]);
    assert_eq!(a.as_slice::<i32>().unwrap(), &[5, 6, 7, 8], "inputs are never written");
    assert!(lower_jaxpr(&j, "d", &LowerOptions { donated: vec![true], ..Default::default() }).is_err());
}

#[test]
fn donated_argument_buffer_receives_its_output_in_place() {
    // out = x * y + x, with x donated: computed in x's buffer.
    let mut b = Builder::new();
    let x = b.arg(&[5], DType::F32);
    let y = b.arg(&[5], DType::F32);
    let p = b.op(Primitive::Mul, &[x.clone(), y], &[5], DType::F32);
    let s = b.op(Primitive::Add, &[p, x], &[5], DType::F32);
    let j = b.finish(&[s]);
    let m = lower_jaxpr(&j, "inplace", &LowerOptions { donated: vec![true, false], ..Default::default() }).unwrap();
    let exe = compile(&m, &CompileOptions::default()).unwrap();
    assert_eq!(exe.aliases(), &[Some(0), None]);
    let xs = buf(&[5], DType::F32, &[1.0f32, 2.0, 3.0, 4.0, 5.0]);
    let ys = buf(&[5], DType::F32, &[2.0f32, 2.0, 0.5, -1.0, 0.0]);
    // Borrowed: the input stays intact and the output is a fresh buffer.
    let out = exe.execute(&[&xs, &ys]).unwrap();
    assert_eq!(f32s(&out[0]), vec![3.0, 6.0, 4.5, 0.0, 5.0]);
    assert_eq!(f32s(&xs), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_ne!(out[0].as_ptr(), xs.as_ptr());
    // Donated: the output is the same allocation.
    let ptr = xs.as_ptr();
    let out = exe.execute_args(&mut [ArgBuf::Donated(xs), ArgBuf::Borrowed(&ys)]).unwrap();
    assert_eq!(out[0].as_ptr(), ptr);
    assert_eq!(f32s(&out[0]), vec![3.0, 6.0, 4.5, 0.0, 5.0]);
}

#[test]
fn argument_mismatch_is_a_type_error() {
    let exe = compile_jaxpr(&two_x_plus_y());
    let v = buf(&[3], DType::I32, &[1i32, 2, 3]);
    let f = buf(&[], DType::F32, &[72.0f32]);
    let e = exe.execute(&[&v, &f]).unwrap_err();
    assert_eq!(e.kind, crate::ErrorKind::Type);
    assert_eq!(
        e.message,
        "Argument types differ from the types for which this computation was compiled. The mismatches are:\n\
         Argument 0 compiled with int32[] and called with int32[3]\n\
         Argument 1 compiled with int32[] and called with float32[]"
    );
    let e = exe.execute(&[&v]).unwrap_err();
    assert!(e.message.contains("called with 1 arguments"), "{e}");
}

#[test]
fn compile_failures_are_errors() {
    // Unparsable text: the diagnostic is in the message.
    let mut m = lower_jaxpr(&two_x_plus_y(), "f", &LowerOptions::default()).unwrap();
    m.text = m.text.replace("arith.addi", "arith.addz");
    let e = compile(&m, &CompileOptions::default()).err().unwrap();
    assert_eq!(e.kind, crate::ErrorKind::Compile);
    assert!(e.message.contains("arith.addz"), "{e}");
    // An unresolvable external symbol: lookup fails, no crash.
    let text = "module @jit_g {\n  func.func private @no_such_symbol(i64)\n  func.func public @main(%arg0: tensor<i64>) -> (tensor<i64>) {\n    %c = arith.constant 1 : i64\n    func.call @no_such_symbol(%c) : (i64) -> ()\n    return %arg0 : tensor<i64>\n  }\n}\n";
    let m = crate::lower::LoweredModule {
        text: text.into(),
        in_avals: vec![ShapedArray::scalar(DType::I64)],
        out_avals: vec![ShapedArray::scalar(DType::I64)],
        const_args: vec![],
        in_memory_kinds: vec![],
        out_memory_kinds: vec![],
    };
    let e = compile(&m, &CompileOptions::default()).err().unwrap();
    assert_eq!(e.kind, crate::ErrorKind::Compile);
    // A primitive on a dtype it does not accept.
    let mut b = Builder::new();
    let x = b.arg(&[2], DType::I32);
    let y = b.op(Primitive::Exp, &[x], &[2], DType::I32);
    let e = lower_jaxpr(&b.finish(&[y]), "e", &LowerOptions::default()).unwrap_err();
    assert!(e.message.contains("`exp` is not defined for dtype int32"), "{e}");
}

#[test]
fn cost_analysis_matches_jax() {
    let c = cost_analysis(&two_x_plus_y().jaxpr);
    assert_eq!((c.flops, c.transcendentals, c.bytes_accessed), (2.0, 0.0, 12.0));
    assert_eq!(c.to_string(), "{'flops': 2.0, 'transcendentals': 0.0, 'bytes accessed': 12.0}");
    // selu as JAX traces it (expm1 there, exp here: one transcendental either way).
    let mut b = Builder::new();
    let x = b.arg(&[5], DType::F32);
    let pos = b.op(Primitive::Gt, &[x.clone(), lit(0.0, DType::F32)], &[5], DType::Bool);
    let safe = b.op(Primitive::SelectN, &[pos.clone(), x.clone(), lit(0.0, DType::F32)], &[5], DType::F32);
    let e = b.op(Primitive::Exp, &[safe], &[5], DType::F32);
    let a = b.op(Primitive::Mul, &[lit(1.67, DType::F32), e], &[5], DType::F32);
    let w = b.op(Primitive::SelectN, &[pos, a, x], &[5], DType::F32);
    let s = b.op(Primitive::Mul, &[lit(1.05, DType::F32), w], &[5], DType::F32);
    let c = cost_analysis(&b.finish(&[s]).jaxpr);
    assert_eq!((c.flops, c.transcendentals, c.bytes_accessed), (25.0, 5.0, 40.0));
    let mut b = Builder::new();
    let l = b.arg(&[128, 256], DType::F32);
    let r = b.arg(&[256, 64], DType::F32);
    let dot = Primitive::DotGeneral {
        lhs_contracting: vec![1],
        rhs_contracting: vec![0],
        lhs_batch: vec![],
        rhs_batch: vec![],
        precision: None,
        preferred_element_type: None,
        out_sharding: None,
    };
    let o = b.op(dot, &[l, r], &[128, 64], DType::F32);
    let c = cost_analysis(&b.finish(&[o]).jaxpr);
    assert_eq!((c.flops, c.bytes_accessed), (4194304.0, 229376.0));
}

#[test]
fn memory_analysis_matches_jax() {
    let m = lower_jaxpr(&two_x_plus_y(), "f", &LowerOptions::default()).unwrap();
    let s = memory_analysis(&m);
    assert_eq!((s.argument_size_in_bytes, s.output_size_in_bytes, s.temp_size_in_bytes), (8, 4, 0));
    assert_eq!(
        s.to_string(),
        "CompiledMemoryStats(generated_code_size_in_bytes=0, argument_size_in_bytes=8, output_size_in_bytes=4, \
         alias_size_in_bytes=0, temp_size_in_bytes=0, host_generated_code_size_in_bytes=0, host_argument_size_in_bytes=0, \
         host_output_size_in_bytes=0, host_alias_size_in_bytes=0, host_temp_size_in_bytes=0)"
    );
}

#[test]
fn executes_concurrently_from_threads() {
    let exe = std::sync::Arc::new(compile_jaxpr(&sin_x2_plus_1(256)));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let exe = exe.clone();
            std::thread::spawn(move || {
                for k in 0..50 {
                    let x: Vec<f32> = (0..256).map(|i| (i + t * 7 + k) as f32 * 0.001).collect();
                    let out = exe.execute(&[&buf(&[256], DType::F32, &x)]).unwrap();
                    let got = f32s(&out[0]);
                    for i in 0..256 {
                        assert!((got[i] - (x[i].sin() * 2.0 + 1.0)).abs() < 1e-5);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn zero_d_literal_only_and_unused_vars() {
    // Jaxpr returning a literal and an invar, with a 0-d iota-free pipeline.
    let v = Var { id: 1, aval: ShapedArray::new(&[2], DType::Bool) };
    let j = ClosedJaxpr {
        jaxpr: Jaxpr { constvars: vec![], invars: vec![v.clone()], eqns: vec![], outvars: vec![lit(1.5, DType::F64), Atom::Var(v)] },
        consts: vec![],
        in_types: None,
    };
    let exe = compile_jaxpr(&j);
    let out = exe.execute(&[&Buffer::from_bytes(&ShapedArray::new(&[2], DType::Bool), &[1, 0]).unwrap()]).unwrap();
    assert_eq!(out[0].as_slice::<f64>().unwrap(), &[1.5]);
    assert_eq!(out[1].bytes(), &[1, 0]);
}

/// Compile-time figures for `sin(x)*2+1` on f32[1024] (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn compile_times_sin_1024() {
    let m = lower_jaxpr(&sin_x2_plus_1(1024), "f", &LowerOptions::default()).unwrap();
    for opt_level in [0, 1, 2, 3] {
    let mut ts: Vec<CompileTimes> = (0..9).map(|_| compile(&m, &CompileOptions { opt_level }).unwrap().times().clone()).collect();
    ts.sort_by(|a, b| a.total().partial_cmp(&b.total()).unwrap());
    for (label, t) in [("min", &ts[0]), ("median", &ts[4])] {
        eprintln!(
            "O{opt_level} {label}: parse {:.2} ms, passes {:.2} ms, engine {:.2} ms, codegen {:.2} ms, total {:.2} ms",
            t.parse * 1e3, t.passes * 1e3, t.engine * 1e3, t.codegen * 1e3, t.total() * 1e3
        );
    }
    }
}

#[test]
fn elementwise_chains_fuse_into_one_loop() {
    let exe = compile_jaxpr(&sin_x2_plus_1(1024));
    let ir = exe.optimized_ir();
    assert_eq!(ir.matches("scf.for").count(), 1, "{ir}");
    assert!(!ir.contains("memref.alloc"), "{ir}");
    // Broadcast literals (as the engine's canonicalization writes them) fuse too.
    let mut b = Builder::new();
    let x = b.arg(&[8, 16], DType::F32);
    let row = b.arg(&[16], DType::F32);
    let two = b.op(Primitive::BroadcastInDim { shape: vec![8, 16], broadcast_dimensions: vec![] }, &[lit(2.0, DType::F32)], &[8, 16], DType::F32);
    let rb = b.op(Primitive::BroadcastInDim { shape: vec![8, 16], broadcast_dimensions: vec![1] }, &[row], &[8, 16], DType::F32);
    let m = b.op(Primitive::Mul, &[x, two], &[8, 16], DType::F32);
    let s = b.op(Primitive::Add, &[m, rb], &[8, 16], DType::F32);
    let exe = compile_jaxpr(&b.finish(&[s]));
    let ir = exe.optimized_ir();
    assert_eq!(ir.matches("scf.for").count(), 2, "{ir}");
    assert!(!ir.contains("memref.alloc"), "{ir}");
    // An elementwise producer fuses into a reduction: sum(x * x) needs no temporary for
    // x * x (only the 16 lane sums of each row, `Lowerer::reduce_lanes`, on the stack).
    let mut b = Builder::new();
    let x = b.arg(&[4, 32], DType::F32);
    let sq = b.op(Primitive::Mul, &[x.clone(), x], &[4, 32], DType::F32);
    let s = b.op(Primitive::ReduceSum { axes: vec![1] }, &[sq], &[4], DType::F32);
    let exe = compile_jaxpr(&b.finish(&[s]));
    let ir = exe.optimized_ir();
    assert!(!ir.contains("memref.alloc()"), "{ir}");
    assert!(!ir.lines().any(|l| l.contains("memref.alloca") && !l.contains("memref<4x16xf32>")), "{ir}");
    assert_eq!(ir.matches("arith.mulf").count(), 1, "{ir}");
}

/// Per-call cost of `execute` on f32[8] (run with `--ignored --nocapture`; debug builds
/// overstate the Rust side).
#[test]
#[ignore]
fn execute_overhead_f32_8() {
    let exe = compile_jaxpr(&sin_x2_plus_1(8));
    let x = buf(&[8], DType::F32, &[0.5f32; 8]);
    for _ in 0..1000 {
        exe.execute(&[&x]).unwrap();
    }
    let n = 100_000;
    let t = std::time::Instant::now();
    for _ in 0..n {
        std::hint::black_box(exe.execute(&[&x]).unwrap());
    }
    eprintln!("execute f32[8]: {:.3} us/call", t.elapsed().as_secs_f64() / n as f64 * 1e6);
}

#[test]
fn nested_large_constant_and_odd_names() {
    let n = 80;
    let data: Vec<i32> = (0..n as i32).collect();
    let mut ib = Builder::new();
    let ix = ib.arg(&[n], DType::I32);
    let c = ib.constant(buf(&[n], DType::I32, &data));
    let s = ib.op(Primitive::Mul, &[ix, c], &[n], DType::I32);
    let inner = ib.finish(&[s]);
    let mut b = Builder::new();
    let x = b.arg(&[n], DType::I32);
    let p1 = Primitive::Pjit { name: "inner".into(), jaxpr: Box::new(inner) };
    let r1 = b.op(p1.clone(), &[x], &[n], DType::I32);
    let r2 = b.op(p1, &[r1], &[n], DType::I32);
    let m = lower_jaxpr(&b.finish(&[r2]), "<lambda> f", &LowerOptions::default()).unwrap();
    assert!(m.text.starts_with("module @jit__lambda__f {"), "{}", m.text);
    assert_eq!(m.const_args.len(), 1, "both inlined call sites share one parameter");
    let exe = compile(&m, &CompileOptions::default()).unwrap();
    let out = exe.execute(&[&buf(&[n], DType::I32, &vec![2i32; n])]).unwrap();
    let want: Vec<i32> = data.iter().map(|v| 2 * v * v).collect();
    assert_eq!(out[0].as_slice::<i32>().unwrap(), want.as_slice());
}

/// `x * y + z` becomes one fused multiply-add (one rounding), as XLA:CPU allows:
/// with x = y = 1 + 2⁻¹² and z = −(1 + 2⁻¹¹) the exact result is 2⁻²⁴; rounding the
/// product to f32 first (1 + 2⁻¹¹, a tie to even) would give 0.
#[test]
fn multiply_add_contracts_into_fma() {
    use crate::ir::Primitive;
    use crate::lower::tests::Builder;
    let mut b = Builder::new();
    let (x, y, z) = (b.arg(&[8], DType::F32), b.arg(&[8], DType::F32), b.arg(&[8], DType::F32));
    let p = b.op(Primitive::Mul, &[x, y], &[8], DType::F32);
    let s = b.op(Primitive::Add, &[p, z], &[8], DType::F32);
    let exe = compile_jaxpr(&b.finish(&[s]));
    let xv = 1.0f32 + 2f32.powi(-12);
    let zv = -(1.0f32 + 2f32.powi(-11));
    let out = exe.execute(&[&buf(&[8], DType::F32, &[xv; 8]), &buf(&[8], DType::F32, &[xv; 8]), &buf(&[8], DType::F32, &[zv; 8])]).unwrap();
    let exact = (xv as f64) * (xv as f64) + zv as f64;
    assert_eq!(exact, 2f64.powi(-24));
    assert_eq!(out[0].as_slice::<f32>().unwrap(), &[exact as f32; 8]);
    // Formed in the IR (`context::fuse_multiply_adds`), not left to `contract` flags.
    let ll = exe.llvm_ir().unwrap();
    assert!(ll.contains("@llvm.fmuladd.") && !ll.contains("contract"), "{ll}");
}

/// `run_pipeline` reuses one parsed pass manager per (context, pipeline): interleaved
/// compiles of different modules give each module the same optimized IR as its first
/// compile and correct results, and a pipeline that does not parse is an error that
/// leaves the cached managers usable.
#[test]
fn reused_pass_managers_give_the_same_ir_and_results() {
    let n = 1024;
    let sin = lower_jaxpr(&sin_x2_plus_1(n), "t", &LowerOptions::default()).unwrap();
    let add = lower_jaxpr(&two_x_plus_y(), "t", &LowerOptions::default()).unwrap();
    let opts = CompileOptions { opt_level: 0 };
    let first = compile(&sin, &opts).unwrap();
    let runs0 = context::pipeline_runs();
    let a1 = compile(&add, &opts).unwrap();
    // An unknown pass: an error, nothing cached.
    {
        let guard = context();
        let diags = context::Diagnostics::capture(&guard.ctx);
        let mut m = melior::ir::Module::parse(&guard.ctx, "module { func.func @f() { return } }").unwrap();
        assert!(context::run_pipeline(&guard.ctx, &mut m, "builtin.module(no-such-pass)", &diags).is_err());
    }
    let again = compile(&sin, &opts).unwrap();
    let a2 = compile(&add, &opts).unwrap();
    assert!(context::pipeline_runs() >= runs0 + 6);
    assert_eq!(first.optimized_ir(), again.optimized_ir());
    assert_eq!(a1.optimized_ir(), a2.optimized_ir());
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.37 - 100.0).collect();
    for exe in [&first, &again] {
        let out = exe.execute(&[&buf(&[n], DType::F32, &x)]).unwrap();
        for (i, &g) in out[0].as_slice::<f32>().unwrap().iter().enumerate() {
            let want = (x[i] as f64).sin() * 2.0 + 1.0;
            assert!((g as f64 - want).abs() < 1e-5, "{i}: {g} vs {want}");
        }
    }
    let out = a2.execute(&[&buf(&[], DType::I32, &[5i32]), &buf(&[], DType::I32, &[-4i32])]).unwrap();
    assert_eq!(out[0].as_slice::<i32>().unwrap(), &[6]);
}
