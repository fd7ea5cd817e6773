//! Property tests of numpy indexing (`x.index(..)`, `x.at(..).set/add`) against a
//! reference written here on f64 host data: random basic indices (integers, negative
//! ones too, slices with positive and negative steps, `NEW_AXIS`), advanced ones (integer
//! arrays that broadcast, mixed with integers and slices, adjacent or not; bool masks),
//! eagerly and under `jit`. Out-of-range array entries behave as in JAX (jax 0.10.2):
//! clamped for reads (gather), dropped for writes (scatter); negative entries count from
//! the end first.
//!
//! proptest runs with a fixed seed and no failure-persistence files (CI runs the same
//! cases each time); a failure found here becomes a plain test case.

use jax::numpy::{Index, IndexItem};
use jax::prelude::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

fn config() -> Config {
    // 32 cases: each one compiles a few gathers and scatters.
    Config { cases: 32, failure_persistence: None, rng_seed: RngSeed::Fixed(0x696e_6478), ..Config::default() }
}

/// One index item of the reference.
#[derive(Clone, Debug)]
enum It {
    Int(isize),
    Slice(Option<isize>, Option<isize>, isize),
    New,
    /// An integer index array: values and shape.
    Adv(Vec<i32>, Vec<usize>),
    /// A 1-d bool mask over one dimension.
    Mask(Vec<bool>),
}

fn to_index(items: &[It]) -> Index {
    Index(
        items
            .iter()
            .map(|it| match it {
                It::Int(i) => IndexItem::Int(*i),
                It::Slice(start, stop, step) => IndexItem::Slice { start: *start, stop: *stop, step: *step },
                It::New => NEW_AXIS,
                It::Adv(v, s) => IndexItem::Array(Array::from_vec(v.clone(), s).unwrap()),
                It::Mask(m) => IndexItem::Array(Array::from_vec(m.clone(), &[m.len()]).unwrap()),
            })
            .collect(),
    )
}

/// Python's `range(*slice(start, stop, step).indices(n))`.
fn slice_positions(start: Option<isize>, stop: Option<isize>, step: isize, n: usize) -> Vec<usize> {
    let n = n as isize;
    let (lo, hi) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let norm = |v: isize| (if v < 0 { v + n } else { v }).clamp(lo, hi);
    let s = start.map(norm).unwrap_or(if step > 0 { 0 } else { n - 1 });
    let e = stop.map(norm).unwrap_or(if step > 0 { n } else { -1 });
    let mut out = vec![];
    let mut i = s;
    while (step > 0 && i < e) || (step < 0 && i > e) {
        out.push(i as usize);
        i += step;
    }
    out
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = flat % shape[d];
        flat /= shape[d];
    }
    c
}

/// What one operand dim reads, per the reference.
enum Sel {
    /// The dim's positions (a slice; or one position and dropped for an integer when no
    /// advanced index is present).
    Basic(Vec<usize>, bool),
    /// Advanced: raw (unnormalized) entries broadcast over the index shape.
    Adv(Vec<i64>, Vec<usize>),
}

/// The numpy result of `items` on an array of `shape`: for each result element, the
/// operand element it reads as a flat offset, or `None` when an advanced entry is out of
/// range (`clamp` true: clamp it instead, as reads do).
fn reference(shape: &[usize], items: &[It], clamp: bool) -> (Vec<usize>, Vec<Option<usize>>) {
    let advanced = items.iter().any(|i| matches!(i, It::Adv(..) | It::Mask(_)));
    // (dim or None for a new axis, selection)
    let mut sels: Vec<Option<Sel>> = vec![];
    let mut full = items.to_vec();
    while full.iter().filter(|i| !matches!(i, It::New)).count() < shape.len() {
        full.push(It::Slice(None, None, 1));
    }
    let mut d = 0;
    for it in full {
        if matches!(it, It::New) {
            sels.push(None);
            continue;
        }
        let n = shape[d];
        d += 1;
        sels.push(Some(match it {
            It::Int(i) if advanced => Sel::Adv(vec![i as i64], vec![]),
            It::Int(i) => Sel::Basic(vec![if i < 0 { (i + n as isize) as usize } else { i as usize }], true),
            It::Slice(s, e, st) => Sel::Basic(slice_positions(s, e, st, n), false),
            It::Adv(v, s) => Sel::Adv(v.iter().map(|&x| x as i64).collect(), s),
            It::Mask(m) => {
                let pos: Vec<i64> = m.iter().enumerate().filter(|(_, b)| **b).map(|(i, _)| i as i64).collect();
                let len = pos.len();
                Sel::Adv(pos, vec![len])
            }
            It::New => unreachable!(),
        }));
    }
    let adv_at: Vec<usize> = sels.iter().enumerate().filter(|(_, s)| matches!(s, Some(Sel::Adv(..)))).map(|(i, _)| i).collect();
    let mut b: Vec<usize> = vec![];
    for s in &sels {
        if let Some(Sel::Adv(_, sh)) = s {
            let n = b.len().max(sh.len());
            let pad = |v: &[usize], i: usize| if i + v.len() >= n { v[i + v.len() - n] } else { 1 };
            b = (0..n).map(|i| if pad(&b, i) == 1 { pad(sh, i) } else { pad(&b, i) }).collect();
        }
    }
    // Result dims: (sel index or usize::MAX for the broadcast block, length).
    let basic_dims: Vec<(usize, usize)> = sels
        .iter()
        .enumerate()
        .filter_map(|(i, s)| match s {
            None => Some((i, 1)),
            Some(Sel::Basic(p, false)) => Some((i, p.len())),
            _ => None,
        })
        .collect();
    let adjacent = adv_at.windows(2).all(|w| w[1] == w[0] + 1);
    let split = if adv_at.is_empty() { 0 } else if adjacent { basic_dims.iter().filter(|(i, _)| *i < adv_at[0]).count() } else { 0 };
    let mut out_shape: Vec<usize> = basic_dims[..split].iter().map(|d| d.1).collect();
    out_shape.extend(&b);
    out_shape.extend(basic_dims[split..].iter().map(|d| d.1));
    let n_out: usize = out_shape.iter().product();
    let st = strides(shape);
    let offsets = (0..n_out)
        .map(|flat| {
            let c = unravel(flat, &out_shape);
            let bc = &c[split..split + b.len()];
            let mut basic_c = c[..split].to_vec();
            basic_c.extend(&c[split + b.len()..]);
            let mut off = 0;
            let mut dim = 0;
            for (i, s) in sels.iter().enumerate() {
                let Some(s) = s else { continue };
                let n = shape[dim] as i64;
                let pos = match s {
                    Sel::Basic(p, true) => p[0] as i64,
                    Sel::Basic(p, false) => p[basic_c[basic_dims.iter().position(|d| d.0 == i).unwrap()]] as i64,
                    Sel::Adv(v, sh) => {
                        let k = sh.iter().enumerate().fold(0, |acc, (j, &m)| acc * m + if m == 1 { 0 } else { bc[j + b.len() - sh.len()] });
                        let j = if v[k] < 0 { v[k] + n } else { v[k] };
                        if clamp {
                            j.clamp(0, n - 1)
                        } else if j < 0 || j >= n {
                            return None;
                        } else {
                            j
                        }
                    }
                };
                off += pos as usize * st[dim];
                dim += 1;
            }
            Some(off)
        })
        .collect();
    (out_shape, offsets)
}

/// Deterministic choices drawn from proptest's words.
struct Draw<'a>(&'a [u32], usize);

impl Draw<'_> {
    fn next(&mut self, m: u32) -> u32 {
        let w = self.0[self.1 % self.0.len()].wrapping_mul(2654435761).wrapping_add(self.1 as u32 * 40503);
        self.1 += 1;
        (w >> 7) % m.max(1)
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.next((hi - lo) as u32) as i64
    }
    fn slice(&mut self) -> It {
        let mut end = || if self.next(3) == 0 { None } else { Some(self.range(-5, 6) as isize) };
        let (s, e) = (end(), end());
        It::Slice(s, e, [-3, -2, -1, 1, 1, 2, 3][self.next(7) as usize])
    }
    fn int(&mut self, n: usize) -> It {
        It::Int(self.range(-(n as i64), n as i64) as isize)
    }
}

/// A basic index for `shape`: integers (in range), slices, new axes; maybe fewer items than dims.
fn basic_index(shape: &[usize], w: &[u32]) -> Vec<It> {
    let mut r = Draw(w, 0);
    let used = shape.len() - if shape.len() > 1 { r.next(2) as usize } else { 0 };
    let mut items: Vec<It> = shape[..used].iter().map(|&n| if n > 0 && r.next(3) == 0 { r.int(n) } else { r.slice() }).collect();
    for _ in 0..r.next(3) {
        let at = r.next(items.len() as u32 + 1) as usize;
        items.insert(at, It::New);
    }
    items
}

/// An advanced index for `shape` (all dims >= 1): at least one integer array (shape
/// `[len]` or `[1]`, entries up to 2 past either end), the other dims integers or slices.
fn advanced_index(shape: &[usize], w: &[u32]) -> Vec<It> {
    let mut r = Draw(w, 0);
    let len = 1 + r.next(3) as usize;
    let mut items: Vec<It> = shape
        .iter()
        .map(|&n| match r.next(4) {
            0 => r.int(n),
            1 => r.slice(),
            _ => {
                let l = if r.next(3) == 0 { 1 } else { len };
                It::Adv((0..l).map(|_| r.range(-(n as i64) - 2, n as i64 + 2) as i32).collect(), vec![l])
            }
        })
        .collect();
    if !items.iter().any(|i| matches!(i, It::Adv(..))) {
        let n = shape[0] as i64;
        items[0] = It::Adv(vec![r.range(-n - 2, n + 2) as i32], vec![1]);
    }
    items
}

/// A bool mask over one dim, the other dims integers or slices.
fn mask_index(shape: &[usize], w: &[u32]) -> Vec<It> {
    let mut r = Draw(w, 0);
    let at = r.next(shape.len() as u32) as usize;
    shape.iter().enumerate().map(|(d, &n)| if d == at { It::Mask((0..n).map(|_| r.next(2) == 1).collect()) } else if r.next(2) == 0 { r.int(n) } else { r.slice() }).collect()
}

fn data(shape: &[usize]) -> (Array, Vec<f64>) {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| i as f64 + 1.0).collect();
    (Array::from_vec(v.iter().map(|&x| x as f32).collect::<Vec<f32>>(), shape).unwrap(), v)
}

/// `x[items]`, eagerly and under `jit`, against the reference (clamped reads).
fn check_read(shape: &[usize], items: &[It]) -> Result<(), TestCaseError> {
    let (x, xv) = data(shape);
    let (out_shape, offs) = reference(shape, items, true);
    let want: Vec<f64> = offs.iter().map(|o| xv[o.unwrap()]).collect();
    let idx = to_index(items);
    let eager = jnp::index(&x, &idx).map_err(|e| TestCaseError::fail(format!("{items:?} on {shape:?}: {e}")))?;
    prop_assert_eq!(eager.shape(), out_shape.clone(), "shape of {:?} on {:?}", items, shape);
    prop_assert_eq!(eager.to_vec::<f64>().unwrap(), want.clone(), "{:?} on {:?}", items, shape);
    let jitted = jit(move |x: Array| jnp::index(&x, &idx)).call(&x).unwrap();
    prop_assert_eq!(jitted.to_vec::<f64>().unwrap(), want, "jit {:?} on {:?}", items, shape);
    Ok(())
}

/// `x.at[items].set(100)` and `.add(v)` (v distinct per element, so repeated indices
/// show accumulation), eagerly and under `jit`, against the reference (dropped writes).
fn check_write(shape: &[usize], items: &[It]) -> Result<(), TestCaseError> {
    let (x, xv) = data(shape);
    let (out_shape, offs) = reference(shape, items, false);
    let (v, vv) = data(&out_shape);
    let mut set = xv.clone();
    let mut add = xv.clone();
    for (k, o) in offs.iter().enumerate() {
        if let Some(o) = o {
            set[*o] = 100.0;
            add[*o] += vv[k] * 1000.0;
        }
    }
    let idx = to_index(items);
    let hundred = Array::scalar(100.0f32);
    let v1000 = &v * 1000.0;
    let got = (x.at(idx.clone()).set(&hundred).unwrap(), x.at(idx.clone()).add(&v1000).unwrap());
    prop_assert_eq!(got.0.to_vec::<f64>().unwrap(), set.clone(), "set {:?} on {:?}", items, shape);
    prop_assert_eq!(got.1.to_vec::<f64>().unwrap(), add.clone(), "add {:?} on {:?}", items, shape);
    let f = jit(move |(x, s, a): (Array, Array, Array)| -> Result<(Array, Array)> { Ok((x.at(idx.clone()).set(&s)?, x.at(idx.clone()).add(&a)?)) });
    let (js, ja) = f.call((&x, &hundred, &v1000)).unwrap();
    prop_assert_eq!(js.to_vec::<f64>().unwrap(), set, "jit set {:?} on {:?}", items, shape);
    prop_assert_eq!(ja.to_vec::<f64>().unwrap(), add, "jit add {:?} on {:?}", items, shape);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn basic_indexing_matches_numpy(shape in prop::collection::vec(0usize..4, 0..=3), w in prop::collection::vec(any::<u32>(), 8)) {
        let items = basic_index(&shape, &w);
        check_read(&shape, &items)?;
        check_write(&shape, &items)?;
    }

    #[test]
    fn advanced_indexing_matches_numpy(shape in prop::collection::vec(1usize..4, 1..=3), w in prop::collection::vec(any::<u32>(), 8)) {
        let items = advanced_index(&shape, &w);
        check_read(&shape, &items)?;
        check_write(&shape, &items)?;
    }

    #[test]
    fn bool_masks_match_numpy(shape in prop::collection::vec(1usize..4, 1..=3), w in prop::collection::vec(any::<u32>(), 8)) {
        let items = mask_index(&shape, &w);
        check_read(&shape, &items)?;
        check_write(&shape, &items)?;
    }
}

#[test]
fn out_of_range_integers_are_index_errors() {
    let (x, _) = data(&[2, 3]);
    let e = jnp::index(&x, &jax::s![0, 3]).unwrap_err();
    assert!(e.message.contains("index 3 is out of bounds for axis 1 with size 3"), "{}", e.message);
    let e = jnp::index(&x, &jax::s![-3]).unwrap_err();
    assert!(e.message.contains("index -3 is out of bounds for axis 0 with size 2"), "{}", e.message);
}
