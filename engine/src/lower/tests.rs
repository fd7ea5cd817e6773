//! Lowering tests: golden module text, structure of the lowered IR, and the jaxpr
//! builder the compile tests share.

use super::*;
use crate::ir::{Scalar, Var};
use expect_test::expect;

/// Builds jaxprs by hand for tests.
pub(crate) struct Builder {
    next: u32,
    pub invars: Vec<Var>,
    pub constvars: Vec<Var>,
    pub consts: Vec<Arc<Buffer>>,
    pub eqns: Vec<Eqn>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder { next: 0, invars: vec![], constvars: vec![], consts: vec![], eqns: vec![] }
    }
    fn var(&mut self, shape: &[usize], d: DType) -> Var {
        self.next += 1;
        Var { id: self.next, aval: ShapedArray::new(shape, d) }
    }
    pub fn arg(&mut self, shape: &[usize], d: DType) -> Atom {
        let v = self.var(shape, d);
        self.invars.push(v.clone());
        Atom::Var(v)
    }
    pub fn constant(&mut self, b: Buffer) -> Atom {
        let v = self.var(b.shape(), b.dtype());
        self.constvars.push(v.clone());
        self.consts.push(Arc::new(b));
        Atom::Var(v)
    }
    pub fn op(&mut self, p: Primitive, ins: &[Atom], shape: &[usize], d: DType) -> Atom {
        let v = self.var(shape, d);
        self.eqns.push(Eqn { primitive: p, inputs: ins.to_vec(), outputs: vec![v.clone()], source: None, name_stack: None, metadata: None });
        Atom::Var(v)
    }
    pub fn effect(&mut self, p: Primitive, ins: &[Atom]) {
        self.eqns.push(Eqn { primitive: p, inputs: ins.to_vec(), outputs: vec![], source: None, name_stack: None, metadata: None });
    }
    pub fn finish(self, outs: &[Atom]) -> ClosedJaxpr {
        ClosedJaxpr {
            jaxpr: Jaxpr { constvars: self.constvars, invars: self.invars, eqns: self.eqns, outvars: outs.to_vec() },
            consts: self.consts,
            in_types: None,
        }
    }
}

/// A weakly typed scalar literal of dtype `d`.
pub(crate) fn lit(v: f64, d: DType) -> Atom {
    let value = if d.is_float() { Scalar::F64(v) } else if d.is_bool() { Scalar::Bool(v != 0.0) } else { Scalar::I64(v as i64) };
    Atom::Lit(Literal { value: value.cast(d), aval: ShapedArray::weak(&[], d) })
}

/// `2*x + y` on i32 scalars (the aot page's example).
pub(crate) fn two_x_plus_y() -> ClosedJaxpr {
    let mut b = Builder::new();
    let x = b.arg(&[], DType::I32);
    let y = b.arg(&[], DType::I32);
    let c = b.op(Primitive::Mul, &[lit(2.0, DType::I32), x], &[], DType::I32);
    let d = b.op(Primitive::Add, &[c, y], &[], DType::I32);
    b.finish(&[d])
}

/// `sin(x) * 2 + 1` on f32[n].
pub(crate) fn sin_x2_plus_1(n: usize) -> ClosedJaxpr {
    unary_x2_plus_1(Primitive::Sin, n)
}

/// `p(x) * 2 + 1` on f32[n] for a unary primitive `p`.
pub(crate) fn unary_x2_plus_1(p: Primitive, n: usize) -> ClosedJaxpr {
    let mut b = Builder::new();
    let x = b.arg(&[n], DType::F32);
    let s = b.op(p, &[x], &[n], DType::F32);
    let m = b.op(Primitive::Mul, &[s, lit(2.0, DType::F32)], &[n], DType::F32);
    let a = b.op(Primitive::Add, &[m, lit(1.0, DType::F32)], &[n], DType::F32);
    b.finish(&[a])
}

#[test]
fn golden_two_x_plus_y() {
    let m = lower_jaxpr(&two_x_plus_y(), "f", &LowerOptions::default()).unwrap();
    expect![[r#"
        module @jit_f {
          func.func public @main(%arg0: tensor<i32>, %arg1: tensor<i32>) -> (tensor<i32>) {
            %0 = arith.constant 2 : i32
            %1 = tensor.extract %arg0[] : tensor<i32>
            %2 = arith.muli %0, %1 : i32
            %3 = tensor.extract %arg1[] : tensor<i32>
            %4 = arith.addi %2, %3 : i32
            %5 = tensor.empty() : tensor<i32>
            %6 = linalg.fill ins(%4 : i32) outs(%5 : tensor<i32>) -> tensor<i32>
            return %6 : tensor<i32>
          }
        }
    "#]]
    .assert_eq(&m.text);
    assert_eq!(m.in_avals, vec![ShapedArray::scalar(DType::I32); 2]);
    assert_eq!(m.out_avals, vec![ShapedArray::scalar(DType::I32)]);
}

#[test]
fn golden_sqrt_x2_plus_1() {
    // (f32 sin is an inline approximation of a hundred ops since issue 4; sqrt stays one op.)
    let m = lower_jaxpr(&unary_x2_plus_1(Primitive::Sqrt, 8), "f", &LowerOptions::default()).unwrap();
    expect![[r#"
        module @jit_f {
          func.func public @main(%arg0: tensor<8xf32>) -> (tensor<8xf32>) {
            %0 = tensor.empty() : tensor<8xf32>
            %1 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%arg0 : tensor<8xf32>) outs(%0 : tensor<8xf32>) {
            ^bb0(%in0: f32, %out: f32):
              %2 = math.sqrt %in0 : f32
              linalg.yield %2 : f32
            } -> tensor<8xf32>
            %3 = arith.constant 2.0 : f32
            %4 = tensor.empty() : tensor<8xf32>
            %5 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%1 : tensor<8xf32>) outs(%4 : tensor<8xf32>) {
            ^bb0(%in0: f32, %out: f32):
              %6 = arith.mulf %in0, %3 : f32
              linalg.yield %6 : f32
            } -> tensor<8xf32>
            %7 = arith.constant 1.0 : f32
            %8 = tensor.empty() : tensor<8xf32>
            %9 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%5 : tensor<8xf32>) outs(%8 : tensor<8xf32>) {
            ^bb0(%in0: f32, %out: f32):
              %10 = arith.addf %in0, %7 : f32
              linalg.yield %10 : f32
            } -> tensor<8xf32>
            return %9 : tensor<8xf32>
          }
        }
    "#]]
    .assert_eq(&m.text);
}
