//! Threefry-2x32 (20 rounds), the block cipher behind JAX's default PRNG, written with
//! u32 engine primitives so that it traces, batches and lowers like any other code.
//! Reference: Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11), and
//! the round/key-schedule layout of JAX's `_threefry2x32_lowering` in `jax/_src/prng.py`.

use super::{arr, bin, u32_lit};
use crate::error::Result;
use crate::ir::Primitive;
use crate::trace::{Array, Operand};

const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];

/// `x` rotated left by `d` bits: `(x << d) | (x >> (32 - d))`.
#[track_caller]
fn rotate_left(x: &Array, d: u32) -> Result<Array> {
    let l = bin(Primitive::ShiftLeft, x, u32_lit(d))?;
    let r = bin(Primitive::ShiftRightLogical, x, u32_lit(32 - d))?;
    bin(Primitive::Or, &l, arr(&r))
}

/// One mix round: `v0 += v1; v1 = rotl(v1, r) ^ v0`.
#[track_caller]
fn round(v: &mut [Array; 2], r: u32) -> Result<()> {
    v[0] = bin(Primitive::Add, &v[0], arr(&v[1]))?;
    let rot = rotate_left(&v[1], r)?;
    v[1] = bin(Primitive::Xor, &v[0], arr(&rot))?;
    Ok(())
}

/// Threefry-2x32 of the counter words `(x1, x2)` under the key `(k1, k2)`; all uint32,
/// broadcasting together (a 0-d key with counters of any shape). Returns the two output
/// words of the broadcast shape.
#[track_caller]
pub fn threefry2x32(k1: &Array, k2: &Array, x1: Operand, x2: Operand) -> Result<(Array, Array)> {
    let k3 = bin(Primitive::Xor, k1, arr(k2))?;
    let k3 = bin(Primitive::Xor, &k3, u32_lit(0x1BD1_1BDA))?;
    let ks = [k1.clone(), k2.clone(), k3];
    let mut v = [
        crate::lax::binary(Primitive::Add, x1, arr(&ks[0]))?,
        crate::lax::binary(Primitive::Add, x2, arr(&ks[1]))?,
    ];
    for i in 0..5usize {
        for &r in &ROTATIONS[i % 2] {
            round(&mut v, r)?;
        }
        v[0] = bin(Primitive::Add, &v[0], arr(&ks[(i + 1) % 3]))?;
        v[1] = bin(Primitive::Add, &v[1], arr(&ks[(i + 2) % 3]))?;
        v[1] = bin(Primitive::Add, &v[1], u32_lit(i as u32 + 1))?;
    }
    let [a, b] = v;
    Ok((a, b))
}
